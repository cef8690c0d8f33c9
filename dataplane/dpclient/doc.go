// Package dpclient is the client's data I/O engine: it reads and writes
// file chunks at their owners with one-sided RDMA. The client library
// (package client) wraps it into files; it knows nothing of files beyond
// inode numbers and byte ranges, and nothing of FUSE.
//
// # How an I/O goes
//
// A range is cut at chunk boundaries (wire.ChunkSize); each chunk piece
// goes to the chunk's owner (cluster.Map.ChunkOwner) and the pieces run in
// parallel. For each piece the engine needs the chunk's extents for its
// data connection to the owner: from its cache while their lease lasts,
// else by one map RPC (reads) or allocate RPC (writes that meet a hole, or
// cover an unwritten block in part). It then posts one RDMA READ or WRITE
// per extent the piece touches on the owner's data connection (one RC
// queue pair per node, apart from the RPC connection), the last one
// signaled, and waits. Holes and unwritten extents read as zeros without
// any transfer, except where this client wrote them and has not yet seen
// the write persisted (it reads those back, POSIX within one client).
// Writes are recorded per owner process, chunk and extent stamp as exact
// byte ranges; Persist sends each owner touched one persist RPC naming
// that process's incarnation, and the owner flushes the ranges and
// converts the unwritten blocks they cover whole.
//
// A write that starts where the last one to the file ended (or at 0)
// continues a stream; when it must allocate it asks for as many bytes
// ahead as the stream has written, to the chunk's end, so a sequential
// writer makes about one allocate RPC per chunk; once the stream is two
// chunks long, the next Config.Prefetch chunks are allocated in the
// background while it writes.
//
// # Memory
//
// A caller's slice that lies in a Buffer from AllocBuffer is read into or
// written from in place (zero copy). Any other slice goes through a
// registered bounce buffer and one copy (Stats.BytesCopied counts them).
//
// # Failures
//
// A remote access error (the owner evicted this client, its token was
// rotated, or it restarted: every rkey of the old connection is dead), a
// broken connection, a reply naming a session the owner no longer has, or
// a wrong-owner reply end the attempt: the engine closes the data
// connection if it failed, drops the chunk's extents, waits for a newer
// map where the owner said so, and tries again (Config.Attempts times).
// The application sees no error unless the attempts run out. ENOSPC,
// ErrDataLost (an owner restarted between a write and its persist: fsync
// must fail) and malformed replies are not retried.
//
// # Leases
//
// Extents are used only until the lease the owner granted, counted from
// when the request was sent (before the owner could have computed the
// reply), by the engine's clock. The owner keeps freed blocks out of use
// for longer than that (dataplane.ServiceConfig.Quarantine), so a stale
// extent never reaches another file's bytes.
//
// # Baseline
//
// Baseline reads and writes a file's blocks with bare RDMA operations on
// connections of its own: the raw figure benchmarks set beside the
// engine's (octoctl bench data, the timing tests).
//
// # Counters
//
// Stats counts file-level calls, RDMA work requests, RPCs by op, bytes
// moved and copied, retries and reconnects, for /metrics and benchmarks.
package dpclient
