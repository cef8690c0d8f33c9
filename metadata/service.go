package metadata

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/pmem/plog"
)

// DataHooks is what the namespace service needs from the chunk service:
// freeing file data. The node implements it with the chunk service's
// client. Both calls must be idempotent: after a crash they run again.
type DataHooks interface {
	// Truncate frees the data of regular file ino beyond size and zeroes
	// the rest of the block that holds byte size, so the file reads
	// zeros past size if it grows again. oldSize is the size before.
	Truncate(ctx context.Context, ino, oldSize, size uint64) error
	// Free frees all data of regular file ino (its size was size).
	Free(ctx context.Context, ino, size uint64) error
	// Usage returns the bytes of the blocks regular file ino holds, for
	// its st_blocks: in its chunks below size, or everywhere (the file
	// may hold blocks past its size). An error leaves the estimate.
	Usage(ctx context.Context, ino, size uint64, everywhere bool) (uint64, error)
}

// NoData is DataHooks for a service without a data path (tests of the
// namespace alone): there is never data to free.
type NoData struct{}

// Truncate implements DataHooks.
func (NoData) Truncate(context.Context, uint64, uint64, uint64) error { return nil }

// Free implements DataHooks.
func (NoData) Free(context.Context, uint64, uint64) error { return nil }

// Usage implements DataHooks: without a data path there is nothing to
// count, and st_blocks stays the estimate from the size.
func (NoData) Usage(context.Context, uint64, uint64, bool) (uint64, error) { return 0, errNoData }

var errNoData = errors.New("metadata: no data service")

// Config configures a Service. Node, Map, Store and Peers are required.
type Config struct {
	// Node is this node's id in the cluster map.
	Node cluster.NodeID
	// Map follows the cluster map: the service serves the partitions the
	// map gives Node.
	Map cluster.MapSource
	// Store holds the partition logs (service ServiceID).
	Store *plog.Store
	// Pin is called before a partition's log is first created, so that
	// the partition never moves away from its data (cluster.Node's
	// PinPartition). nil: no pinning (tests).
	Pin func(ctx context.Context, partition uint32) error
	// Peers carries node-to-node requests. Requests for partitions this
	// node owns never go through it.
	Peers mdclient.Caller
	// Data frees file data (nil: NoData).
	Data DataHooks
	// Clock gives the time (nil: time.Now).
	Clock func() time.Time
	// Logger (nil: discard).
	Logger *slog.Logger
	// Incarnation identifies this process (0: its start time in ns). It
	// must grow across restarts of the node: peers fence older ones.
	Incarnation uint64

	// SessionLease is how long a client's opens and locks outlive its
	// last request (default 30s).
	SessionLease time.Duration
	// OrphanGrace is how long after a start an orphan (an unlinked file
	// that was open) waits for a client to reclaim its open before it is
	// freed (default 2*SessionLease).
	OrphanGrace time.Duration
	// ResolveInterval: a rename lock held longer than this makes its
	// holder ask the transaction's coordinator what became of it
	// (default 1s).
	ResolveInterval time.Duration
	// RewriteMinBytes and RewriteRatio: a partition log is rewritten
	// when it is larger than RewriteMinBytes and RewriteRatio times the
	// live state (defaults 64 MiB and 4).
	RewriteMinBytes uint64
	RewriteRatio    int64
	// SpaceReserve is how many bytes of the region operations that add
	// to the namespace leave free for the rest (default region/64, at
	// least 128 KiB; see space.go).
	SpaceReserve uint64
	// ReadDirBytes is the default reply budget of readdir (64 KiB).
	ReadDirBytes uint32
	// MaxLinks is the largest link count of a file, and of a directory
	// (2 plus its subdirectories), past which link, mkdir and rename
	// answer EMLINK (default DefaultMaxLinks, ext4's 65000). Tests
	// lower it.
	MaxLinks uint32
}

// Service is a node's namespace service.
type Service struct {
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	inc  uint64
	self uint64 // this node's sender id in node-to-node requests
	// lastReclaim is when (ns) reclaimLogs last started (space.go).
	lastReclaim atomic.Int64
	reclaimMu   sync.Mutex // one reclaim at a time
	// maxLive is the largest live state (bytes) of a partition here, as
	// last seen (space.go).
	maxLive atomic.Int64

	mu    sync.Mutex
	parts map[uint32]*partSlot
	rng   *rand.Rand

	dedup    *dedupTable
	sessions *sessionTable
	reqIDs   atomic.Uint64 // request ids of node-to-node calls

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed bool
	start  time.Time
}

type partSlot struct {
	ready chan struct{} // closed once p and err are set
	p     *partition
	err   error
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// NodeSenderID is the sender id a node's requests carry (fnv-64a of its
// id).
func NodeSenderID(id cluster.NodeID) uint64 {
	h := fnv.New64a()
	h.Write([]byte("node:"))
	h.Write([]byte(id))
	return h.Sum64() | 1
}

// New opens the namespace logs in cfg.Store, replays them and starts
// recovery of the transactions they left unfinished.
func New(cfg Config) (*Service, error) {
	if cfg.Node == "" || cfg.Map == nil || cfg.Store == nil || cfg.Peers == nil {
		return nil, fmt.Errorf("metadata: Config needs Node, Map, Store and Peers")
	}
	if cfg.Data == nil {
		cfg.Data = NoData{}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(cfg.Clock().UnixNano())
	}
	if cfg.SessionLease <= 0 {
		cfg.SessionLease = 30 * time.Second
	}
	if cfg.OrphanGrace <= 0 {
		cfg.OrphanGrace = 2 * cfg.SessionLease
	}
	if cfg.ResolveInterval <= 0 {
		cfg.ResolveInterval = time.Second
	}
	if cfg.RewriteMinBytes == 0 {
		cfg.RewriteMinBytes = 64 << 20
	}
	if cfg.RewriteRatio <= 0 {
		cfg.RewriteRatio = 4
	}
	if cfg.SpaceReserve == 0 {
		cfg.SpaceReserve = max(minSpaceReserve, uint64(len(cfg.Store.Region().Bytes()))/64)
	}
	if cfg.ReadDirBytes == 0 {
		cfg.ReadDirBytes = 64 << 10
	}
	if cfg.MaxLinks == 0 {
		cfg.MaxLinks = DefaultMaxLinks
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Service{
		cfg: cfg, log: log.With("node", cfg.Node), now: cfg.Clock, inc: cfg.Incarnation,
		self:     NodeSenderID(cfg.Node),
		parts:    map[uint32]*partSlot{},
		rng:      rand.New(rand.NewPCG(cfg.Incarnation, uint64(cfg.Clock().UnixNano()))),
		sessions: newSessions(),
		ctx:      ctx, cancel: cancel,
	}
	s.start = s.now()
	s.dedup = newDedup(s.now)
	for _, id := range cfg.Store.IDs() {
		if id.Service != ServiceID {
			continue
		}
		if _, err := s.openPartition(ctx, id.Partition, false); err != nil {
			cancel()
			return nil, err
		}
	}
	s.goBackground(s.janitor)
	return s, nil
}

// Close stops the background work and waits for it. Requests in flight
// fail; the logs stay as they are (a new Service on the same Store
// recovers).
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	// Let the committers finish what was applied (nothing new is
	// committed once the service is closed).
	for _, p := range s.loaded() {
		c := &p.cm
		c.mu.Lock()
		for c.busy || c.appending {
			c.cond.Wait()
		}
		c.mu.Unlock()
	}
	return nil
}

// newGen returns a fresh inode generation.
func (s *Service) newGen() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rng.Uint64() | 1
}

// Incarnation is this process's incarnation.
func (s *Service) Incarnation() uint64 { return s.inc }

func (s *Service) goBackground(fn func(ctx context.Context)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		fn(s.ctx)
	}()
}

func (s *Service) epoch() uint64 { return s.cfg.Map.Current().Epoch }

// owns reports whether the current map gives partition p to this node.
func (s *Service) owns(p uint32) bool {
	m := s.cfg.Map.Current()
	if !m.Initialized() || p >= m.NumPartitions() {
		return false
	}
	return m.Partitions[p] == s.cfg.Node
}

// partition returns partition id for a request about what it holds,
// opening it on first use. It answers StatusWrongOwner when the map does
// not give the partition to this node. A partition this node owns but
// has no log of holds nothing yet: it is answered by an empty partition
// that is not kept, so that a request naming an inode there (stale, or
// made up) neither pins the partition nor creates its log; only
// partitionForNew does.
func (s *Service) partition(ctx context.Context, id uint32) (*partition, wire.Status) {
	return s.partitionFor(ctx, id, id == cluster.PartitionOf(cluster.RootInode))
}

// partitionForNew is partition for a request that creates an inode in
// partition id: the partition's log is created (after pinning it) if it
// has none.
func (s *Service) partitionForNew(ctx context.Context, id uint32) (*partition, wire.Status) {
	return s.partitionFor(ctx, id, true)
}

func (s *Service) partitionFor(ctx context.Context, id uint32, create bool) (*partition, wire.Status) {
	if !s.owns(id) {
		return nil, wire.StatusWrongOwner
	}
	p, err := s.openPartition(ctx, id, create)
	if errors.Is(err, errNoLog) {
		return newPartition(s, id, nil), wire.StatusOK
	}
	if err == nil {
		if err = p.failed(); err != nil {
			return nil, wire.StatusInternal
		}
		touch(ctx, p)
	}
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrClosed) || errors.Is(err, errWouldWait) {
			return nil, wire.StatusNotReady
		}
		s.log.Error("partition cannot be opened", "partition", id, "err", err)
		return nil, wire.StatusInternal
	}
	return p, wire.StatusOK
}

// errNoLog: the partition has no log and the caller did not ask for one.
var errNoLog = errors.New("metadata: the partition has no log")

// errWouldWait: an inline attempt (inline.go) met a partition still to
// be loaded.
var errWouldWait = errors.New("metadata: the partition is loading")

// openPartition returns partition id, loading its log, or creating it
// (after pinning the partition) when create is set, on first use.
func (s *Service) openPartition(ctx context.Context, id uint32, create bool) (*partition, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		slot := s.parts[id]
		if (slot == nil || !isClosed(slot.ready)) && mustNotWait(ctx) {
			s.mu.Unlock()
			return nil, errWouldWait
		}
		if slot != nil {
			s.mu.Unlock()
			if !isClosed(slot.ready) { // a loaded slot needs no select
				select {
				case <-slot.ready:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			if errors.Is(slot.err, errNoLog) && create {
				continue // a reader found no log; this caller makes one
			}
			if slot.err != nil {
				return nil, slot.err
			}
			return slot.p, nil
		}
		slot = &partSlot{ready: make(chan struct{})}
		s.parts[id] = slot
		s.mu.Unlock()
		slot.p, slot.err = s.loadPartition(ctx, id, create)
		if slot.err != nil {
			// Let a later request try again.
			s.mu.Lock()
			delete(s.parts, id)
			s.mu.Unlock()
		}
		close(slot.ready)
		if slot.err == nil {
			s.recoverPartition(slot.p)
		}
		return slot.p, slot.err
	}
}

func (s *Service) loadPartition(ctx context.Context, id uint32, create bool) (*partition, error) {
	lid := plog.LogID{Service: ServiceID, Partition: id}
	exists := slices.Contains(s.cfg.Store.IDs(), lid)
	if !exists {
		if !create {
			return nil, fmt.Errorf("partition %d: %w", id, errNoLog)
		}
		if s.cfg.Pin != nil {
			if err := s.cfg.Pin(ctx, id); err != nil {
				return nil, fmt.Errorf("metadata: pin partition %d before creating its log: %w", id, err)
			}
		}
	}
	l, err := s.cfg.Store.Log(lid)
	if err != nil {
		return nil, fmt.Errorf("metadata: open the log of partition %d: %w", id, err)
	}
	p := newPartition(s, id, l)
	if err := p.replay(); err != nil {
		return nil, fmt.Errorf("metadata: replay partition %d: %w", id, err)
	}
	if id == cluster.PartitionOf(cluster.RootInode) {
		if err := p.ensureRoot(); err != nil {
			return nil, err
		}
	}
	s.log.Debug("partition open", "partition", id, "inodes", len(p.inodes), "intents", len(p.intents), "decisions", len(p.decisions))
	return p, nil
}

// ensureRoot creates the root directory in partition 0's log on its
// first use.
func (p *partition) ensureRoot() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inodes[cluster.RootInode] != nil {
		return nil
	}
	now := wire.TimespecOf(p.svc.now())
	root := &wire.InodeRecord{Ino: cluster.RootInode, Gen: 1, Mode: wire.ModeDir | 0o755, Nlink: 2,
		Atime: now, Mtime: now, Ctime: now, Btime: now, Parent: cluster.RootInode, NextCookie: firstCookie}
	return p.commit(root, &wire.CountersRecord{NextIno: 2, TxnLimit: p.txnLimit})
}

// loaded returns the partitions open now.
func (s *Service) loaded() []*partition {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*partition
	for _, slot := range s.parts {
		select {
		case <-slot.ready:
			if slot.p != nil {
				out = append(out, slot.p)
			}
		default:
		}
	}
	return out
}

// localPartition returns partition id if this node owns it (see
// partition).
func (s *Service) localPartition(ctx context.Context, id uint32) *partition {
	p, st := s.partition(ctx, id)
	if st != wire.StatusOK {
		return nil
	}
	return p
}

// janitor ends expired sessions, frees orphans whose grace passed, and
// asks coordinators about rename locks held long.
func (s *Service) janitor(ctx context.Context) {
	tick := min(s.cfg.ResolveInterval, s.cfg.SessionLease/4)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := s.now()
		for _, sess := range s.sessions.expired(now) {
			s.log.Debug("session expired; releasing its opens and locks", "client", sess.key.id)
			s.endSession(ctx, sess)
		}
		s.dedup.forgetIdle(now.Add(-10 * s.cfg.SessionLease))
		for _, p := range s.loaded() {
			p.resolveLocks(ctx)
			if now.Sub(s.start) > s.cfg.OrphanGrace {
				p.freeOrphans(ctx)
			}
		}
	}
}

// endSession releases a session's opens and advisory locks.
func (s *Service) endSession(ctx context.Context, sess *session) {
	for ino, oc := range sess.opens {
		if p := s.localPartition(ctx, cluster.PartitionOf(ino)); p != nil {
			// A writer that vanished may have had blocks allocated
			// that no commit covers.
			p.endOpens(ino, oc.n, oc.writers > 0)
		}
	}
	for _, p := range s.loaded() {
		p.adv.dropClient(sess.key.id)
	}
}

// InodeInfo describes one inode for checkers (tests, fsck): its
// attributes and its state flags (wire.InodePending, InodeDead,
// InodeOrphan, InodeFreeing).
type InodeInfo struct {
	Attr  wire.Attr
	Flags uint32
}

// Inodes lists every inode of the partitions this node has open, for
// checkers: together with a walk of the namespace it finds leaks.
func (s *Service) Inodes() []InodeInfo {
	var out []InodeInfo
	for _, p := range s.loaded() {
		p.mu.RLock()
		for _, n := range p.inodes {
			out = append(out, InodeInfo{Attr: n.attr(), Flags: n.rec.Flags})
		}
		p.mu.RUnlock()
	}
	return out
}

// Busy reports whether any partition has unfinished intents, decisions
// or rename locks (a checker waits for it to clear before comparing).
func (s *Service) Busy() bool {
	for _, p := range s.loaded() {
		p.mu.RLock()
		busy := len(p.intents)+len(p.decisions)+len(p.locks)+len(p.active) > 0
		p.mu.RUnlock()
		if busy {
			return true
		}
	}
	return false
}
