// Package soft is the pure-Go RDMA provider: a user-space NIC that carries
// reliable-connected (RC) traffic over TCP, between goroutines, processes
// or hosts. It is the default provider and the one CI runs.
//
// The provider, not the application, executes one-sided operations: it
// reads WRITE payloads from the socket straight into the registered
// region, writes READ data from it straight to the socket, and performs
// atomics with sync/atomic, after the checks a hardware responder makes
// (rkey, protection domain, access rights, bounds, alignment).
// Completions, error states, flushes, RNR retries, transport timeouts and
// FENCE follow the verbs rules; docs/rdma-soft.md lists the guarantees
// and the differences from hardware.
//
// Transport: the two queue pairs of an RC connection share one TCP
// connection, a link (link.go), which carries both directions; an
// acknowledgement rides on a frame going the other way when one comes
// soon enough (a delayed ACK). The side whose endpoint sorts first dials;
// its hello proves it knows the secret the other side gave in its
// Endpoint through the connection manager, and the answer proves the
// same of the other side, so nobody else can attach to a queue pair. A
// lost link is a transport failure for both queue pairs: their oldest
// outstanding request completes with WCRetryExcErr and they move to the
// error state, as when a NIC exhausts its retries. The wire format is in
// wire.go; every decoder of it has a fuzz target.
//
// Invariants:
//
//   - No application goroutine waits for the peer: PostSend and CQ.Poll
//     write and read only what the socket takes or holds at once; the
//     link's writer goroutine writes the rest (link_tx.go).
//   - A memory region is held for one copy or one non-blocking system
//     call at a time, never across a wait for the network, so MR.Dereg
//     returns promptly whatever a peer does, and fails at once the
//     peer's operations in progress on the region (mr.go).
//   - Reading is resumable at any byte, so whoever reads a link (the
//     goroutine in CQ.Wait, CQ.Poll, or the link's background goroutine)
//     can stop anywhere and another go on (link_rx.go). A CQ.Wait whose
//     context ends returns, whatever has arrived.
//   - Every receive that a SEND starts to fill completes, successfully or
//     flushed; no completion reaches the application while the provider
//     still copies into its buffer (qp.placing).
//   - Unsignaled requests hold their send queue slots until a later
//     signaled request completes, as on a NIC.
//
// Concurrency: all methods are safe for concurrent use. The goroutine
// waiting in CQ.Wait on a CQ of a single queue pair reads that queue
// pair's link itself, which saves a goroutine hand-off per round trip.
package soft
