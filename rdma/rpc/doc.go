// Package rpc is octofs's self-identified RPC over reliable-connected
// send/receive: many calls in flight on one queue pair, each matched to its
// reply by the immediate value alone. It knows nothing of files: services
// register handlers for 16-bit ops, callers send opaque payloads.
//
// It owns: the message header and its codec (wire.go, the one place that
// encodes or decodes it), the server (handler registry, completion-queue
// workers, per-connection receive buffers and slots), the client (slot
// table, large-message transfer) and Pool (one shared connection per
// address, dialed lazily, re-dialed after a break, closed when idle).
// Connection requests are accepted and authenticated by the node's single
// rdma.Listener, not here: the acceptor checks the hello in the private
// data and hands RPC connections to Server.Accept with an opaque Peer.
//
// # Wire format
//
// Every message is one SEND_WITH_IMM. Its 32-bit immediate names the
// caller's slot (low 16 bits) and the slot's generation (high 16 bits,
// incremented per call). A request goes into a receive buffer the server
// posted before the client could send; the reply goes into one of the
// client's, carrying the same immediate. The 40-byte versioned header
// (wire.go) carries the kind (request, reply, release), op, flags, status,
// the caller's 64-bit request id, the payload length, the caller's reply
// limit, and for a large message the address and rkey of the sender's
// buffer. The server's accept carries its parameters (slots, receive
// buffer size, largest message) in the private data.
//
// Messages larger than a receive buffer (default 4 KiB, header included)
// go by RDMA READ of the sender's registered buffer, up to MaxMessage
// (default 1 MiB) each way: a large request's header names the client's
// staged buffer and the server READs it before running the handler (the
// client keeps the buffer until the reply); a large reply's header names a
// server buffer, the client READs it and then posts a release (fenced
// behind the READ) so that the server reuses the buffer. Pulling keeps
// each side's memory its own: no side registers windows sized for the
// other's largest message.
//
// # Invariants
//
//   - A slot has at most one call in flight. A call whose context ends is
//     abandoned, not forgotten: its slot is reused only after its late reply
//     has arrived (and, if large, been released) or the connection has
//     broken, so a late reply can never be taken for a later call's, and
//     the server never holds more calls of a connection than its slots.
//     A reply whose immediate, op or request id matches no call in flight
//     is a protocol violation.
//   - The server posts two receives per slot (a request and a release), so
//     a client that keeps to its slots never meets an empty receive queue.
//     It reposts a request's receive buffer, and frees the slot, before it
//     posts the reply.
//   - Every field a peer controls is checked (parseMessage) before anything
//     acts on it. A peer that breaks the protocol (malformed header, unknown
//     kind, slot out of range, two requests on one slot, a release of
//     nothing, a message without immediate) has its connection closed; the
//     server's other connections are unaffected.
//   - Memory the provider may still write (a READ in flight) is never
//     reused or freed before its queue pair is destroyed; a connection's
//     buffers are freed only once its handlers have returned.
//   - Every call in flight ends: with its reply, ErrTimeout when its
//     context ends, or ErrBroken/ErrClosed at once when the connection
//     stops (the client moves its queue pair to the error state, whose
//     flushed receives wake the poller).
//   - Bounded resources: calls in flight per connection (slots), handlers
//     at once (MaxHandlers, beyond which requests are answered
//     StatusBusy), registered memory for large messages (LargeBudget),
//     connections (MaxConns, which also sizes the completion queues so
//     that they cannot overrun).
//
// # Threading
//
// Server: Workers goroutines, each waiting on a completion queue shared by
// the connections assigned to it (one connection each while there are no
// more connections than workers, so that a provider that reads the
// network on the waiting goroutine, as the soft provider does for a
// completion queue with one queue pair, needs no hand-off). A worker
// parses requests, answers refusals itself, and starts each call on a
// goroutine of its own (bounded by MaxHandlers), so a handler that waits
// on another node never blocks a worker; that goroutine READs a large
// request, runs the handler and posts the reply. An op registered with
// HandleInline is first tried on the worker: a short read answers
// without any hand-off, and an attempt that would wait gives up
// (ErrNotInline) and goes to a goroutine like any other call. The replies
// a worker makes for one batch of completions are posted together (one
// write on the soft provider). Each connection has a watcher goroutine that tears it down
// when the peer goes away, the protocol is broken, or the server closes.
//
// Client: no goroutine of its own on the call path. The callers of one
// connection take turns as its poller: the one that finds no poller waits
// on the completion queue itself and hands replies to the other callers'
// slots; when its own call is done it leaves and wakes a waiting caller to
// take over. A provider that reads the network on the goroutine that waits
// for a completion (the soft provider does, for a completion queue with a
// single queue pair, which a client's is) thus serves a lone caller without
// any goroutine hand-off. A watcher goroutine per client notices the
// server's disconnect and releases resources once no caller uses them.
//
// docs/rpc.md says how to operate and benchmark it (octoctl bench rpc).
package rpc
