package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/pmem/plog"
)

// Identified is what the node's RPC server knows of a request's
// connection: the Hello it was opened with (package node's rpc.Peer
// values implement it).
type Identified interface {
	Hello() Hello
}

// ErrForeignRequest means a request names another caller than the
// connection it came on, or asks for what only nodes may ask.
var ErrForeignRequest = errors.New("dataplane: request not permitted on this connection")

// Serve executes one chunk-service request that came on a connection
// opened by peer (an Identified; anything else is refused) and returns
// the encoded reply. It never fails: every outcome is a reply status. The
// node's RPC server calls it for every op in wire.Ops with the rpc.Call's
// Peer.
func (s *Service) Serve(ctx context.Context, op wire.Op, peer any, b []byte) []byte {
	req, err := wire.DecodeRequest(b)
	if err == nil && req.Op != op {
		err = fmt.Errorf("%w: op %v in a request sent as %v", wire.ErrMalformed, req.Op, op)
	}
	if err == nil {
		err = s.permit(peer, &req)
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

// permit checks that the request is its connection's: the client id and
// incarnation it names are those of the connection's Hello (so a client
// cannot act as another, e.g. on that one's data sessions), and that only
// nodes of the map send the ops that free or count data or move deferred
// trims.
// The cluster token authenticates clients and nodes alike, so the second
// check guards against mistakes, not against a hostile token holder.
func (s *Service) permit(peer any, req *wire.Request) error {
	id, ok := peer.(Identified)
	if !ok {
		return fmt.Errorf("%w: the connection has no identity", ErrForeignRequest)
	}
	h := id.Hello()
	if req.ClientID != h.ClientID || req.Incarnation != h.Incarnation {
		return fmt.Errorf("%w: request from client %#x incarnation %#x on the connection of client %#x incarnation %#x",
			ErrForeignRequest, req.ClientID, req.Incarnation, h.ClientID, h.Incarnation)
	}
	switch req.Op {
	case wire.OpTrim, wire.OpFree, wire.OpTrimCollect, wire.OpTrimDone, wire.OpUsage:
		if _, ok := s.cfg.Map.Current().Node(cluster.NodeID(h.Node)); h.Node == "" || !ok {
			return fmt.Errorf("%w: %v is for nodes of the cluster (the namespace truncates, frees and counts file data)", ErrForeignRequest, req.Op)
		}
		if (req.Op == wire.OpTrimCollect || req.Op == wire.OpTrimDone) && req.Node != h.Node {
			return fmt.Errorf("%w: node %s asks for node %s's deferred trims", ErrForeignRequest, h.Node, req.Node)
		}
	}
	return nil
}

func statusOf(err error) wire.Status {
	var wo *errWrongOwner
	switch {
	case errors.As(err, &wo):
		return wire.StatusWrongOwner
	case errors.Is(err, ErrForeignRequest):
		return wire.Status(syscall.EPERM)
	case errors.Is(err, ErrNotReady):
		return wire.StatusNotReady
	case errors.Is(err, ErrNoSpace), errors.Is(err, plog.ErrNoSpace):
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
	case wire.OpTrimCollect:
		return s.serveCollect(ctx, req)
	case wire.OpTrimDone:
		return wire.Reply{}, s.serveDone(req)
	case wire.OpUsage:
		if err := s.ready(ctx, req.Ino); err != nil {
			return wire.Reply{}, err
		}
		return wire.Reply{Capacity: wire.Capacity{Used: s.usage(req.Ino)}}, nil
	case wire.OpNextData:
		if err := s.ready(ctx, req.Ino); err != nil {
			return wire.Reply{}, err
		}
		return wire.Reply{Next: s.nextData(req.Ino, req.Chunk)}, nil
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
	if req.Op != wire.OpPersist {
		// Persist only flushes what the client wrote and converts it;
		// the rest hands out extents, which must not outlive a trim
		// this node missed.
		if err := s.ready(ctx, req.Ino); err != nil {
			return nil, err
		}
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
	// An allocate with no write range but bytes ahead maps a sequential
	// writer's next blocks before it needs them.
	alloc := req.Len > 0 || (req.Op == wire.OpAllocate && req.Ahead > 0)
	create := req.Op != wire.OpMap && alloc && !(req.Op == wire.OpFallocate && req.Mode&wire.FallocPunchHole != 0)
	p, err := s.chunkPartition(ctx, req, req.Chunk, create)
	if err != nil || p == nil {
		return wire.Reply{Lease: s.cfg.Lease}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.broken != nil {
		return wire.Reply{}, p.broken
	}
	if alloc {
		allocate := func() error {
			if req.Op == wire.OpFallocate {
				return s.fallocate(p, req)
			}
			return s.ensure(p, req.Ino, req.Chunk, uint64(req.Off), uint64(req.Off)+uint64(req.Len), uint64(req.Ahead), true, [2]uint64{req.MineHead, req.MineTail})
		}
		if err := s.awaitSpace(ctx, p, allocate(), allocate); err != nil {
			return wire.Reply{}, err
		}
	}
	exts, err := s.extents(p, req.Ino, req.Chunk, req.Session)
	if err != nil {
		return wire.Reply{}, err
	}
	return wire.Reply{Lease: s.cfg.Lease, Extents: exts}, nil
}

// awaitSpace retries an allocation of p's that failed with ErrNoSpace (err,
// from allocate) while this node holds quarantined blocks: blocks freed by
// an unlink or a truncate come back within Quarantine, and an allocation
// that fits then waits for them, as a local file system's space is free
// once the unlink returns, instead of failing with ENOSPC next to a
// nearly empty df. It ends with the first other result, when nothing is
// quarantined any more, or after Quarantine. p.mu is held on entry and on
// return, and released while it waits.
func (s *Service) awaitSpace(ctx context.Context, p *partition, err error, allocate func() error) error {
	if errors.Is(err, ErrNoSpace) {
		// The allocation gave the region what other partitions had
		// free, but not what partitions busy at the time had: once
		// more, waiting for each.
		p.mu.Unlock()
		s.sweepEmpty(nil)
		s.shrinkTails(nil)
		p.mu.Lock()
		if p.broken != nil {
			return p.broken
		}
		err = allocate()
	}
	deadline := time.Now().Add(s.cfg.Quarantine + time.Second)
	for errors.Is(err, ErrNoSpace) && time.Now().Before(deadline) && s.spaceComing(p) {
		p.mu.Unlock()
		t := time.NewTimer(spaceRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			p.mu.Lock()
			return err
		case <-t.C:
		}
		s.sweepEmpty(nil)
		p.mu.Lock()
		if p.broken != nil {
			return p.broken
		}
		err = allocate()
	}
	return err
}

// spaceRetry is how often an allocation waiting for quarantined blocks
// tries again.
const spaceRetry = 200 * time.Millisecond

// spaceComing reports whether quarantined blocks of this node will be
// free for held when their quarantine ends: held's own, or those of
// another partition's pool that then holds nothing and goes back to the
// region. Blocks in a pool that stays in use are not: waiting for them
// would only delay the ENOSPC. The caller holds held's lock; a partition
// busy now is skipped.
func (s *Service) spaceComing(held *partition) bool {
	for _, p := range s.partitions() {
		if p == held {
			if len(p.quar) > 0 {
				return true
			}
			continue
		}
		if !p.mu.TryLock() {
			continue
		}
		coming := false
		for _, pl := range p.pools {
			coming = coming || (pl.quarantined > 0 && pl.nfree+pl.quarantined == pl.ext.Count)
		}
		p.mu.Unlock()
		if coming {
			return true
		}
	}
	return false
}

// fallocate applies a mode to a range of one chunk; p.mu is held.
func (s *Service) fallocate(p *partition, req *wire.Request) error {
	lo, hi := uint64(req.Off), uint64(req.Off)+uint64(req.Len)
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
		return s.ensure(p, req.Ino, req.Chunk, lo, hi, 0, false, [2]uint64{})
	default:
		// Default and KEEP_SIZE: blocks for the range (unwritten, so
		// they read as zeros without being zeroed); the size is the
		// namespace's.
		return s.ensure(p, req.Ino, req.Chunk, lo, hi, 0, false, [2]uint64{})
	}
}

// zeroMapped writes zeros over the mapped bytes of chunk range [off,
// off+n), partial blocks at the edges only when the range does not cover
// them whole is the caller's business: it zeroes every mapped byte.
func (s *Service) zeroMapped(m *chunkMap, off, n uint64) error {
	first, end := uint32(off/s.bs), uint32((off+n+s.bs-1)/s.bs)
	for _, r := range m.overlapping(first, end) {
		lo := max(off, uint64(r.first)*s.bs)
		hi := min(off+n, uint64(r.end())*s.bs)
		if lo >= hi {
			continue
		}
		if err := s.zero(s.blockOff(r.block)+lo-uint64(r.first)*s.bs, hi-lo); err != nil {
			return err
		}
	}
	return nil
}

// persist makes the mapped bytes of the request's ranges durable, then
// converts the unwritten blocks that the ranges of one stamp cover whole:
// the client wrote all of them through that allocation's extents, and
// they are now durable, so they may be read. A stamp names one
// allocation, whose blocks only ever disappear (unmapped) or convert, so
// the blocks converted are among those flushed.
func (s *Service) persist(ctx context.Context, req *wire.Request) error {
	if req.Owner != s.cfg.Export.Incarnation() {
		return errDataLost
	}
	type span struct{ off, n uint64 }
	var spans []span
	parts := make(map[uint64]*partition) // by chunk
	for _, g := range req.Ranges {
		p, ok := parts[g.Chunk]
		if !ok {
			var err error
			if p, err = s.chunkPartition(ctx, req, g.Chunk, false); err != nil {
				return err
			}
			parts[g.Chunk] = p
		}
		if p == nil || g.Len == 0 {
			continue
		}
		p.mu.Lock()
		if m := p.chunks[chunkKey{req.Ino, g.Chunk}]; m != nil {
			off, n := uint64(g.Off), uint64(g.Len)
			for _, r := range m.overlapping(uint32(off/s.bs), uint32((off+n+s.bs-1)/s.bs)) {
				lo := max(off, uint64(r.first)*s.bs)
				hi := min(off+n, uint64(r.end())*s.bs)
				spans = append(spans, span{s.blockOff(r.block) + lo - uint64(r.first)*s.bs, hi - lo})
			}
		}
		p.mu.Unlock()
	}
	if !s.mut.SkipPersist {
		// Flushing a block freed meanwhile is harmless; flushing outside
		// the partition's lock keeps its allocations going.
		for _, sp := range spans {
			if err := s.region.Persist(sp.off, sp.n); err != nil {
				return fmt.Errorf("dataplane: persist: %w", err)
			}
		}
	}
	return s.convertCovered(req.Ino, req.Ranges, parts)
}

// convertCovered appends, per partition, the conversions of the unwritten
// blocks that ranges of their stamp cover whole.
func (s *Service) convertCovered(ino uint64, ranges []wire.Range, parts map[uint64]*partition) error {
	type key struct {
		chunk, stamp uint64
	}
	byKey := make(map[key][]wire.Range)
	for _, g := range ranges {
		if g.Stamp != 0 && g.Len > 0 && parts[g.Chunk] != nil {
			k := key{g.Chunk, g.Stamp}
			byKey[k] = append(byKey[k], g)
		}
	}
	byPart := make(map[*partition][]key)
	for k := range byKey {
		byPart[parts[k.chunk]] = append(byPart[parts[k.chunk]], k)
	}
	var errs []error
	for p, keys := range byPart {
		slices.SortFunc(keys, func(a, b key) int { return cmp.Or(cmp.Compare(a.chunk, b.chunk), cmp.Compare(a.stamp, b.stamp)) })
		p.mu.Lock()
		if p.broken != nil {
			errs = append(errs, p.broken)
			p.mu.Unlock()
			continue
		}
		var recs []wire.Record
		volatile := make(map[chunkKey][]run)
		for _, k := range keys {
			key := chunkKey{ino, k.chunk}
			m := p.chunks[key]
			if m == nil {
				continue
			}
			for _, c := range coveredBlocks(byKey[k], s.bs) {
				for _, r := range m.stamped(c.first, c.end(), k.stamp) {
					if r.volatile {
						volatile[key] = append(volatile[key], r)
						continue
					}
					recs = append(recs, wire.Record{Kind: wire.RecordConvert, Ino: ino, Chunk: k.chunk, First: r.first, Count: r.count})
				}
			}
		}
		// Volatile blocks become logged, written blocks.
		for key, runs := range volatile {
			// Runs of several stamps: a record's runs are in order.
			slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(a.first, b.first) })
			recs = append(recs, wire.Record{Kind: wire.RecordMap, Ino: key.ino, Chunk: key.chunk, Runs: wireRuns(runs)})
			s.unmapVolatile(p, key, runs)
		}
		if len(recs) > 0 {
			if err := s.append(p, recs...); err != nil {
				errs = append(errs, err)
				if p.broken == nil {
					for key, runs := range volatile {
						s.mapVolatile(p, key, runs)
					}
				}
			}
		}
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// coveredBlocks returns the block ranges that the union of ranges (of one
// chunk) covers whole.
func coveredBlocks(ranges []wire.Range, bs uint64) []run {
	slices.SortFunc(ranges, func(a, b wire.Range) int { return cmp.Compare(a.Off, b.Off) })
	var out []run
	add := func(lo, hi uint64) {
		first, end := (lo+bs-1)/bs, hi/bs
		if first < end {
			out = append(out, run{first: uint32(first), count: uint32(end - first)})
		}
	}
	lo, hi := uint64(ranges[0].Off), uint64(ranges[0].Off)+uint64(ranges[0].Len)
	for _, g := range ranges[1:] {
		if uint64(g.Off) > hi {
			add(lo, hi)
			lo, hi = uint64(g.Off), uint64(g.Off)+uint64(g.Len)
			continue
		}
		hi = max(hi, uint64(g.Off)+uint64(g.Len))
	}
	add(lo, hi)
	return out
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
		p.mu.Lock()
		if p.broken != nil {
			// The partition may hold chunks of ino: say so rather than
			// report a trim that did not happen.
			errs = append(errs, fmt.Errorf("dataplane: inode %d not trimmed in damaged partition %d (%w); check the region (octoctl fsck) and restore or repair the partition", ino, p.id, p.broken))
			p.mu.Unlock()
			continue
		}
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
