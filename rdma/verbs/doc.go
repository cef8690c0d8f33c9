// Package verbs is octofs's RDMA provider over libibverbs: InfiniBand,
// RoCE and Soft-RoCE (rxe) devices through the kernel's RDMA stack, behind
// the same rdma interfaces as the pure-Go soft provider.
//
// It needs cgo and libibverbs (Debian: libibverbs-dev to build,
// libibverbs1 and ibverbs-providers to run) and is compiled only with the
// build tag "verbs", so the default build stays CGO-free:
//
//	go build -tags verbs ./...
//	go test -tags verbs ./rdma/verbs   # skips without an RDMA device
//
// Package rdma/provider registers it as "verbs" when built with the tag.
//
// What the provider guarantees beyond the rdma API, and where it differs
// from the soft provider:
//
//   - Registered memory must come from mmap or C (rdma.AllocBuffer, a
//     devdax mapping), never the Go heap: the kernel pins the pages for as
//     long as the region lives, and the Go runtime does not know that.
//     Linux refuses long-term pins of fsdax (file system DAX) pages, so
//     registering an fsdax mapping fails (rdma.ErrInvalid, EOPNOTSUPP);
//     export a devdax device instead. Pinning counts against
//     RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
//   - Device selection: DeviceConfig.Device names the device, else the
//     first one whose port is active. DeviceConfig.Port 0 means port 1.
//     DeviceConfig.GIDIndex rdma.AutoGID (any negative) picks a RoCE v2
//     GID automatically (an IPv4-mapped one first, then a global IPv6
//     one, then link-local); >= 0 uses that index. InfiniBand ports
//     address peers by LID.
//   - Work requests are validated before they reach the device (opcode,
//     SGE count, inline size, atomic length and alignment against the
//     queue pair's requested, not rounded-up, capacities) so that every
//     device reports the same post-time errors. Queue-full is the device's
//     own (ENOMEM): devices round queue sizes up, so a queue may take more
//     requests than QPConfig asked for, and a CQ more completions than its
//     depth before it overruns.
//   - CQ overrun is reported by the device as an asynchronous event; Poll
//     returns rdma.ErrCQOverrun once that event has been read, which can be
//     a moment after the completion that overran.
//   - The rdma API lets a queue pair move from Reset to Err; the kernel
//     does not, so Modify goes through Init. librxe posts receives without
//     a system call, so rxe would never flush a receive posted to a queue
//     pair in Err; the provider re-issues the move to Err after such a
//     post, which makes rxe flush it.
//   - rdma.Faults is not implemented: a kernel device cannot drop its
//     links, delay responses or fail a key on request.
//
// docs/rdma-verbs.md describes running octofs on RDMA NICs and rxe, and
// the VM harness (make vm-test) that runs this package's tests on rxe.
package verbs
