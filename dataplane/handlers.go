package dataplane

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
)

// Serve executes one chunk-service request and returns the encoded reply.
// It never fails: every outcome is a reply status. The node's RPC server
// calls it for every op in wire.Ops (Handlers adapts it).
func (s *Service) Serve(ctx context.Context, op wire.Op, b []byte) []byte {
	req, err := wire.DecodeRequest(b)
	if err == nil && req.Op != op {
		err = fmt.Errorf("%w: op %v in a request sent as %v", wire.ErrMalformed, req.Op, op)
	}
	var rep wire.Reply
	if err == nil {
		rep, err = s.serve(ctx, &req)
	}
	if err != nil {
		rep = wire.Reply{Status: statusOf(err), Message: err.Error()}
		if m := s.cfg.Map.Current(); m != nil {
			rep.Epoch = m.Epoch
		}
	}
	rep.Incarnation = s.cfg.Export.Incarnation()
	return rep.Encode()
}

// errWrongOwner carries the node's epoch to the reply.
type errWrongOwner struct {
	partition uint32
	epoch     uint64
}

func (e *errWrongOwner) Error() string {
	return fmt.Sprintf("dataplane: this node does not own partition %d at epoch %d", e.partition, e.epoch)
}

var errDataLost = errors.New("dataplane: the node restarted since the data was written; it may be lost (write it again)")

func statusOf(err error) wire.Status {
	var wo *errWrongOwner
	switch {
	case errors.As(err, &wo):
		return wire.StatusWrongOwner
	case errors.Is(err, ErrNoSpace):
		return wire.StatusNoSpace
	case errors.Is(err, ErrNoSession):
		return wire.StatusNoSession
	case errors.Is(err, errDataLost):
		return wire.StatusDataLost
	case errors.Is(err, wire.ErrMalformed):
		return wire.StatusBadRequest
	}
	return wire.StatusIO
}

func (s *Service) serve(ctx context.Context, req *wire.Request) (wire.Reply, error) {
	switch req.Op {
	case wire.OpMap, wire.OpAllocate, wire.OpFallocate:
		return s.serveChunk(ctx, req)
	case wire.OpPersist:
		return wire.Reply{}, s.persist(ctx, req)
	case wire.OpTrim:
		return wire.Reply{}, s.Trim(req.Ino, req.Size)
	case wire.OpFree:
		return wire.Reply{}, s.Trim(req.Ino, 0)
	case wire.OpStatfs:
		return wire.Reply{Capacity: s.Capacity()}, nil
	}
	return wire.Reply{}, fmt.Errorf("%w: unknown op %v", wire.ErrMalformed, req.Op)
}

// chunkPartition checks that this node owns chunk's partition and returns
// the partition's state (nil when it has none and create is unset).
func (s *Service) chunkPartition(ctx context.Context, req *wire.Request, chunk uint64, create bool) (*partition, error) {
	m := s.cfg.Map.Current()
	if !m.Initialized() {
		return nil, fmt.Errorf("dataplane: node has no cluster map yet")
	}
	pid := cluster.ChunkPartition(req.Ino, chunk, m.NumPartitions())
	if ok, epoch := s.owns(ctx, pid, req.Epoch); !ok {
		return nil, &errWrongOwner{partition: pid, epoch: epoch}
	}
	return s.partitionFor(ctx, pid, create)
}

// serveChunk runs map, allocate and fallocate: each ends with the chunk's
// extents for the caller's data session.
func (s *Service) serveChunk(ctx context.Context, req *wire.Request) (wire.Reply, error) {
	if cid, err := s.cfg.Export.SessionClient(req.Session); err != nil {
		return wire.Reply{}, err
	} else if cid != req.ClientID {
		return wire.Reply{}, fmt.Errorf("%w: session %d is another client's", ErrNoSession, req.Session)
	}
	create := req.Op != wire.OpMap && req.Len > 0 && !(req.Op == wire.OpFallocate && req.Mode&wire.FallocPunchHole != 0)
	p, err := s.chunkPartition(ctx, req, req.Chunk, create)
	if err != nil || p == nil {
		return wire.Reply{Lease: s.cfg.Lease}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken != nil {
		return wire.Reply{}, p.broken
	}
	if req.Len > 0 {
		switch req.Op {
		case wire.OpAllocate:
			err = s.ensure(p, req.Ino, req.Chunk, req.Off/uint32(s.bs), blockEnd(req.Off, req.Len, s.bs))
		case wire.OpFallocate:
			err = s.fallocate(p, req)
		}
		if err != nil {
			return wire.Reply{}, err
		}
	}
	exts, err := s.extents(p, req.Ino, req.Chunk, req.Session)
	if err != nil {
		return wire.Reply{}, err
	}
	return wire.Reply{Lease: s.cfg.Lease, Extents: exts}, nil
}

// blockEnd is the index one past the block holding the range's last byte.
func blockEnd(off, n uint32, bs uint64) uint32 {
	return uint32((uint64(off) + uint64(n) + bs - 1) / bs)
}

// fallocate applies a mode to a range of one chunk; p.mu is held.
func (s *Service) fallocate(p *partition, req *wire.Request) error {
	first, end := req.Off/uint32(s.bs), blockEnd(req.Off, req.Len, s.bs)
	key := chunkKey{req.Ino, req.Chunk}
	switch {
	case req.Mode&wire.FallocPunchHole != 0:
		// Whole blocks inside the range become holes; the partial
		// blocks at its edges get zeros.
		m := p.chunks[key]
		if m == nil {
			return nil
		}
		inFirst := uint32((uint64(req.Off) + s.bs - 1) / s.bs)
		inEnd := uint32((uint64(req.Off) + uint64(req.Len)) / s.bs)
		if err := s.zeroMapped(m, uint64(req.Off), uint64(req.Len)); err != nil {
			return err
		}
		if inFirst < inEnd && len(m.overlapping(inFirst, inEnd)) > 0 {
			return s.append(p, wire.Record{Kind: wire.RecordUnmap, Ino: req.Ino, Chunk: req.Chunk, First: inFirst, Count: inEnd - inFirst})
		}
		return nil
	case req.Mode&wire.FallocZeroRange != 0:
		if m := p.chunks[key]; m != nil {
			if err := s.zeroMapped(m, uint64(req.Off), uint64(req.Len)); err != nil {
				return err
			}
		}
		return s.ensure(p, req.Ino, req.Chunk, first, end)
	default:
		// Default and KEEP_SIZE: blocks for the range, fresh ones
		// zeroed; the size is the namespace's.
		return s.ensure(p, req.Ino, req.Chunk, first, end)
	}
}

// zeroMapped writes zeros over the mapped bytes of chunk range [off,
// off+n), partial blocks at the edges only when the range does not cover
// them whole is the caller's business: it zeroes every mapped byte.
func (s *Service) zeroMapped(m *chunkMap, off, n uint64) error {
	first, end := uint32(off/s.bs), uint32((off+n+s.bs-1)/s.bs)
	for _, r := range m.overlapping(first, end) {
		lo := max(off, uint64(r.First)*s.bs)
		hi := min(off+n, uint64(r.First+r.Count)*s.bs)
		if lo >= hi {
			continue
		}
		if err := s.zero(s.blockOff(r.Block)+lo-uint64(r.First)*s.bs, hi-lo); err != nil {
			return err
		}
	}
	return nil
}

// persist makes the mapped bytes of the request's ranges durable.
func (s *Service) persist(ctx context.Context, req *wire.Request) error {
	if req.Owner != s.cfg.Export.Incarnation() {
		return errDataLost
	}
	type span struct{ off, n uint64 }
	var spans []span
	for _, g := range req.Ranges {
		p, err := s.chunkPartition(ctx, req, g.Chunk, false)
		if err != nil {
			return err
		}
		if p == nil || g.Len == 0 {
			continue
		}
		p.mu.Lock()
		if m := p.chunks[chunkKey{req.Ino, g.Chunk}]; m != nil {
			off, n := uint64(g.Off), uint64(g.Len)
			for _, r := range m.overlapping(uint32(off/s.bs), uint32((off+n+s.bs-1)/s.bs)) {
				lo := max(off, uint64(r.First)*s.bs)
				hi := min(off+n, uint64(r.First+r.Count)*s.bs)
				spans = append(spans, span{s.blockOff(r.Block) + lo - uint64(r.First)*s.bs, hi - lo})
			}
		}
		p.mu.Unlock()
	}
	if s.skipPersist {
		return nil
	}
	// Flushing a block freed meanwhile is harmless; flushing outside the
	// partition's lock keeps writers of the partition going.
	for _, sp := range spans {
		if err := s.region.Persist(sp.off, sp.n); err != nil {
			return fmt.Errorf("dataplane: persist: %w", err)
		}
	}
	return nil
}

// Trim frees every block of ino's chunks on this node that lies wholly at
// or after byte size, and zeroes the rest of the block holding size, so
// bytes past size read as zeros if the file grows again. Trim(ino, 0)
// frees all of ino's data here. It is idempotent. The namespace calls it
// (through OpTrim on every node) before it records a smaller size, on
// every truncate (with the smaller of the old and new sizes, which also
// frees blocks a dead writer left past the size), and when it frees the
// inode.
func (s *Service) Trim(ino, size uint64) error {
	var errs []error
	for _, p := range s.partitions() {
		if p.broken != nil {
			continue
		}
		p.mu.Lock()
		var recs []wire.Record
		var chunks []uint64
		for c := range p.byIno[ino] {
			chunks = append(chunks, c)
		}
		slices.Sort(chunks)
		for _, c := range chunks {
			start := c * wire.ChunkSize
			if start+wire.ChunkSize <= size {
				continue
			}
			from := uint64(0)
			if size > start {
				from = size - start
			}
			rec, err := s.trimChunk(p, chunkKey{ino, c}, from)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if rec != nil {
				recs = append(recs, *rec)
			}
		}
		// One append per partition: plog bounds a group's bytes, and
		// unmap records are small (34 bytes), so this is far below it.
		if len(recs) > 0 {
			errs = append(errs, s.append(p, recs...))
		}
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}
