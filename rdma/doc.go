// Package rdma is octofs's verbs API: devices, protection domains, memory
// regions, completion queues and reliable-connected (RC) queue pairs, shaped
// like libibverbs and implemented by providers.
//
// Providers:
//
//   - soft (package rdma/soft): pure Go, the default. A user-space NIC that
//     carries RC traffic over TCP. One-sided READ, WRITE and atomics are
//     executed by the provider against registered memory, never by
//     application code, with the responder checks, error states and
//     completion rules of real verbs. docs/rdma-soft.md lists what it
//     guarantees and where it differs from hardware.
//   - verbs (package rdma/verbs, build tag "verbs", cgo): libibverbs, for
//     InfiniBand, RoCE and Soft-RoCE (rxe).
//
// Package rdma/provider opens a device by provider name; package
// rdma/rdmatest is the conformance suite every provider passes.
//
// Invariants the API keeps for every provider:
//
//   - A remote access succeeds only if the rkey names a live memory region of
//     the responder queue pair's protection domain, with the REMOTE_* right
//     for the operation and the whole range inside it; otherwise the
//     requester's completion reports WCRemAccessErr. An operation that the
//     responder queue pair's own access flags (set at Init) forbid reports
//     WCRemInvReqErr, as rxe does (some HCAs say WCRemAccessErr). Zero-length
//     operations skip the key check. Both queue pairs then move to QPSErr.
//   - Atomics operate on one 8-byte word in the responder's byte order; its
//     address must be 8-byte aligned (else WCRemInvReqErr), and the local
//     buffer is one 8-byte SGE that receives the original value.
//   - Send-queue completions appear in post order, and only once the
//     operation is done at the responder (for READ and atomics, once the
//     data is in the local buffer). Unsignaled requests complete silently
//     unless they fail, and hold their send-queue slots at least until a
//     later signaled request completes (QP.Caps says how many there are).
//   - Every posted receive completes exactly once: filled, failed, or
//     flushed when its queue pair moves to ERR.
//   - Any failed work request moves its queue pair to QPSErr; every
//     outstanding and later request on both queues then completes with
//     WCWRFlushErr.
//   - A peer that vanishes, or stays connected but silent, completes
//     outstanding work with an error within the queue pair's timeout and
//     retry budget, never a hang.
//   - MR.Dereg does not wait for a peer: the peer's operations in progress
//     on the region complete, or fail with WCRemAccessErr, and nothing is
//     written to the region once Dereg has returned.
//   - Posting and polling never block on the network; CQ.Wait returns
//     when its context ends.
//
// Addresses are the virtual addresses of registered memory (MR.Addr plus an
// offset), as in verbs; use MR.Bytes to reach the memory from Go.
package rdma
