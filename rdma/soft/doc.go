// Package soft is the pure-Go RDMA provider: a user-space NIC that carries
// reliable-connected (RC) traffic over TCP, between goroutines, processes
// or hosts. It is the default provider and the one CI runs.
//
// The provider, not the application, executes one-sided operations: the
// responder goroutine of a queue pair reads WRITE payloads from the socket
// straight into the registered region, writes READ data from it straight to
// the socket, and performs atomics with sync/atomic, after the checks a
// hardware responder makes (rkey, protection domain, access rights, bounds,
// alignment). Completions, error states, flushes, RNR retries, transport
// timeouts and FENCE follow the verbs rules; docs/rdma-soft.md lists the
// guarantees and the differences from hardware.
//
// Transport: each queue pair that sends requests dials the peer device and
// owns that TCP connection; requests travel one way on it and responses
// the other. A lost connection is a transport failure: the queue pair's
// outstanding requests complete with WCRetryExcErr and it moves to the
// error state, as when a NIC exhausts its retries. The wire format is in
// wire.go; every decoder of it has a fuzz target.
//
// Concurrency: all methods are safe for concurrent use. PostSend never
// blocks on the network: small requests are written by the posting
// goroutine when no other transmission is under way, larger ones by a
// sender goroutine per queue pair. Responses are read by the goroutine
// waiting in CQ.Wait for their completion when possible, and by a
// background goroutine otherwise (rx.go), which saves a goroutine hand-off
// per round trip.
package soft
