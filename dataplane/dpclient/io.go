package dpclient

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sync"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/internal/sat"
	"github.com/octofs/octofs/rdma"
)

// piece is the part of an I/O inside one chunk.
type piece struct {
	chunk uint64
	off   uint32 // in the chunk
	p     []byte
	// ahead is, for a write, how many bytes after it to allocate if it
	// must allocate.
	ahead uint32
}

// split cuts [off, off+len(p)) at chunk boundaries.
func split(p []byte, off, ahead uint64, out []piece) []piece {
	for len(p) > 0 {
		chunk := off / wire.ChunkSize
		in := uint32(off % wire.ChunkSize)
		n := min(uint64(len(p)), wire.ChunkSize-uint64(in))
		out = append(out, piece{chunk: chunk, off: in, p: p[:n], ahead: uint32(min(ahead, wire.ChunkSize-uint64(in)-n))})
		p = p[n:]
		off += n
	}
	return out
}

// IOVec is one buffer of a vectored I/O and the file offset it goes to.
type IOVec struct {
	Off uint64
	Buf []byte
}

// ReadAt fills p with ino's bytes at off; holes read as zeros. The caller
// keeps the range inside the file's size. Chunks are read in parallel;
// a read inside one chunk whose extents are cached is one RDMA READ per
// extent it touches and no RPC. p is read into in place when it lies in a
// Buffer from AllocBuffer, else through a bounce buffer and one copy.
func (e *Engine) ReadAt(ctx context.Context, ino uint64, p []byte, off uint64) error {
	e.stats.reads.Add(1)
	return e.vector(ctx, ino, []IOVec{{Off: off, Buf: p}}, false)
}

// WriteAt writes p at off of ino, allocating blocks where the range has
// none (unwritten: other clients read zeros there until Persist converts
// them; this client reads its writes at once). When it returns the bytes
// are in the owners' memory but not durable: Persist makes them so.
func (e *Engine) WriteAt(ctx context.Context, ino uint64, p []byte, off uint64) error {
	e.stats.writes.Add(1)
	return e.vector(ctx, ino, []IOVec{{Off: off, Buf: p}}, true)
}

// Reserve allocates, as WriteAt would, the blocks a write of p at off of
// ino needs, without writing anything: the client library keeps small
// writes behind and sends them later as one (docs/client.md), and must
// meet ENOSPC when it accepts a write, as a local file system's delayed
// allocation does, not when the write has been acknowledged. The extents
// stay cached for the write that follows; blocks that are already there
// cost no request.
func (e *Engine) Reserve(ctx context.Context, ino uint64, p []byte, off uint64) error {
	ahead := e.ahead(ino, off, uint64(len(p)))
	e.prefetch(ino, off+uint64(len(p)), ahead)
	for _, pc := range split(p, off, ahead, nil) {
		err := e.retry(ctx, func() error {
			m, node, dc, err := e.chunkConn(ctx, ino, pc.chunk)
			if err != nil {
				return err
			}
			_, _, err = e.extents(ctx, m, node, dc, ino, pc.chunk, true, pc.off, pc.off+uint32(len(pc.p)), pc.ahead)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// ReadV reads every vector of ino at once: all their chunks' READs are in
// flight together.
func (e *Engine) ReadV(ctx context.Context, ino uint64, iov []IOVec) error {
	e.stats.reads.Add(1)
	return e.vector(ctx, ino, iov, false)
}

// WriteV writes every vector of ino at once.
func (e *Engine) WriteV(ctx context.Context, ino uint64, iov []IOVec) error {
	e.stats.writes.Add(1)
	return e.vector(ctx, ino, iov, true)
}

// vector runs the pieces of every vector, in parallel when there are
// several, and returns the first error.
func (e *Engine) vector(ctx context.Context, ino uint64, iov []IOVec, write bool) error {
	var pieces []piece
	for _, v := range iov {
		var ahead uint64
		if write && len(v.Buf) > 0 {
			ahead = e.ahead(ino, v.Off, uint64(len(v.Buf)))
			e.prefetch(ino, v.Off+uint64(len(v.Buf)), ahead)
		}
		pieces = split(v.Buf, v.Off, ahead, pieces)
	}
	if len(pieces) == 1 {
		return e.pieceIO(ctx, ino, pieces[0], write)
	}
	errs := make([]error, len(pieces))
	var wg sync.WaitGroup
	for i := range pieces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.pieceIO(ctx, ino, pieces[i], write)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pieceIO reads or writes one chunk piece, retrying what a new connection,
// new extents or a new map may cure.
func (e *Engine) pieceIO(ctx context.Context, ino uint64, pc piece, write bool) error {
	if len(pc.p) == 0 {
		return nil
	}
	return e.retry(ctx, func() error { return e.tryPiece(ctx, ino, pc, write) })
}

func (e *Engine) tryPiece(ctx context.Context, ino uint64, pc piece, write bool) error {
	m, node, dc, err := e.chunkConn(ctx, ino, pc.chunk)
	if err != nil {
		return err
	}
	lo, hi := pc.off, pc.off+uint32(len(pc.p))
	exts, own, err := e.extents(ctx, m, node, dc, ino, pc.chunk, write, lo, hi, pc.ahead)
	if err != nil {
		return err
	}
	if write && !writable(exts, own, lo, hi, dc.grant.BlockSize) {
		// Allocation made the range writable; this means a concurrent
		// trim or punch: ask again.
		e.dropChunk(ino, pc.chunk)
		return fmt.Errorf("%w: chunk %d lost blocks while written", errRetry, pc.chunk)
	}

	// Local memory: the caller's own registered buffer, or a bounce
	// buffer (one copy).
	var lkey uint32
	var laddr uint64
	var bb *bounce
	if mr := e.bufs.lookup(pc.p); mr != nil {
		lkey, laddr = mr.LKey(), addrOf(pc.p)
	} else {
		if bb, err = e.bounces.get(len(pc.p)); err != nil {
			return err
		}
		defer e.bounces.put(bb)
		lkey, laddr = bb.mr.LKey(), bb.mr.Addr()
		if write {
			copy(bb.buf, pc.p)
			e.stats.copied.Add(uint64(len(pc.p)))
		}
	}
	opcode := rdma.OpRead
	if write {
		opcode = rdma.OpWrite
	}
	wrs := make([]rdma.SendWR, 0, 4)
	sges := make([]rdma.SGE, 0, 4)
	stamps := make([]uint64, 0, 4)
	// transfer moves chunk bytes [from, to) of extent x.
	transfer := func(x wire.Extent, from, to uint32) {
		sges = append(sges, rdma.SGE{Addr: laddr + uint64(from-lo), Length: to - from, LKey: lkey})
		wrs = append(wrs, rdma.SendWR{Opcode: opcode, RemoteAddr: x.Addr + uint64(from-x.Off), RKey: x.RKey})
		stamps = append(stamps, x.Stamp)
	}
	at := lo
	for _, x := range exts {
		if x.End() <= at {
			continue
		}
		if at >= hi {
			break
		}
		if x.Off > at {
			// A hole (writable ruled it out for writes).
			gap := min(x.Off, hi)
			e.zeroLocal(pc, bb, lo, at, gap)
			at = gap
			if at >= hi {
				break
			}
		}
		end := min(x.End(), hi)
		switch {
		case write || !x.Unwritten():
			transfer(x, at, end)
		default:
			// Unwritten: zeros, but for what this client wrote there.
			for _, w := range own[x.Stamp] {
				wlo, whi := max(w.lo, at), min(w.hi, end)
				if wlo >= whi {
					continue
				}
				e.zeroLocal(pc, bb, lo, at, wlo)
				transfer(x, wlo, whi)
				at = whi
			}
			e.zeroLocal(pc, bb, lo, at, end)
		}
		at = end
	}
	if at < hi {
		e.zeroLocal(pc, bb, lo, at, hi)
	}
	for i := range wrs {
		wrs[i].SGL = sges[i : i+1]
	}
	if len(wrs) > 0 {
		r, err := dc.post(ctx, wrs)
		if err == nil {
			err = dc.wait(ctx, r)
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// A remote access error (a stale rkey: the node evicted
			// us, or restarted) or a broken link: the queue pair is
			// in error either way. New connection, new extents.
			dc.fail(fmt.Errorf("%w: %w", errConnLost, err))
			e.dropChunk(ino, pc.chunk)
			return fmt.Errorf("%w: %w", errRetry, err)
		}
		if write {
			e.stats.rdmaWrites.Add(uint64(len(wrs)))
		} else {
			e.stats.rdmaReads.Add(uint64(len(wrs)))
		}
	}
	if write {
		e.stats.bytesWritten.Add(uint64(hi - lo))
		key := ownerKey{node.ID, dc.grant.Incarnation}
		for i, wr := range wrs {
			from := lo + uint32(wr.SGL[0].Addr-laddr)
			e.noteWrite(ino, key, pc.chunk, stamps[i], from, from+wr.SGL[0].Length)
		}
	} else {
		e.stats.bytesRead.Add(uint64(hi - lo))
		if bb != nil {
			copy(pc.p, bb.buf[:hi-lo])
			e.stats.copied.Add(uint64(hi - lo))
		}
	}
	return nil
}

// zeroLocal zeroes the destination of chunk bytes [from, to) of a read
// (a hole).
func (e *Engine) zeroLocal(pc piece, bb *bounce, lo, from, to uint32) {
	if bb != nil {
		clear(bb.buf[from-lo : to-lo])
		return
	}
	clear(pc.p[from-lo : to-lo])
}

// Persist makes every range this client wrote to ino durable in the
// owners' persistence domains: one persist RPC per owner touched, in
// parallel. Each owner flushes the ranges and converts the unwritten
// blocks they cover whole, so other clients read them from then on.
// ErrDataLost if an owner restarted since the write.
func (e *Engine) Persist(ctx context.Context, ino uint64) error {
	e.stats.persists.Add(1)
	e.mu.Lock()
	snap := e.dirty[ino]
	delete(e.dirty, ino)
	ps := &persisting{w: snap}
	if len(snap) > 0 {
		// Until it ends, reads still show these writes from
		// unwritten extents.
		e.persisting[ino] = append(e.persisting[ino], ps)
	}
	e.mu.Unlock()
	if len(snap) == 0 {
		return nil
	}
	type outcome struct {
		key ownerKey
		err error
	}
	out := make(chan outcome, len(snap))
	for key, chunks := range snap {
		go func() { out <- outcome{key, e.persistOwner(ctx, ino, key, chunks)} }()
	}
	var errs []error
	failed := make(map[ownerKey]bool)
	for range snap {
		o := <-out
		if o.err != nil {
			errs = append(errs, o.err)
			failed[o.key] = true
			if errors.Is(o.err, ErrDataLost) {
				failed[o.key] = false
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// In one step: what the owners converted becomes written in the
	// cache, the snapshot leaves, and fetches in flight (whose replies
	// may predate the conversions) are not cached.
	e.gen[ino]++
	for key, chunks := range snap {
		if retry, ok := failed[key]; ok {
			if retry {
				// Keep the ranges for the next Persist.
				w := e.dirty[ino]
				if w == nil {
					w = make(writes)
					e.dirty[ino] = w
				}
				w.merge(key, chunks)
			}
			continue
		}
		for wk, s := range chunks {
			c := e.cache[ino][wk.chunk]
			if wk.stamp == 0 || c == nil || c.dc == nil || c.dc.node != key.node || c.dc.grant.Incarnation != key.incarnation {
				continue
			}
			blocks := s.wholeBlocks(c.dc.grant.BlockSize)
			if len(blocks) > 0 {
				e.cache[ino][wk.chunk] = &cached{dc: c.dc, expires: c.expires, exts: convertCached(c.exts, wk.stamp, blocks), tick: c.tick, alloc: c.alloc}
			}
		}
	}
	if list := slices.DeleteFunc(e.persisting[ino], func(p *persisting) bool { return p == ps }); len(list) > 0 {
		e.persisting[ino] = list
	} else {
		delete(e.persisting, ino)
	}
	return errors.Join(errs...)
}

func (e *Engine) persistOwner(ctx context.Context, ino uint64, key ownerKey, chunks map[writeKey]spans) error {
	var ranges []wire.Range
	for wk, s := range chunks {
		for _, x := range s {
			ranges = append(ranges, wire.Range{Chunk: wk.chunk, Off: x.lo, Len: x.hi - x.lo, Stamp: wk.stamp})
		}
	}
	slices.SortFunc(ranges, func(a, b wire.Range) int {
		return cmp.Or(cmp.Compare(a.Chunk, b.Chunk), cmp.Compare(a.Stamp, b.Stamp), cmp.Compare(a.Off, b.Off))
	})
	for len(ranges) > 0 {
		// A batch ends at a (chunk, stamp) boundary where it can, since
		// the owner converts what the ranges of one stamp in one
		// request cover whole.
		n := min(len(ranges), wire.MaxRanges)
		for n < len(ranges) && n > 1 && ranges[n-1].Chunk == ranges[n].Chunk && ranges[n-1].Stamp == ranges[n].Stamp {
			n--
		}
		if n == 1 {
			n = min(len(ranges), wire.MaxRanges)
		}
		batch := ranges[:n]
		ranges = ranges[n:]
		err := e.retry(ctx, func() error {
			m := e.cfg.Map.Current()
			node, ok := m.Node(key.node)
			if !ok {
				return fmt.Errorf("%w: node %s left the map", ErrDataLost, key.node)
			}
			_, err := e.call(ctx, node, &wire.Request{Op: wire.OpPersist, Header: e.header(m), Ino: ino, Owner: key.incarnation, Ranges: batch})
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Allocate applies a fallocate mode to [off, off+length) of ino on the data
// side: blocks for the range (default, FALLOC_FL_KEEP_SIZE), holes with
// zeroed edges (FALLOC_FL_PUNCH_HOLE), zeros with blocks
// (FALLOC_FL_ZERO_RANGE). The size is the namespace's: the client library
// updates it when the mode does not keep it.
func (e *Engine) Allocate(ctx context.Context, ino uint64, mode uint32, off, length uint64) error {
	e.stats.allocates.Add(1)
	if mode&^(wire.FallocKeepSize|wire.FallocPunchHole|wire.FallocZeroRange) != 0 ||
		(mode&wire.FallocPunchHole != 0 && mode&wire.FallocZeroRange != 0) {
		return fmt.Errorf("%w: fallocate mode %#x not supported", ErrIO, mode)
	}
	empty := 0 // chunks in a row a punch found without blocks
	for length > 0 {
		chunk := off / wire.ChunkSize
		if mode&wire.FallocPunchHole != 0 && empty == seekScan {
			// A punch over holes: skip to the next chunk holding
			// blocks (a hole punched in a hole changes nothing), as
			// SEEK_DATA does.
			empty = 0
			next, found, err := e.nextData(ctx, ino, chunk, off+length)
			if err != nil || !found {
				return err
			}
			if next > chunk {
				skip := next*wire.ChunkSize - off
				off, length = off+skip, length-skip
				continue
			}
		}
		in := off % wire.ChunkSize
		n := min(length, wire.ChunkSize-in)
		ln := uint32(n)
		var exts []wire.Extent
		err := e.retry(ctx, func() error {
			m, node, dc, err := e.chunkConn(ctx, ino, chunk)
			if err != nil {
				return err
			}
			e.mu.Lock()
			gen := e.gen[ino]
			e.mu.Unlock()
			exts, err = e.fetch(ctx, node, dc, &wire.Request{Op: wire.OpFallocate, Header: e.header(m),
				Session: dc.grant.Session, Ino: ino, Chunk: chunk, Off: uint32(in), Len: ln, Mode: mode}, gen)
			return err
		})
		if err != nil {
			return err
		}
		if len(exts) == 0 {
			empty++
		} else {
			empty = 0
		}
		off += n
		length -= n
	}
	return nil
}

// StatFS sums the data capacity of every node.
func (e *Engine) StatFS(ctx context.Context) (wire.Capacity, error) {
	s, err := e.Space(ctx)
	return s.Capacity, err
}

// Space is the cluster's capacity as a writer meets it.
type Space struct {
	// Capacity is the sum over the nodes.
	wire.Capacity
	// Writable is what new data can take before some node runs out:
	// data is striped over the nodes by partition, so a node holding a
	// share s of the partitions takes a share s of new data, and the
	// node whose free space is the smallest multiple of its share ends
	// every writer's room with ENOSPC while the others still have some
	// (at most Free).
	Writable uint64
}

// Space asks every node for its capacity (StatFS is its sum).
func (e *Engine) Space(ctx context.Context) (Space, error) {
	m := e.cfg.Map.Current()
	shares := map[cluster.NodeID]uint64{}
	for _, id := range m.Partitions {
		shares[id]++
	}
	var mu sync.Mutex
	var s Space
	writable := uint64(math.MaxUint64)
	err := broadcast(ctx, e.cfg.RPC, m, &wire.Request{Op: wire.OpStatfs, Header: e.header(m)}, func(n cluster.NodeInfo, r wire.Reply) {
		mu.Lock()
		defer mu.Unlock()
		// Saturating: a node that claims near 2^64 bytes must not
		// wrap the sums to a plausible figure.
		s.Total = sat.Add(s.Total, r.Capacity.Total)
		s.Free = sat.Add(s.Free, r.Capacity.Free)
		s.Used = sat.Add(s.Used, r.Capacity.Used)
		s.Quarantined = sat.Add(s.Quarantined, r.Capacity.Quarantined)
		if share := shares[n.ID]; share > 0 {
			// Free × P / share, in 128 bits' worth of care: Free is
			// below 2^64 and P below 2^32.
			hi, lo := bits.Mul64(r.Capacity.Free, uint64(len(m.Partitions)))
			if hi < share {
				q, _ := bits.Div64(hi, lo, share)
				writable = min(writable, q)
			}
		}
	}, &e.stats)
	s.Writable = min(writable, s.Free)
	return s, err
}

// broadcast sends req to every node of m that holds partitions, in
// parallel, and calls each (if set) with every OK reply. A node that fails
// makes it fail.
func broadcast(ctx context.Context, rpc Caller, m *cluster.Map, req *wire.Request, each func(cluster.NodeInfo, wire.Reply), count *counters) error {
	if !m.Initialized() {
		return fmt.Errorf("%w: no cluster map", ErrIO)
	}
	b := req.Encode()
	var wg sync.WaitGroup
	errs := make([]error, len(m.Nodes))
	for i, n := range m.Nodes {
		if n.State != cluster.StateUp && n.State != cluster.StateDown && n.State != cluster.StateDraining {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if count != nil {
				count.rpc(req.Op)
			}
			out, err := rpc.Call(ctx, n, uint16(req.Op), b)
			if err != nil {
				errs[i] = fmt.Errorf("%w: %v at node %s: %w", ErrIO, req.Op, n.ID, err)
				return
			}
			rep, err := wire.DecodeReply(out)
			if err != nil {
				errs[i] = fmt.Errorf("%w: %v reply from node %s: %w", ErrIO, req.Op, n.ID, err)
				return
			}
			if rep.Status != wire.StatusOK {
				errs[i] = fmt.Errorf("%w: %v at node %s: %v: %s", ErrIO, req.Op, n.ID, rep.Status, rep.Message)
				return
			}
			if each != nil {
				each(n, rep)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
