package dataplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
)

// More sentinel errors of the chunk service.
var (
	// ErrNoSpace is ENOSPC: no data blocks left on the owner.
	ErrNoSpace = errors.New("dataplane: no space left on the node")
	// ErrCorrupt means a partition's log does not describe a consistent
	// state; the partition is refused until repaired.
	ErrCorrupt = errors.New("dataplane: chunk log inconsistent")
)

// ServiceConfig configures a node's chunk service.
type ServiceConfig struct {
	// Store holds the node's logs; the service uses those of service
	// wire.ServiceChunks.
	Store *plog.Store
	// Export is the node's data export; the service exposes its pools
	// through it and takes rkeys for replies from it.
	Export *Export
	// Map is the cluster map; Self is this node's id in it.
	Map  cluster.MapSource
	Self cluster.NodeID
	// Pin pins a partition to this node (cluster.Node.PinPartition); the
	// service calls it before it creates the partition's first log.
	Pin func(ctx context.Context, partition uint32) error
	// Lease is how long a client may use extents from a reply, counted
	// from when it sent the request (default DefaultLease).
	Lease time.Duration
	// Quarantine is how long a freed block stays unused after the last
	// reply that named it (default DefaultQuarantine). It must exceed
	// Lease by the longest time an RDMA operation may stay in flight.
	Quarantine time.Duration
	// Peers reaches the other nodes' chunk services, for Truncate and
	// Free and for collecting deferred trims; ClientID and Incarnation
	// are what its requests carry: those of the Hello its connections
	// present (the node's).
	Peers                 Peers
	ClientID, Incarnation uint64
	// LogReserve is how many bytes of the region data pools leave free,
	// for the logs of every service on the region (default: a 32nd of the
	// region, at least DefaultLogReserve): when data fills the region, a
	// persist, a truncate or an unlink still finds room for its records.
	LogReserve uint64
	// Now is the clock (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// DefaultLogReserve is the least ServiceConfig.LogReserve.
const DefaultLogReserve = 256 << 10

// Defaults of ServiceConfig.
const (
	DefaultLease      = 5 * time.Second
	DefaultQuarantine = 3 * DefaultLease
)

// maxPoolBlocks bounds one pool (plog allows about 15,000 blocks; 4096
// blocks of 4 KiB are 16 MiB); a partition's first pool has
// minPoolBlocks, each later one as many as the partition has, so a
// partition's unused pooled space stays below half of what it uses, and
// many partitions on a small region do not fill it with empty pools.
const (
	maxPoolBlocks = 4096
	minPoolBlocks = 64
)

// Service is the chunk service of one node: for every chunk partition the
// node owns, the extent maps of its chunks and the pools their blocks come
// from. State is in DRAM, rebuilt by replaying each partition's log at
// start; every change is one log append before it is applied.
type Service struct {
	cfg    ServiceConfig
	log    *slog.Logger
	region *pmem.Region
	geo    pmem.Geometry
	bs     uint64 // block size
	bpc    uint32 // blocks per chunk

	mu    sync.Mutex
	parts map[uint32]*partition
	// creating serialises the creation of partitions (Pin, then the log).
	creating sync.Mutex

	// stamps numbers allocations of unwritten blocks (see run).
	stamps atomic.Uint64

	// deferred are the trims kept for nodes that were down; gate what
	// this node collected of those kept for it (trims.go).
	deferred deferrals
	gate     gate

	// mut removes safety steps, for the mutation tests.
	mut Mutations
}

// Mutations remove durability or safety steps from a Service, for the
// tests that prove the other tests would notice (SetMutations).
type Mutations struct {
	// SkipPersist makes persist flush nothing.
	SkipPersist bool
	// SkipZero leaves the blocks that a write covers only in part as
	// they were instead of zeroing them.
	SkipZero bool
	// MapWritten maps fresh blocks as written instead of unwritten,
	// without zeroing them.
	MapWritten bool
	// SkipGate serves an inode's chunks without first collecting the
	// trims its owner deferred for this node.
	SkipGate bool
}

// partition is one chunk partition's state. mu is held across "append,
// then apply" and around Rewrite, so a checkpoint sees every appended
// record applied.
type partition struct {
	id  uint32
	log *plog.Log

	mu     sync.Mutex
	chunks map[chunkKey]*chunkMap
	byIno  map[uint64]map[uint64]struct{}
	pools  []*pool // by ext.Start
	quar   []quarantine
	used   uint64 // blocks mapped
	broken error
}

type chunkKey struct{ ino, chunk uint64 }

// NewService replays every chunk log in the store and exposes the pools.
func NewService(cfg ServiceConfig) (*Service, error) {
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Quarantine == 0 {
		cfg.Quarantine = 3 * cfg.Lease
	}
	if cfg.Quarantine <= cfg.Lease {
		return nil, fmt.Errorf("dataplane: quarantine %v must be longer than the lease %v", cfg.Quarantine, cfg.Lease)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Pin == nil {
		cfg.Pin = func(context.Context, uint32) error { return nil }
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := cfg.Store.Region()
	geo := r.Geometry()
	if cfg.LogReserve == 0 {
		cfg.LogReserve = max(DefaultLogReserve, uint64(len(r.Bytes()))/32)
	}
	if wire.ChunkSize%uint64(geo.BlockSize) != 0 {
		return nil, fmt.Errorf("dataplane: block size %d does not divide the chunk size %d", geo.BlockSize, wire.ChunkSize)
	}
	s := &Service{cfg: cfg, log: log, region: r, geo: geo, bs: uint64(geo.BlockSize),
		bpc: uint32(wire.ChunkSize / uint64(geo.BlockSize)), parts: make(map[uint32]*partition)}
	if err := s.openNodeLog(); err != nil {
		// Deferring and handing out deferred trims fail; the rest works.
		log.Error("chunk service node log unusable: truncates wait for nodes that are down", "err", err)
		s.deferred.broken = err
	}
	for _, id := range cfg.Store.IDs() {
		if id.Service != wire.ServiceChunks || id.Partition == wire.NodeLog {
			continue
		}
		p, err := s.openPartition(id.Partition)
		if err != nil {
			// A damaged partition is refused, the others served.
			log.Error("chunk partition unusable", "partition", id.Partition, "err", err)
			p = &partition{id: id.Partition, broken: err}
		}
		s.parts[id.Partition] = p
	}
	return s, nil
}

// openPartition opens partition id's log and replays it.
func (s *Service) openPartition(id uint32) (*partition, error) {
	l, err := s.cfg.Store.Log(plog.LogID{Service: wire.ServiceChunks, Partition: id})
	if err != nil {
		return nil, err
	}
	p := &partition{id: id, log: l, chunks: make(map[chunkKey]*chunkMap), byIno: make(map[uint64]map[uint64]struct{})}
	for _, ext := range l.Pools() {
		p.pools = append(p.pools, newPool(ext))
	}
	err = l.Replay(func(b []byte) error {
		rec, err := wire.DecodeRecord(b, s.bpc)
		if err != nil {
			return fmt.Errorf("%w: partition %d: %w", ErrCorrupt, id, err)
		}
		return s.apply(p, rec, true)
	})
	if err != nil {
		return nil, err
	}
	for _, pl := range p.pools {
		if err := s.cfg.Export.Expose(s.span(pl.ext)); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func (s *Service) span(e pmem.Extent) Span {
	return Span{Off: s.region.ExtentOffset(e), Len: e.Count * s.bs}
}

// poolOf returns the pool holding block, or nil.
func (p *partition) poolOf(block uint64) *pool {
	i, found := slices.BinarySearchFunc(p.pools, block, func(pl *pool, b uint64) int { return cmp.Compare(pl.ext.Start, b) })
	if !found {
		i--
	}
	if i < 0 || i >= len(p.pools) || !p.pools[i].contains(block) {
		return nil
	}
	return p.pools[i]
}

// apply applies one record to the partition's DRAM state. At replay it
// checks what a live append guarantees: mapped blocks are free blocks of
// the partition's pools, runs land in holes, converted blocks are mapped.
func (s *Service) apply(p *partition, rec wire.Record, replay bool) error {
	key := chunkKey{rec.Ino, rec.Chunk}
	switch rec.Kind {
	case wire.RecordMap, wire.RecordMapUnwritten:
		for _, r := range rec.Runs {
			for b := r.Block; b < r.Block+uint64(r.Count); {
				pl := p.poolOf(b)
				if pl == nil {
					return fmt.Errorf("%w: partition %d: inode %d chunk %d maps block %d outside its pools", ErrCorrupt, p.id, rec.Ino, rec.Chunk, b)
				}
				n := min(r.Block+uint64(r.Count), pl.ext.End()) - b
				if replay {
					for i := b; i < b+n; i++ {
						if !pl.isFree(i) {
							return fmt.Errorf("%w: partition %d: block %d mapped twice", ErrCorrupt, p.id, i)
						}
					}
					pl.take(b, n)
				}
				b += n
			}
		}
		m := p.chunkFor(key)
		var stamp uint64
		if rec.Kind == wire.RecordMapUnwritten {
			// Each allocation draws a stamp of its own: a persist names
			// it, so that it converts only blocks of the allocation the
			// client wrote through.
			stamp = s.stamps.Add(1)
		}
		if !m.insert(runsOf(rec.Runs, stamp)) {
			return fmt.Errorf("%w: partition %d: inode %d chunk %d mapped over mapped blocks", ErrCorrupt, p.id, rec.Ino, rec.Chunk)
		}
		for _, r := range rec.Runs {
			p.used += uint64(r.Count)
		}
	case wire.RecordConvert:
		m := p.chunks[key]
		if m == nil || !m.convert(rec.First, rec.First+rec.Count) {
			return fmt.Errorf("%w: partition %d: inode %d chunk %d converts blocks %d+%d that are not all mapped", ErrCorrupt, p.id, rec.Ino, rec.Chunk, rec.First, rec.Count)
		}
	case wire.RecordUnmap:
		m := p.chunks[key]
		if m == nil {
			return nil
		}
		handed := m.handed
		freed := m.remove(rec.First, rec.First+rec.Count)
		// The blocks stay unused for the quarantine after the last
		// reply that named them, which no client's lease outlives: a
		// file written long ago is free again at its unlink.
		until := handed.Add(s.cfg.Quarantine)
		for _, r := range freed {
			p.used -= uint64(r.count)
			ext := pmem.Extent{Start: r.block, Count: uint64(r.count)}
			if replay || !until.After(s.cfg.Now()) {
				// Nobody holds them: a restarted node has no client
				// holding a lease on its blocks (every data session,
				// and so every rkey, died with the previous process),
				// and no reply named these for a quarantine.
				s.release(p, ext)
				continue
			}
			i, _ := slices.BinarySearchFunc(p.quar, until, func(q quarantine, t time.Time) int { return q.until.Compare(t) })
			p.quar = slices.Insert(p.quar, i, quarantine{ext: ext, until: until})
			s.forEachPoolPiece(p, ext, func(pl *pool, b, n uint64) { pl.quarantined += n })
		}
		if len(m.runs) == 0 {
			delete(p.chunks, key)
			delete(p.byIno[rec.Ino], rec.Chunk)
			if len(p.byIno[rec.Ino]) == 0 {
				delete(p.byIno, rec.Ino)
			}
		}
	}
	return nil
}

// forEachPoolPiece calls fn for each piece of ext inside one pool.
func (s *Service) forEachPoolPiece(p *partition, ext pmem.Extent, fn func(pl *pool, b, n uint64)) {
	for b := ext.Start; b < ext.End(); {
		pl := p.poolOf(b)
		if pl == nil {
			// Impossible once apply checked the record.
			panic(fmt.Sprintf("dataplane: partition %d: block %d outside its pools", p.id, b))
		}
		n := min(ext.End(), pl.ext.End()) - b
		fn(pl, b, n)
		b += n
	}
}

// release returns ext's blocks to their pools' free sets.
func (s *Service) release(p *partition, ext pmem.Extent) {
	s.forEachPoolPiece(p, ext, func(pl *pool, b, n uint64) { pl.give(b, n) })
}

// expire releases the quarantined extents whose time has come.
func (s *Service) expire(p *partition) {
	now := s.cfg.Now()
	i := 0
	for ; i < len(p.quar) && !now.Before(p.quar[i].until); i++ {
		q := p.quar[i]
		s.forEachPoolPiece(p, q.ext, func(pl *pool, b, n uint64) {
			pl.give(b, n)
			pl.quarantined -= n
		})
	}
	p.quar = slices.Delete(p.quar, 0, i)
}

// owns reports whether this node owns partition pid, waiting a little for
// the map when the caller routed by a newer one.
func (s *Service) owns(ctx context.Context, pid uint32, epoch uint64) (bool, uint64) {
	m := s.cfg.Map.Current()
	if !m.Initialized() || pid >= m.NumPartitions() {
		return false, m.Epoch
	}
	if m.Partitions[pid] == s.cfg.Self {
		return true, m.Epoch
	}
	if epoch > m.Epoch {
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		for m.Epoch < epoch && wctx.Err() == nil {
			m, _ = s.cfg.Map.Watch(wctx, m.Epoch)
		}
		if pid < m.NumPartitions() && m.Partitions[pid] == s.cfg.Self {
			return true, m.Epoch
		}
	}
	return false, m.Epoch
}

// partitionFor returns partition pid's state, creating its log (after
// pinning it) when create is set; nil if it has none and create is not.
func (s *Service) partitionFor(ctx context.Context, pid uint32, create bool) (*partition, error) {
	s.mu.Lock()
	p := s.parts[pid]
	s.mu.Unlock()
	if p != nil || !create {
		if p != nil && p.broken != nil {
			return nil, p.broken
		}
		return p, nil
	}
	s.creating.Lock()
	defer s.creating.Unlock()
	s.mu.Lock()
	p = s.parts[pid]
	s.mu.Unlock()
	if p != nil {
		return p, p.broken
	}
	if err := s.cfg.Pin(ctx, pid); err != nil {
		return nil, fmt.Errorf("dataplane: pin partition %d: %w", pid, err)
	}
	p, err := s.openPartition(pid)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.parts[pid] = p
	s.mu.Unlock()
	return p, nil
}

// partitions returns the partitions loaded, in id order.
func (s *Service) partitions() []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := make([]*partition, 0, len(s.parts))
	for _, p := range s.parts {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *partition) int { return cmp.Compare(a.id, b.id) })
	return ps
}

// append makes recs durable in p's log and applies them; p.mu is held.
func (s *Service) append(p *partition, recs ...wire.Record) error {
	bufs := make([][]byte, len(recs))
	for i := range recs {
		bufs[i] = recs[i].Encode()
	}
	if err := p.log.Append(bufs...); err != nil {
		return fmt.Errorf("dataplane: partition %d: log append: %w", p.id, err)
	}
	for _, rec := range recs {
		if err := s.apply(p, rec, false); err != nil {
			// The record is durable but the DRAM state refuses it:
			// stop serving the partition rather than diverge.
			p.broken = err
			return err
		}
	}
	s.maybeCheckpoint(p)
	return nil
}

// checkpointMin is the log size below which a partition's log is never
// rewritten.
const checkpointMin = 1 << 20

// maybeCheckpoint rewrites p's log as one map record per chunk when it has
// grown to several times that; p.mu is held.
func (s *Service) maybeCheckpoint(p *partition) {
	st := p.log.Stats()
	live := uint64(0)
	for _, m := range p.chunks {
		live += 64 + 16*uint64(len(m.runs))
	}
	if st.Bytes < checkpointMin || st.Bytes < 4*live {
		return
	}
	if err := s.checkpoint(p); err != nil {
		s.log.Warn("chunk log checkpoint failed; the log keeps growing", "partition", p.id, "err", err)
	}
}

// checkpoint rewrites p's log from its DRAM state, one map record for the
// written runs and one for the unwritten runs of each chunk; p.mu is held.
func (s *Service) checkpoint(p *partition) error {
	keys := make([]chunkKey, 0, len(p.chunks))
	for k := range p.chunks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b chunkKey) int {
		return cmp.Or(cmp.Compare(a.ino, b.ino), cmp.Compare(a.chunk, b.chunk))
	})
	return p.log.Rewrite(func(emit func([]byte) error) error {
		for _, k := range keys {
			var written, unwritten []run
			for _, r := range p.chunks[k].runs {
				if r.volatile {
					// In no record, and in none after a restart.
					continue
				}
				if r.unwritten() {
					unwritten = append(unwritten, r)
				} else {
					written = append(written, r)
				}
			}
			for _, rec := range []wire.Record{
				{Kind: wire.RecordMap, Ino: k.ino, Chunk: k.chunk, Runs: wireRuns(written)},
				{Kind: wire.RecordMapUnwritten, Ino: k.ino, Chunk: k.chunk, Runs: wireRuns(unwritten)},
			} {
				if len(rec.Runs) == 0 {
					continue
				}
				if err := emit(rec.Encode()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Checkpoint rewrites every partition's log, and the node log, from its
// state now.
func (s *Service) Checkpoint() error {
	var errs []error
	s.deferred.mu.Lock()
	if s.deferred.broken == nil {
		errs = append(errs, s.checkpointDeferrals())
	}
	s.deferred.mu.Unlock()
	for _, p := range s.partitions() {
		if p.broken != nil {
			continue
		}
		p.mu.Lock()
		errs = append(errs, s.checkpoint(p))
		p.mu.Unlock()
	}
	return errors.Join(errs...)
}

// allocBlocks takes n blocks for p, growing its pools when they lack
// room; p.mu is held. On ENOSPC nothing is taken.
func (s *Service) allocBlocks(p *partition, n uint64) ([]pmem.Extent, error) {
	s.expire(p)
	var have uint64
	for _, pl := range p.pools {
		have += pl.nfree
	}
	for have < n {
		got, err := s.growPool(p, n-have)
		if err != nil {
			return nil, err
		}
		have += got
	}
	var out []pmem.Extent
	for _, pl := range p.pools {
		if n == 0 {
			break
		}
		exts := pl.alloc(min(n, pl.nfree))
		for _, e := range exts {
			n -= e.Count
		}
		out = append(out, exts...)
	}
	return out, nil
}

// growPool adds a pool of at least need blocks where the region allows,
// else as large as it allows, and returns its size. Sizes double with the
// partition's pooled blocks, between one chunk and maxPoolBlocks, so small
// regions are not filled by a few partitions' first pools.
func (s *Service) growPool(p *partition, need uint64) (uint64, error) {
	return s.growPoolOnce(p, need, 0)
}

// growPoolOnce is growPool; when the region has no room, it first gives
// the region the other partitions' empty pools (retried 0), then their
// pools' free tails (retried 1), and tries again.
func (s *Service) growPoolOnce(p *partition, need uint64, retried int) (uint64, error) {
	var pooled uint64
	for _, pl := range p.pools {
		pooled += pl.ext.Count
	}
	want := max(need, min(max(pooled, minPoolBlocks), maxPoolBlocks))
	st := s.region.Stats()
	// Pools leave the reserve to the logs: a persist, a trim or an unlink
	// must find room for its records when data has filled the region.
	free := st.Blocks - st.BlocksUsed
	free -= min(free, s.cfg.LogReserve/s.bs)
	if want > free/4 {
		want = max(need, free/4)
	}
	want = min(want, maxPoolBlocks, free)
	for size := want; size > 0; size /= 2 {
		ext, err := p.log.AllocPool(size)
		if err != nil {
			if errors.Is(err, plog.ErrNoSpace) || errors.Is(err, pmem.ErrNoSpace) || errors.Is(err, plog.ErrTooLarge) {
				continue
			}
			return 0, fmt.Errorf("dataplane: partition %d: new pool: %w", p.id, err)
		}
		if err := s.cfg.Export.Expose(s.span(ext)); err != nil {
			return 0, err
		}
		pl := newPool(ext)
		i, _ := slices.BinarySearchFunc(p.pools, ext.Start, func(pl *pool, b uint64) int { return cmp.Compare(pl.ext.Start, b) })
		p.pools = slices.Insert(p.pools, i, pl)
		return ext.Count, nil
	}
	switch retried {
	case 0:
		// Other partitions may hold empty pools: give them back to the
		// region and try again.
		if s.sweepEmpty(p) > 0 {
			return s.growPoolOnce(p, need, 1)
		}
		fallthrough
	case 1:
		// Their pools' free tails count as free in statfs too.
		if s.shrinkTails(p) > 0 {
			return s.growPoolOnce(p, need, 2)
		}
	}
	return 0, fmt.Errorf("%w: partition %d needs %d more blocks", ErrNoSpace, p.id, need)
}

// shrinkTails gives the free blocks at the end of every pool of every
// partition but held back to the region (see othersLocked for held),
// and returns how many pools it shrank. A shrunk pool is exposed anew,
// so that clients holding keys for it fetch new ones (the engine does on
// a remote access error); no client holds an extent in a free block
// (quarantine).
func (s *Service) shrinkTails(held *partition) int {
	shrunk := 0
	s.othersLocked(held, func(p *partition) {
		for _, pl := range p.pools {
			tail := pl.freeTail()
			if tail == 0 || tail == pl.ext.Count {
				continue // sweepEmpty frees an empty pool whole
			}
			keep := pl.ext.Count - tail
			s.cfg.Export.Withdraw(s.span(pl.ext).Off)
			kept, err := p.log.ShrinkPool(pl.ext, keep)
			if err != nil {
				s.log.Warn("shrinking a pool failed", "partition", p.id, "pool", pl.ext, "err", err)
				s.cfg.Export.Expose(s.span(pl.ext))
				continue
			}
			pl.shrink(keep)
			if err := s.cfg.Export.Expose(s.span(kept)); err != nil {
				s.log.Warn("exposing a shrunk pool failed", "partition", p.id, "pool", kept, "err", err)
			}
			shrunk++
		}
	})
	return shrunk
}

// othersLocked calls fn for every partition but held (whose lock the
// caller holds; nil for none) and the broken ones, under the
// partition's lock and after its quarantines that are over ended. With
// a held partition, partitions busy now are skipped: waiting for their
// locks could deadlock with a holder waiting for held's.
func (s *Service) othersLocked(held *partition, fn func(p *partition)) {
	for _, p := range s.partitions() {
		if p.broken != nil || p == held {
			continue
		}
		if held != nil {
			if !p.mu.TryLock() {
				continue
			}
		} else {
			p.mu.Lock()
		}
		s.expire(p)
		fn(p)
		p.mu.Unlock()
	}
}

// Sweep ends quarantines that are over and frees pools that hold no block
// (withdrawing them from the export first), so that partitions do not keep
// space others need, and collects the trims other nodes deferred for this
// one while it was down (so that the data of files freed meanwhile goes). The node calls it periodically; allocation also
// sweeps its own partition's quarantine, and every partition's empty
// pools when the region is full.
func (s *Service) Sweep() {
	s.sweepEmpty(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.collectAll(ctx)
}

// sweepEmpty frees the pools that hold no block of every partition but
// held (see othersLocked for held), and returns how many it freed. The
// caller counts held's free blocks: its pools stay.
func (s *Service) sweepEmpty(held *partition) int {
	freed := 0
	s.othersLocked(held, func(p *partition) {
		keep := p.pools[:0]
		for _, pl := range p.pools {
			if pl.nfree == pl.ext.Count && pl.quarantined == 0 {
				s.cfg.Export.Withdraw(s.span(pl.ext).Off)
				if err := p.log.FreePool(pl.ext); err != nil {
					s.log.Warn("freeing an empty pool failed", "partition", p.id, "pool", pl.ext, "err", err)
					s.cfg.Export.Expose(s.span(pl.ext))
					keep = append(keep, pl)
				} else {
					freed++
				}
				continue
			}
			keep = append(keep, pl)
		}
		clear(p.pools[len(keep):])
		p.pools = keep
	})
	return freed
}

// zero writes zeros over region bytes [off, off+n) and persists them.
func (s *Service) zero(off, n uint64) error {
	if n == 0 || s.mut.SkipZero {
		return nil
	}
	clear(s.region.Bytes()[off : off+n])
	return s.region.Persist(off, n)
}

// blockOff is the region offset of data block b.
func (s *Service) blockOff(b uint64) uint64 {
	return s.region.ExtentOffset(pmem.Extent{Start: b, Count: 1})
}

// ensure gives every hole among the blocks of chunk bytes [lo,
// hi+ahead) a fresh block and, for a write (write set) of [lo, hi), makes
// the write possible: a block the write covers only in part must read as
// zeros outside the write, so a fresh one is zeroed, persisted and logged
// as written before it is mapped, and an unwritten one is zeroed,
// persisted and logged as written too, unless its stamp is in mine (the
// caller wrote it whole: mine[0] for the head block, mine[1] for the
// tail). Every other fresh block is mapped unwritten with no zeroing: it
// reads as zeros until a persist that covers it converts it. For a write
// the unwritten blocks are volatile (in DRAM only, logged by the persist
// that converts them: a crash before it leaves them free, and the write
// was not durable anyway), so a sequential writer's allocations touch no
// log; for fallocate (write unset) they are logged. No byte a block held
// for its previous owner ever becomes readable, before a crash or after.
// p.mu is held.
func (s *Service) ensure(p *partition, ino, chunk, lo, hi, ahead uint64, write bool, mine [2]uint64) error {
	key := chunkKey{ino, chunk}
	m := p.chunks[key]
	if m == nil {
		m = &chunkMap{}
	}
	first := uint32(lo / s.bs)
	wend := uint32((hi + s.bs - 1) / s.bs)
	end := uint32((min(hi+ahead, wire.ChunkSize) + s.bs - 1) / s.bs)
	// partial reports whether the write covers block b only in part.
	partial := func(b uint32) bool {
		bl, bh := uint64(b)*s.bs, uint64(b+1)*s.bs
		return bl < hi && bh > lo && (bl < lo || bh > hi)
	}
	var edges []uint32 // blocks the write covers in part
	if write && first < wend && partial(first) {
		edges = append(edges, first)
	}
	if write && wend-1 > first && partial(wend-1) {
		edges = append(edges, wend-1)
	}
	holes := m.holes(first, end)
	var convert []run // unwritten edge blocks to zero and make written
	for i, b := range edges {
		r := m.overlapping(b, b+1)
		if len(r) != 1 || !r[0].unwritten() {
			continue
		}
		// The caller wrote this one whole (mine[0] names the head's
		// stamp, mine[1] the tail's): zeroing it would lose that.
		if st := r[0].stamp; (b == first && st == mine[0]) || (i == len(edges)-1 && b == wend-1 && st == mine[1]) {
			continue
		}
		convert = append(convert, r[0])
	}
	if len(holes) == 0 && len(convert) == 0 {
		return nil
	}
	var need uint64
	for _, h := range holes {
		need += uint64(h.count)
	}
	exts, err := s.allocBlocks(p, need)
	if err != nil {
		return err
	}
	releaseAll := func() {
		for _, e := range exts {
			s.release(p, e)
		}
	}
	// Pair the holes with the fresh extents, one block at a time at the
	// edges, so that each fresh run is either zeroed and written or
	// unwritten.
	var written, unwritten []run
	ei, used := 0, uint64(0)
	for _, h := range holes {
		first, left := h.first, uint64(h.count)
		for left > 0 {
			e := exts[ei]
			n := min(left, e.Count-used)
			if slices.Contains(edges, first) {
				n = 1
			} else {
				for _, b := range edges {
					if b > first && uint64(b-first) < n {
						n = uint64(b - first)
					}
				}
			}
			r := run{first: first, count: uint32(n), block: e.Start + used}
			if slices.Contains(edges, first) || s.mut.MapWritten {
				written = append(written, r)
			} else {
				unwritten = append(unwritten, r)
			}
			first += uint32(n)
			left -= n
			used += n
			if used == e.Count {
				ei, used = ei+1, 0
			}
		}
	}
	for _, r := range written {
		if s.mut.MapWritten && !slices.Contains(edges, r.first) {
			continue
		}
		if err := s.zero(s.blockOff(r.block), uint64(r.count)*s.bs); err != nil {
			releaseAll()
			return fmt.Errorf("dataplane: zero fresh blocks: %w", err)
		}
	}
	for _, r := range convert {
		if err := s.zero(s.blockOff(r.block), s.bs); err != nil {
			releaseAll()
			return fmt.Errorf("dataplane: zero unwritten block: %w", err)
		}
	}
	var recs []wire.Record
	if len(written) > 0 {
		recs = append(recs, wire.Record{Kind: wire.RecordMap, Ino: ino, Chunk: chunk, Runs: wireRuns(written)})
	}
	if len(unwritten) > 0 && !write {
		recs = append(recs, wire.Record{Kind: wire.RecordMapUnwritten, Ino: ino, Chunk: chunk, Runs: wireRuns(unwritten)})
	}
	// A volatile edge block is logged as written (it is in no record);
	// a logged one is converted.
	var volatile []run
	for _, r := range convert {
		if r.volatile {
			volatile = append(volatile, r)
		} else {
			recs = append(recs, wire.Record{Kind: wire.RecordConvert, Ino: ino, Chunk: chunk, First: r.first, Count: 1})
		}
	}
	if len(volatile) > 0 {
		recs = append(recs, wire.Record{Kind: wire.RecordMap, Ino: ino, Chunk: chunk, Runs: wireRuns(volatile)})
	}
	if len(recs) > 0 {
		s.unmapVolatile(p, key, volatile)
		if err := s.append(p, recs...); err != nil {
			if p.broken == nil {
				s.mapVolatile(p, key, volatile)
				releaseAll()
			}
			return err
		}
	}
	if len(unwritten) > 0 && write {
		for i := range unwritten {
			unwritten[i].volatile = true
		}
		stamp := s.stamps.Add(1)
		for i := range unwritten {
			unwritten[i].stamp = stamp
		}
		s.mapVolatile(p, key, unwritten)
	}
	return nil
}

// chunkFor returns chunk key's map, creating it.
func (p *partition) chunkFor(key chunkKey) *chunkMap {
	m := p.chunks[key]
	if m == nil {
		m = &chunkMap{}
		p.chunks[key] = m
		if p.byIno[key.ino] == nil {
			p.byIno[key.ino] = make(map[uint64]struct{})
		}
		p.byIno[key.ino][key.chunk] = struct{}{}
	}
	return m
}

// mapVolatile puts runs, of blocks the partition's pools gave, into chunk
// key's map without a log record (they lie in holes); p.mu is held.
func (s *Service) mapVolatile(p *partition, key chunkKey, runs []run) {
	if len(runs) == 0 {
		return
	}
	if !p.chunkFor(key).insert(runs) {
		panic(fmt.Sprintf("dataplane: partition %d: volatile runs over mapped blocks", p.id))
	}
	for _, r := range runs {
		p.used += uint64(r.count)
	}
}

// unmapVolatile takes runs, volatile runs of chunk key's map, out of it
// without freeing their blocks, for a record that maps them again; p.mu
// is held.
func (s *Service) unmapVolatile(p *partition, key chunkKey, runs []run) {
	m := p.chunks[key]
	for _, r := range runs {
		m.remove(r.first, r.end())
		p.used -= uint64(r.count)
	}
}

// extents builds a chunk's extents for data session sid, for a reply,
// and notes when they were handed out (chunkMap.handed, from which freed
// blocks are quarantined); p.mu is held. Runs are split where pools end,
// since each pool is its own memory region.
func (s *Service) extents(p *partition, ino, chunk, sid uint64) ([]wire.Extent, error) {
	m := p.chunks[chunkKey{ino, chunk}]
	if m == nil {
		return nil, nil
	}
	out := make([]wire.Extent, 0, len(m.runs))
	for _, r := range m.runs {
		var err error
		s.forEachPoolPiece(p, pmem.Extent{Start: r.block, Count: uint64(r.count)}, func(pl *pool, b, n uint64) {
			if err != nil {
				return
			}
			span := s.span(pl.ext)
			var key RemoteKey
			key, err = s.cfg.Export.RemoteKey(sid, span.Off)
			if err != nil {
				return
			}
			first := r.first + uint32(b-r.block)
			out = append(out, wire.Extent{
				Off:   first * uint32(s.bs),
				Len:   uint32(n * s.bs),
				Addr:  key.Addr + (s.blockOff(b) - span.Off),
				RKey:  key.RKey,
				Stamp: r.stamp,
			})
		})
		if err != nil {
			return nil, err
		}
	}
	m.handed = s.cfg.Now()
	return out, nil
}

// trimChunk frees chunk key's blocks at and after byte from (relative to
// the chunk) and zeroes the rest of the block holding from; p.mu is held.
// It returns the unmap record to append, if any.
func (s *Service) trimChunk(p *partition, key chunkKey, from uint64) (*wire.Record, error) {
	m := p.chunks[key]
	if m == nil {
		return nil, nil
	}
	firstFree := uint32((from + s.bs - 1) / s.bs)
	if from%s.bs != 0 {
		// Zero the tail of the partial block, so bytes past the new size
		// read as zeros if the file grows again.
		if runs := m.overlapping(uint32(from/s.bs), uint32(from/s.bs)+1); len(runs) == 1 {
			// Unwritten blocks too: a persist of writes made before
			// the trim may convert the block later.
			off := s.blockOff(runs[0].block) + from%s.bs
			if err := s.zero(off, s.bs-from%s.bs); err != nil {
				return nil, err
			}
		}
	}
	if len(m.overlapping(firstFree, s.bpc)) == 0 {
		return nil, nil
	}
	return &wire.Record{Kind: wire.RecordUnmap, Ino: key.ino, Chunk: key.chunk, First: firstFree, Count: s.bpc - firstFree}, nil
}

// VolatileBytes is how many bytes of the node's blocks are volatile:
// allocated for writes that no persist has made durable yet, in no log
// record, and free again after a restart.
func (s *Service) VolatileBytes() uint64 {
	var n uint64
	for _, p := range s.partitions() {
		p.mu.Lock()
		for _, m := range p.chunks {
			for _, r := range m.runs {
				if r.volatile {
					n += uint64(r.count) * s.bs
				}
			}
		}
		p.mu.Unlock()
	}
	return n
}

// Capacity reports the node's data capacity. Free leaves out the region's
// LogReserve, which data never takes: statfs's available space runs out
// when writes start to answer ENOSPC, not later.
func (s *Service) Capacity() wire.Capacity {
	st := s.region.Stats()
	free := (st.Blocks - st.BlocksUsed) * s.bs
	c := wire.Capacity{Total: st.Blocks * s.bs, Free: free - min(free, s.cfg.LogReserve)}
	for _, p := range s.partitions() {
		if p.broken != nil {
			continue
		}
		p.mu.Lock()
		for _, pl := range p.pools {
			c.Free += (pl.nfree) * s.bs
			c.Quarantined += pl.quarantined * s.bs
		}
		c.Used += p.used * s.bs
		p.mu.Unlock()
	}
	return c
}
