package dpclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/rdma"
)

// Sentinel errors. The client library maps them to errno values.
var (
	// ErrNoSpace is ENOSPC from a chunk's owner; the file is unchanged
	// by the failed call beyond what the call completed before it.
	ErrNoSpace = errors.New("dpclient: no space left on device")
	// ErrDataLost means an owner restarted between a write and the
	// persist that was to make it durable: the data may be lost (EIO for
	// fsync).
	ErrDataLost = errors.New("dpclient: an owner restarted before the data was persisted")
	// ErrIO is any other failure of the data path (EIO).
	ErrIO = errors.New("dpclient: data I/O failed")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("dpclient: engine closed")
)

// errRetry marks a failure that a new attempt (new connection, new
// extents, new map) may not meet; errNotReady, one that needs the owner
// to be given some time first.
var (
	errRetry    = errors.New("dpclient: retry")
	errNotReady = errors.New("dpclient: owner not ready")
)

// Caller is the RPC transport the engine needs: one request to one node,
// its reply's payload back. The client library passes its rdma/rpc pool.
type Caller interface {
	Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error)
}

// Config configures an Engine.
type Config struct {
	// Device is the RDMA device data connections and buffers use.
	Device rdma.Device
	// Map is the cluster map (with region keys: the client holds the
	// token).
	Map cluster.MapSource
	// RPC carries chunk-service requests.
	RPC Caller
	// Token returns the cluster token for data connections.
	Token func() string
	// ClientID and Incarnation identify this client process (random,
	// non-zero); Name is for the nodes' logs.
	ClientID, Incarnation uint64
	Name                  string
	// Depth bounds the work requests in flight on one data connection
	// (default 256).
	Depth int
	// Attempts bounds how often one chunk's I/O is tried when a
	// connection breaks, a key is stale or the map moved (default 6).
	Attempts int
	// BounceKeep is how many bounce buffers of each size class are kept
	// registered for reuse (default 16).
	BounceKeep int
	// Prefetch is how many chunks past the one it writes a long
	// sequential writer has allocated in the background (default 2;
	// negative: none), so that an allocation that must grow the owner's
	// pools overlaps the writes before it.
	Prefetch int
	// Now is the clock for leases (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Engine is the client's data I/O engine: extent maps under leases, one
// data connection per node, one-sided READ and WRITE of chunks at their
// owners, persist on demand. It knows nothing of files beyond inode
// numbers and byte ranges; the client library keeps sizes and calls the
// namespace's commit. Its methods are safe for concurrent use.
type Engine struct {
	cfg Config
	log *slog.Logger
	pd  rdma.PD

	bufs    registry
	bounces bouncePool
	stats   counters

	mu      sync.Mutex
	conns   map[cluster.NodeID]*dataConn
	dialing map[cluster.NodeID]*sync.Mutex
	cache   map[uint64]map[uint64]*cached // ino -> chunk -> extents
	// gen counts, per inode, the changes to its cached extents that a
	// reply in flight must not undo (Forget, Persist): fetch caches a
	// reply only if gen did not move while it was out.
	gen map[uint64]uint64
	// ticks counts the sends and the arrivals of fetches of extents. A
	// cached entry keeps the tick of its arrival; a reply to a fetch
	// sent before that crossed the entry's, and the owner may have
	// answered the two in either order (crossed decides: a read's map
	// answered before a write's allocation and delivered after it must
	// not undo the allocation in the cache, or the next read sees a
	// hole).
	ticks uint64
	// dirty are the writes not yet persisted; persisting, those a
	// Persist is sending. Reads show them from unwritten extents.
	dirty      map[uint64]writes
	persisting map[uint64][]*persisting
	// streams is, per inode, the sequential write stream in progress,
	// for allocating ahead; prefetching, the chunks being allocated in
	// the background.
	streams     map[uint64]stream
	prefetching map[chunkKey]bool
	// aheadOf are the inodes this engine asked blocks ahead of its
	// writes for (TakeAhead).
	aheadOf map[uint64]bool
	closed  bool

	// bg ends the background allocations at Close; wg waits for them.
	bg     context.Context
	stopBg context.CancelFunc
	wg     sync.WaitGroup
}

// chunkKey names a chunk of a file.
type chunkKey struct{ ino, chunk uint64 }

// stream is a run of writes each starting where the last one ended.
type stream struct{ start, end uint64 }

// cached is a chunk's extents as a node told one data session, usable
// until expires.
type cached struct {
	dc      *dataConn
	expires time.Time
	exts    []wire.Extent
	// tick is when the entry was cached (Engine.ticks); an entry with
	// no dc is a dropped chunk's, expired: nothing fetched before the
	// drop may fill it. alloc: the reply was to a request that may have
	// changed the extents (allocate, fallocate), not a map.
	tick  uint64
	alloc bool
}

// ownerKey names the node process data was written to.
type ownerKey struct {
	node        cluster.NodeID
	incarnation uint64
}

// New returns an engine. It connects to nodes on first use.
func New(cfg Config) (*Engine, error) {
	if cfg.Device == nil || cfg.Map == nil || cfg.RPC == nil || cfg.Token == nil {
		return nil, fmt.Errorf("dpclient: Device, Map, RPC and Token are required")
	}
	if cfg.ClientID == 0 || cfg.Incarnation == 0 {
		return nil, fmt.Errorf("dpclient: ClientID and Incarnation must be non-zero (use dataplane.RandomID)")
	}
	if cfg.Depth == 0 {
		cfg.Depth = 256
	}
	if cfg.Attempts == 0 {
		cfg.Attempts = 6
	}
	if cfg.BounceKeep == 0 {
		cfg.BounceKeep = 16
	}
	if cfg.Prefetch == 0 {
		cfg.Prefetch = 2
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pd, err := cfg.Device.AllocPD()
	if err != nil {
		return nil, fmt.Errorf("dpclient: %w", err)
	}
	e := &Engine{cfg: cfg, log: log, pd: pd,
		conns: make(map[cluster.NodeID]*dataConn), dialing: make(map[cluster.NodeID]*sync.Mutex),
		cache: make(map[uint64]map[uint64]*cached), gen: make(map[uint64]uint64),
		dirty: make(map[uint64]writes), persisting: make(map[uint64][]*persisting), streams: make(map[uint64]stream), aheadOf: make(map[uint64]bool),
		prefetching: make(map[chunkKey]bool)}
	e.bg, e.stopBg = context.WithCancel(context.Background())
	e.bounces = bouncePool{e: e, keep: cfg.BounceKeep, free: make(map[int][]*bounce)}
	return e, nil
}

// Close ends every data connection and releases the engine's memory.
// Buffers from AllocBuffer must be freed first.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	conns := e.conns
	e.conns = nil
	e.mu.Unlock()
	e.stopBg()
	e.wg.Wait()
	for _, dc := range conns {
		dc.fail(ErrClosed)
	}
	e.bounces.close()
	return e.pd.Close()
}

// conn returns the live data connection to node, dialing one if needed.
func (e *Engine) conn(ctx context.Context, node cluster.NodeInfo) (*dataConn, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if dc := e.conns[node.ID]; dc != nil && dc.alive() {
		e.mu.Unlock()
		return dc, nil
	}
	dm := e.dialing[node.ID]
	if dm == nil {
		dm = &sync.Mutex{}
		e.dialing[node.ID] = dm
	}
	e.mu.Unlock()
	dm.Lock()
	defer dm.Unlock()
	e.mu.Lock()
	old := e.conns[node.ID]
	e.mu.Unlock()
	if old != nil && old.alive() {
		return old, nil
	}
	dc, err := e.dial(ctx, node)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		dc.fail(ErrClosed)
		return nil, ErrClosed
	}
	e.conns[node.ID] = dc
	if old != nil {
		e.stats.reconnects.Add(1)
	}
	return dc, nil
}

// dial opens a data connection to node.
func (e *Engine) dial(ctx context.Context, node cluster.NodeInfo) (*dataConn, error) {
	if node.RDMAAddr == "" {
		return nil, fmt.Errorf("%w: node %s has no RDMA address in the map", ErrIO, node.ID)
	}
	cq, err := e.cfg.Device.CreateCQ(2*e.cfg.Depth + 16)
	if err != nil {
		return nil, fmt.Errorf("dpclient: %w", err)
	}
	conn, grant, err := dataplane.DialData(ctx, e.pd, cq, node.RDMAAddr, e.cfg.Depth, dataplane.Hello{
		Token: e.cfg.Token(), ClientID: e.cfg.ClientID, Incarnation: e.cfg.Incarnation, Client: e.cfg.Name,
	})
	if err != nil {
		cq.Close()
		return nil, fmt.Errorf("%w: data connection to node %s (%s): %w", errRetry, node.ID, node.RDMAAddr, err)
	}
	return newDataConn(node.ID, conn, cq, grant, e.cfg.Depth), nil
}

// header is the request header for the map m.
func (e *Engine) header(m *cluster.Map) wire.Header {
	return wire.Header{Epoch: m.Epoch, ClientID: e.cfg.ClientID, Incarnation: e.cfg.Incarnation}
}

// call sends req to node and decodes the reply, turning statuses into
// errors. A status that a new map, connection or attempt may cure is
// errRetry.
func (e *Engine) call(ctx context.Context, node cluster.NodeInfo, req *wire.Request) (wire.Reply, error) {
	e.stats.rpc(req.Op)
	b, err := e.cfg.RPC.Call(ctx, node, uint16(req.Op), req.Encode())
	if err != nil {
		if ctx.Err() != nil {
			return wire.Reply{}, ctx.Err()
		}
		return wire.Reply{}, fmt.Errorf("%w: %v to node %s: %w", errRetry, req.Op, node.ID, err)
	}
	rep, err := wire.DecodeReply(b)
	if err != nil {
		return wire.Reply{}, fmt.Errorf("%w: %v reply from node %s: %w", ErrIO, req.Op, node.ID, err)
	}
	switch rep.Status {
	case wire.StatusOK:
		return rep, nil
	case wire.StatusWrongOwner:
		e.awaitMap(ctx, max(rep.Epoch, req.Epoch+1))
		return rep, fmt.Errorf("%w: %s", errRetry, rep.Message)
	case wire.StatusNotReady:
		return rep, fmt.Errorf("%w: %w: node %s: %s", errRetry, errNotReady, node.ID, rep.Message)
	case wire.StatusNoSession:
		return rep, fmt.Errorf("%w: %s", errRetry, rep.Message)
	case wire.StatusNoSpace:
		return rep, fmt.Errorf("%w: node %s: %s", ErrNoSpace, node.ID, rep.Message)
	case wire.StatusDataLost:
		return rep, fmt.Errorf("%w: node %s: %s", ErrDataLost, node.ID, rep.Message)
	}
	return rep, fmt.Errorf("%w: %v at node %s: %v: %s", ErrIO, req.Op, node.ID, rep.Status, rep.Message)
}

// awaitMap waits a little for a map of at least epoch.
func (e *Engine) awaitMap(ctx context.Context, epoch uint64) {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for m := e.cfg.Map.Current(); m.Epoch < epoch && wctx.Err() == nil; {
		m, _ = e.cfg.Map.Watch(wctx, m.Epoch)
	}
}

// retry runs try until it succeeds, fails for good, or runs out of
// attempts. An owner that is not ready (recovering, or collecting the
// trims deferred for it) is given a little time between attempts.
func (e *Engine) retry(ctx context.Context, try func() error) error {
	var err error
	backoff := 10 * time.Millisecond
	for attempt := 0; attempt < e.cfg.Attempts; attempt++ {
		if attempt > 0 {
			e.stats.retries.Add(1)
			e.log.Debug("retrying data I/O", "attempt", attempt, "err", err)
		}
		if err = try(); err == nil || !errors.Is(err, errRetry) || ctx.Err() != nil {
			break
		}
		if errors.Is(err, errNotReady) && attempt+1 < e.cfg.Attempts {
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
			}
			backoff *= 2
		}
	}
	if errors.Is(err, errRetry) {
		return fmt.Errorf("%w after %d attempts: %w", ErrIO, e.cfg.Attempts, err)
	}
	return err
}

// chunkConn returns the map, the node holding ino's chunk and the data
// connection to it.
func (e *Engine) chunkConn(ctx context.Context, ino, chunk uint64) (*cluster.Map, cluster.NodeInfo, *dataConn, error) {
	m, node, err := e.owner(ino, chunk)
	if err != nil {
		return m, node, nil, err
	}
	dc, err := e.conn(ctx, node)
	return m, node, dc, err
}

// owner returns the node holding ino's chunk.
func (e *Engine) owner(ino, chunk uint64) (*cluster.Map, cluster.NodeInfo, error) {
	m := e.cfg.Map.Current()
	n, err := m.ChunkOwner(ino, chunk)
	if err != nil {
		return m, n, fmt.Errorf("%w: %w", ErrIO, err)
	}
	return m, n, nil
}

// extents returns ino's chunk's extents for data connection dc, from the
// cache while the lease lasts, else by a map RPC; with alloc, by an
// allocate RPC for [lo, hi) and ahead bytes after it, unless the cached
// extents already let the write go (writable). Without alloc it also
// returns this client's unpersisted writes into the chunk at that owner
// process, taken before any RPC, so that a Persist ending meanwhile never
// hides them from a read.
func (e *Engine) extents(ctx context.Context, m *cluster.Map, node cluster.NodeInfo, dc *dataConn, ino, chunk uint64, alloc bool, lo, hi, ahead uint32) ([]wire.Extent, ownWrites, error) {
	e.mu.Lock()
	c := e.cache[ino][chunk]
	gen := e.gen[ino]
	own := e.ownLocked(ino, ownerKey{node.ID, dc.grant.Incarnation}, chunk)
	e.mu.Unlock()
	if c != nil && c.dc == dc && dc.alive() && e.cfg.Now().Before(c.expires) && (!alloc || writable(c.exts, own, lo, hi, dc.grant.BlockSize)) {
		return c.exts, own, nil
	}
	req := wire.Request{Op: wire.OpMap, Header: e.header(m), Session: dc.grant.Session, Ino: ino, Chunk: chunk}
	if alloc {
		bs := dc.grant.BlockSize
		req.Op, req.Off, req.Len, req.Ahead = wire.OpAllocate, lo, hi-lo, ahead
		if ahead > 0 {
			e.mu.Lock()
			e.aheadOf[ino] = true
			e.mu.Unlock()
		}
		if lo%bs != 0 {
			req.MineHead = own.stampCovering(lo/bs*bs, bs)
		}
		if hi%bs != 0 {
			req.MineTail = own.stampCovering(hi/bs*bs, bs)
		}
	}
	exts, err := e.fetch(ctx, node, dc, &req, gen)
	return exts, own, err
}

// ownLocked collects this client's unpersisted writes to one chunk at one
// owner process; e.mu is held.
func (e *Engine) ownLocked(ino uint64, key ownerKey, chunk uint64) ownWrites {
	var own ownWrites
	collect := func(w writes) {
		for wk, s := range w[key] {
			if wk.chunk != chunk || wk.stamp == 0 {
				continue
			}
			if own == nil {
				own = make(ownWrites)
			}
			own[wk.stamp] = own[wk.stamp].union(s)
		}
	}
	collect(e.dirty[ino])
	for _, p := range e.persisting[ino] {
		collect(p.w)
	}
	return own
}

// fetch sends a request whose reply is a chunk's extents for dc's session
// and caches them unless the inode's gen moved since the caller read it.
func (e *Engine) fetch(ctx context.Context, node cluster.NodeInfo, dc *dataConn, req *wire.Request, gen uint64) ([]wire.Extent, error) {
	// The lease runs from before the request left: the owner counts its
	// quarantine from a moment after that.
	sent := e.cfg.Now()
	e.mu.Lock()
	e.ticks++
	sentTick := e.ticks
	e.mu.Unlock()
	rep, err := e.call(ctx, node, req)
	if rep.Status == wire.StatusNoSession {
		dc.fail(fmt.Errorf("%w: node %s forgot the session", errConnLost, node.ID))
	}
	if err != nil {
		return nil, err
	}
	if rep.Incarnation != dc.grant.Incarnation {
		// The data connection reaches another process of the node
		// than the one that answered: the node restarted between.
		dc.fail(fmt.Errorf("%w: node %s restarted", errConnLost, node.ID))
		return nil, fmt.Errorf("%w: node %s restarted", errRetry, node.ID)
	}
	e.mu.Lock()
	e.ticks++
	c := &cached{dc: dc, expires: sent.Add(rep.Lease), exts: rep.Extents, tick: e.ticks, alloc: req.Op != wire.OpMap}
	if e.gen[req.Ino] == gen {
		if e.cache[req.Ino] == nil {
			e.cache[req.Ino] = make(map[uint64]*cached)
		}
		if old := e.cache[req.Ino][req.Chunk]; old == nil || old.tick < sentTick {
			e.cache[req.Ino][req.Chunk] = c
		} else {
			e.cache[req.Ino][req.Chunk] = crossed(old, c)
		}
	}
	e.mu.Unlock()
	return rep.Extents, nil
}

// crossed is what a chunk caches when reply c arrives after old, which
// arrived while c's request was out: the owner may have answered them in
// either order. A map (a read's) does not replace an allocation's
// extents, which it may predate, and an allocation replaces a map; two
// maps, the later. Two allocations, or anything after a drop: neither
// is known to be the newer, so the entry is dropped (expired).
func crossed(old, c *cached) *cached {
	switch {
	case old.dc == nil || old.alloc && c.alloc:
		return &cached{tick: c.tick}
	case old.alloc:
		return old
	}
	return c
}

// writable reports whether a write of [lo, hi) can go through exts as
// they are: every byte mapped, and each block the write covers only in
// part either written or unwritten but already written whole by this
// client (own). Any other unwritten block must be written whole, or made
// written, with zeros, by the owner first (allocate), so that it never
// converts with bytes nobody wrote.
func writable(exts []wire.Extent, own ownWrites, lo, hi, bs uint32) bool {
	mine := func(x wire.Extent, b uint32) bool { return own.covered(x.Stamp, b, bs) }
	at := lo
	for _, x := range exts {
		if x.End() <= at {
			continue
		}
		if x.Off > at {
			return false
		}
		if x.Unwritten() {
			if b := at / bs * bs; b != at && !mine(x, b) {
				return false // the write starts inside an unwritten block
			}
			if b := hi / bs * bs; hi <= x.End() && b != hi && !mine(x, b) {
				return false // it ends inside one
			}
		}
		at = x.End()
		if at >= hi {
			return true
		}
	}
	return at >= hi
}

// dropChunk forgets one chunk's cached extents.
func (e *Engine) dropChunk(ino, chunk uint64) {
	e.mu.Lock()
	if m := e.cache[ino]; m != nil {
		// An expired entry: the next I/O asks again, and a reply to a
		// fetch sent before now cannot bring the dropped extents back.
		e.ticks++
		m[chunk] = &cached{tick: e.ticks}
	}
	e.mu.Unlock()
}

// Forget drops the extents cached for ino, so that the next I/O asks the
// owners again (the client library calls it at open: close-to-open).
// Unpersisted writes stay for Persist.
func (e *Engine) Forget(ino uint64) {
	e.mu.Lock()
	delete(e.cache, ino)
	delete(e.streams, ino)
	e.gen[ino]++
	e.mu.Unlock()
}

// TakeAhead reports whether this engine asked blocks ahead of its writes
// to ino since the last TakeAhead of ino (or ever), and forgets it. The
// blocks not written stay allocated past the end of the file until its
// owner frees them: the client asks for that when it closes the file's
// last open (wire.ReleaseTrimAhead).
func (e *Engine) TakeAhead(ino uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	had := e.aheadOf[ino]
	delete(e.aheadOf, ino)
	return had
}

// noteWrite records that [lo, hi) of ino's chunk was written through
// extents of stamp at the node process key, for Persist and for this
// client's reads.
func (e *Engine) noteWrite(ino uint64, key ownerKey, chunk, stamp uint64, lo, hi uint32) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.dirty[ino]
	if w == nil {
		w = make(writes)
		e.dirty[ino] = w
	}
	w.add(key, writeKey{chunk, stamp}, lo, hi)
}

// ahead returns how many bytes to allocate past a write of [off,
// off+n) of ino, and records the write's stream: a write that starts
// where the last one ended continues a stream, and is given as many
// bytes ahead as the stream has written so far, so a sequential writer
// asks for blocks about once per chunk, while a file written at once (a
// stream's first write) gets nothing it does not use. Other writes get
// none; a write inside the stream's range (the write that follows the
// Reserves of writes kept behind, a header rewritten) neither ends nor
// extends it. What a stream allocated and did not write is freed at the
// last close (TakeAhead).
func (e *Engine) ahead(ino, off, n uint64) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	st, ok := e.streams[ino]
	switch {
	case ok && st.end == off:
		st.end = off + n
		e.streams[ino] = st
		return st.end - st.start
	case ok && off >= st.start && off+n <= st.end:
		return 0
	}
	e.streams[ino] = stream{start: off, end: off + n}
	return 0
}

// minPrefetchStream is how much a stream must have written before its
// next chunks are allocated in the background: a file written once and
// small gets nothing it does not use.
const minPrefetchStream = 2 * wire.ChunkSize

// prefetch allocates, in the background, the chunks after the one a
// sequential write of ino ended in, up to Config.Prefetch of them, each
// as far as the stream has written (to its end), unless they are cached
// or being allocated. Their extents land in the cache, where the stream's
// next writes find them. Errors are dropped: the write allocates itself
// when it must.
func (e *Engine) prefetch(ino, end, streamLen uint64) {
	if e.cfg.Prefetch <= 0 || streamLen < minPrefetchStream {
		return
	}
	last := (end - 1) / wire.ChunkSize
	for chunk := last + 1; chunk <= last+uint64(e.cfg.Prefetch); chunk++ {
		key := chunkKey{ino, chunk}
		e.mu.Lock()
		c := e.cache[ino][chunk]
		skip := e.closed || e.prefetching[key] || (c != nil && e.cfg.Now().Before(c.expires) && covered(c.exts, 0, wire.ChunkSize))
		if !skip {
			e.prefetching[key] = true
			e.wg.Add(1)
		}
		e.mu.Unlock()
		if skip {
			continue
		}
		go func() {
			defer e.wg.Done()
			defer func() {
				e.mu.Lock()
				delete(e.prefetching, key)
				e.mu.Unlock()
			}()
			ctx, cancel := context.WithTimeout(e.bg, 30*time.Second)
			defer cancel()
			m, node, err := e.owner(ino, chunk)
			if err != nil {
				return
			}
			dc, err := e.conn(ctx, node)
			if err != nil {
				return
			}
			e.stats.prefetches.Add(1)
			e.extents(ctx, m, node, dc, ino, chunk, true, 0, 0, uint32(min(streamLen, wire.ChunkSize)))
		}()
	}
}

// covered reports whether exts map every byte of [lo, hi).
func covered(exts []wire.Extent, lo, hi uint32) bool {
	at := lo
	for _, x := range exts {
		if x.End() <= at {
			continue
		}
		if x.Off > at {
			return false
		}
		at = x.End()
		if at >= hi {
			return true
		}
	}
	return at >= hi
}

// Dirty reports whether ino has writes not yet persisted.
func (e *Engine) Dirty(ino uint64) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.dirty[ino]) > 0 || len(e.persisting[ino]) > 0
}

// ClientID is the engine's client id (what nodes evict by).
func (e *Engine) ClientID() uint64 { return e.cfg.ClientID }
