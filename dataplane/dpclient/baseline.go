package dpclient

import (
	"context"
	"fmt"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/rdma"
)

// Baseline moves bytes between registered memory and a file's blocks with
// bare RDMA READ and WRITE, on data connections of its own, with nothing
// of the engine in between: no cache, no lease, no allocation, no
// retry. Benchmarks run it beside the engine in the same run (octoctl
// bench data, the timing tests), so that the engine's cost shows as a
// ratio to the raw one-sided operations of the same provider, against the
// same remote memory.
type Baseline struct {
	e     *Engine
	conns map[cluster.NodeID]*dataConn
	// exts are the file's extents by chunk, for this baseline's
	// connections.
	exts map[uint64]baselineChunk
}

type baselineChunk struct {
	dc   *dataConn
	exts []wire.Extent
}

// NewBaseline connects to the owners of ino's first size bytes and fetches
// the extents of those chunks for its connections. The range must be
// mapped (written, or allocated with Allocate); holes are an error, since
// a raw operation has nowhere to go there.
func (e *Engine) NewBaseline(ctx context.Context, ino, size uint64) (*Baseline, error) {
	b := &Baseline{e: e, conns: make(map[cluster.NodeID]*dataConn), exts: make(map[uint64]baselineChunk)}
	for chunk := uint64(0); chunk*wire.ChunkSize < size; chunk++ {
		m, node, err := e.owner(ino, chunk)
		if err != nil {
			b.Close()
			return nil, err
		}
		dc := b.conns[node.ID]
		if dc == nil {
			if dc, err = e.dial(ctx, node); err != nil {
				b.Close()
				return nil, err
			}
			b.conns[node.ID] = dc
		}
		rep, err := e.call(ctx, node, &wire.Request{Op: wire.OpMap, Header: e.header(m), Session: dc.grant.Session, Ino: ino, Chunk: chunk})
		if err != nil {
			b.Close()
			return nil, err
		}
		n := uint32(min(wire.ChunkSize, size-chunk*wire.ChunkSize))
		if !writable(rep.Extents, nil, 0, n, 1) {
			b.Close()
			return nil, fmt.Errorf("%w: inode %d chunk %d has holes: allocate the range first", ErrIO, ino, chunk)
		}
		b.exts[chunk] = baselineChunk{dc: dc, exts: rep.Extents}
	}
	return b, nil
}

// Do runs one raw operation per piece of [off, off+len(p)) in one chunk
// (one work request per extent it touches, the last one signaled), all
// chunks' pieces in flight together, and waits for them. p must lie in a
// Buffer of the engine.
func (b *Baseline) Do(ctx context.Context, op rdma.Opcode, p []byte, off uint64) error {
	mr := b.e.bufs.lookup(p)
	if mr == nil {
		return fmt.Errorf("%w: baseline memory must come from AllocBuffer", ErrIO)
	}
	type posted struct {
		dc *dataConn
		r  *request
	}
	var reqs []posted
	for _, pc := range split(p, off, 0, nil) {
		c, ok := b.exts[pc.chunk]
		if !ok {
			return fmt.Errorf("%w: chunk %d is outside the baseline's range", ErrIO, pc.chunk)
		}
		lo, hi := pc.off, pc.off+uint32(len(pc.p))
		var wrs []rdma.SendWR
		sges := make([]rdma.SGE, 0, 2)
		for _, x := range c.exts {
			from, to := max(lo, x.Off), min(hi, x.End())
			if from >= to {
				continue
			}
			sges = append(sges, rdma.SGE{Addr: addrOf(pc.p) + uint64(from-lo), Length: to - from, LKey: mr.LKey()})
			wrs = append(wrs, rdma.SendWR{Opcode: op, RemoteAddr: x.Addr + uint64(from-x.Off), RKey: x.RKey})
		}
		for i := range wrs {
			wrs[i].SGL = sges[i : i+1]
		}
		r, err := c.dc.post(ctx, wrs)
		if err != nil {
			return err
		}
		reqs = append(reqs, posted{c.dc, r})
	}
	var first error
	for _, pr := range reqs {
		if err := pr.dc.wait(ctx, pr.r); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close ends the baseline's connections.
func (b *Baseline) Close() {
	for _, dc := range b.conns {
		dc.fail(ErrClosed)
	}
	b.conns = nil
}
