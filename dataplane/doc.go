// Package dataplane moves file bytes between clients and the nodes' pmem
// regions: the client asks a chunk's owner where the bytes live, then reads
// and writes them with one-sided RDMA, so the owner's CPU is off the data
// path.
//
// # Connections
//
// A node has one rdma.Listener. Every connection request carries a Hello
// (binary, internal/codec) in its private data: its Purpose (PurposeRPC or
// PurposeData), the cluster token, the caller's ClientID and Incarnation,
// and for node-to-node connections the calling Node. The node's accept
// loop decodes it (DecodeHello), checks it (Hello.Authorize) and routes:
// RPC connections to the rdma/rpc server, data connections to
// Export.Accept, which answers with a Grant (the data session's id, the
// node's incarnation, the block size). DialData is the client side.
//
// # Export: what is remotely accessible
//
// Export registers nothing at start. Each data connection gets a
// protection domain of its own; the spans the chunk service exposes
// (Expose: its data pools, never superblocks, redo log, bitmaps, records
// or service logs) are registered in it lazily, one memory region per
// span, the first time the chunk service hands that session an extent in
// the span (RemoteKey). Invariants:
//
//   - Only exposed spans are in any memory region with remote rights.
//   - An rkey works only on the connection it was issued for (a queue pair
//     reaches only its own protection domain's regions).
//   - When a connection ends (client gone, Evict, Revalidate after a token
//     rotation, Export.Close, or the node process dying) its regions are
//     deregistered before anything else happens to it: every rkey it was
//     given fails at the responder (remote access error) from then on.
//   - Withdraw(span) returns only when no session can reach the span.
//
// # Chunk service
//
// Service keeps, for every chunk partition the node owns, a plog log
// (service wire.ServiceChunks) of extent-map changes, the partition's data
// pools (plog pools, sub-allocated in DRAM) and the extent maps in DRAM,
// rebuilt by replaying the log at start and rewritten by Checkpoint. Serve
// answers every op in wire.Ops. A block of a chunk is a hole, written
// (reads its bytes), or unwritten (reads as zeros whatever it holds; its
// allocation's stamp tells one allocation from another). Invariants:
//
//   - A mapped block lies in a pool of its partition and is mapped once;
//     a free block is in no map; replay refuses a log that breaks this.
//   - No byte a block held for a previous owner is ever readable, before
//     or after a crash: a fresh block is mapped unwritten, or zeroed and
//     persisted before the record that maps it written is appended; an
//     unwritten block becomes written only by a persist that covers it
//     whole with ranges of its stamp (its bytes flushed first), or by
//     being zeroed and persisted when a write covers it in part.
//   - Unwritten blocks allocated for writes are volatile: in DRAM only
//     until the persist that converts them logs them written. A restart
//     forgets them and their blocks are free; nothing durable was promised
//     for them.
//   - A freed block is quarantined (ServiceConfig.Quarantine, longer than
//     the extent lease, counted from the last reply that named its chunk's
//     extents) before it is handed out again.
//   - Every logged change is one log append, applied to DRAM after it is
//     durable, under the partition's lock.
//   - Pools leave ServiceConfig.LogReserve of the region to the logs.
//   - Each request is its connection's: its client id and incarnation are
//     those of the connection's Hello (Serve's peer, an Identified), and
//     only nodes of the map trim, free or move deferred trims.
//
// Truncate and Free (the namespace's data hooks) trim a file on every
// node; a node that is down gets the trim deferred in this node's node log
// (partition wire.NodeLog), and a node serves an inode's chunks only once,
// in its current up period, it has collected and applied what the inode's
// owner deferred for it (trims.go).
//
// docs/dataplane.md explains the design, the consistency model and the
// tests.
//
// StartExport and DialExport are the previous whole-region export, kept
// until the node's wiring uses NewExport; they register every byte of the
// region, metadata included, for any token holder.
//
// # Wiring (package node)
//
//	inc := dataplane.RandomID()                 // the node process's incarnation
//	exp, _ := dataplane.NewExport(dataplane.ExportConfig{Region, Device, Token, Incarnation: inc, Logger})
//	// accept loop on the node's one listener:
//	h, err := dataplane.DecodeHello(req.PrivateData)  // reject on error
//	switch h.Purpose {
//	case dataplane.PurposeRPC:  rpcServer.Accept(ctx, req, h)
//	case dataplane.PurposeData: exp.Accept(ctx, req, h)
//	}
//	svc, _ := dataplane.NewService(dataplane.ServiceConfig{Store, Export: exp, Map, Self, Pin,
//		Peers: peerPool, ClientID: id, Incarnation: inc, Now, Logger}) // id, inc: the peer pool's Hello
//	for _, op := range wire.Ops { rpcServer.Handle(uint16(op), ... svc.Serve(ctx, op, call.Peer, call.Payload)) }
//	// RPC peers implement Identified (Hello() returns the connection's Hello)
//	// the namespace service's data hooks: svc.Truncate(ctx, ino, oldSize, size), svc.Free(ctx, ino, size)
//	// every second or so: svc.Sweep() (ends quarantines, frees empty pools, collects deferred trims)
//	// on token rotation: exp.Revalidate(); to evict a client: exp.Evict(id)
//	// shutdown: stop the accept loop and RPC server, then exp.Close()
//	// before the region.
package dataplane
