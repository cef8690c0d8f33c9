package pmem

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/octofs/octofs/pmem/alloc"
)

// Options configure opening a region.
type Options struct {
	// Logger receives recovery and repair notes; nil discards them.
	Logger *slog.Logger
	// Require refuses backings weaker than this (Open and Create only).
	Require Requirement
	// ExpectCluster, when set, refuses a region that already belongs to
	// another cluster. A region with no cluster yet is accepted.
	ExpectCluster UUID
	// ExpectNode, when set, refuses a region of another node.
	ExpectNode uint64
	// ReadOnly refuses transactions and identity changes and never writes
	// the medium: recovery (superblock repair, replaying committed
	// transactions) happens in memory only, visible through Load8, Root,
	// Record, Records and Check but not through Bytes, Payload or
	// ExtentBytes, which show the medium as it is.
	ReadOnly bool
	// DiscardCorruptLog drops committed log slots that fail their checks
	// instead of refusing to open (fsck --repair). Their updates are lost.
	DiscardCorruptLog bool
}

// FormatOptions shape a new region. Zero fields take the defaults.
type FormatOptions struct {
	BlockSize   uint32 // default 4096
	RecordSize  uint32 // default 256
	ExtentSlots uint32 // extents per record, default 4
	// LogSlots is how many transactions can be in flight at once; default
	// 16, fewer on regions too small to give the log an eighth of them.
	LogSlots uint32
	// LogSlotSize bounds one transaction; default 128 KiB (64 KiB of
	// logged writes with room to spare), smaller on small regions.
	LogSlotSize uint32
	NumRecords  uint64 // default one per 16 data blocks
	RegionUUID  UUID   // default random
	ClusterUUID UUID
	NodeID      uint64
	// Now is when the region is formatted (the caller's clock).
	Now time.Time
	// Rand supplies the region UUID; default crypto/rand.
	Rand io.Reader
}

// Default geometry.
const (
	DefaultLogSlots    = 16
	DefaultLogSlotSize = 128 << 10
)

// RecoveryInfo says what opening the region had to do.
type RecoveryInfo struct {
	// SuperblockFrom is the copy the superblock was taken from ("A"/"B").
	SuperblockFrom string `json:"superblock_from"`
	// SuperblockRepaired names the copy rewritten from the other one and
	// why, empty if both were good and equal.
	SuperblockRepaired string `json:"superblock_repaired,omitempty"`
	// Replayed is how many committed transactions were replayed.
	Replayed int `json:"replayed"`
	// Discarded describes damaged committed log slots that were dropped.
	Discarded []string `json:"discarded,omitempty"`
}

// Stats are allocation counts (transactions in flight count as used).
type Stats struct {
	Records     uint64 `json:"records"`
	RecordsUsed uint64 `json:"records_used"`
	Blocks      uint64 `json:"blocks"`
	BlocksUsed  uint64 `json:"blocks_used"`
	BlockSize   uint32 `json:"block_size"`
	// LongestFreeRun is the largest extent AllocExtent can hand out now.
	LongestFreeRun uint64 `json:"longest_free_run"`
}

// Region is an open persistent-memory region. Its methods are safe for
// concurrent use; see the package documentation for what concurrent
// transactions may touch.
type Region struct {
	m      Medium
	obs    StoreObserver
	buf    []byte
	info   MediumInfo
	logger *slog.Logger
	opts   Options
	geo    Geometry // immutable after open
	// ro holds the words recovery changed when the region may not write
	// its medium (Options.ReadOnly or a read-only mapping). It is written
	// only while opening, then read.
	ro map[uint64]uint64

	sbMu sync.Mutex
	sb   Superblock

	slots chan int      // free redo-log slots
	seq   atomic.Uint64 // last commit sequence number handed out

	// allocMu guards the volatile allocator indexes. Each call holds it
	// for one search or update of a summary tree: microseconds.
	allocMu          sync.Mutex
	recs, blks       *alloc.Tree // allocated or reserved
	recHint, blkHint uint64

	failed   atomic.Pointer[error]
	closed   atomic.Bool
	recovery RecoveryInfo
}

func discardLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return l
}

// Open opens an existing region file or device, recovers it and checks
// its identity against o.
func Open(path string, o Options) (*Region, error) {
	m, err := OpenFileMedium(path, FileOptions{Require: o.Require, ReadOnly: o.ReadOnly})
	if err != nil {
		return nil, err
	}
	r, err := Attach(m, o)
	if err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}

// Format writes a fresh, empty region onto m, destroying what it held,
// and opens it. A crash while formatting leaves either what m held
// before, or a medium that does not open as a region (ErrNotFormatted or
// ErrBadMagic: format it again), or the new empty region: the old
// superblocks are invalidated first and the new ones written last.
func Format(m Medium, fo FormatOptions, o Options) (r *Region, err error) {
	buf := m.Bytes()
	if m.Info().ReadOnly || o.ReadOnly {
		return nil, fmt.Errorf("%w: cannot format a read-only region", ErrReadOnly)
	}
	if len(buf) == 0 || uintptr(unsafe.Pointer(&buf[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: medium is empty or not 8-byte aligned", ErrUnsupported)
	}
	g, err := formatGeometry(uint64(len(buf)), fo)
	if err != nil {
		return nil, err
	}
	sb := Superblock{
		Version:     FormatVersion,
		Seq:         1,
		RegionUUID:  fo.RegionUUID,
		ClusterUUID: fo.ClusterUUID,
		NodeID:      fo.NodeID,
		Geometry:    g,
	}
	if !fo.Now.IsZero() {
		sb.FormatTime = fo.Now.UnixNano()
	}
	if sb.RegionUUID.IsZero() {
		rnd := fo.Rand
		if rnd == nil {
			rnd = rand.Reader
		}
		if _, err := io.ReadFull(rnd, sb.RegionUUID[:]); err != nil {
			return nil, fmt.Errorf("pmem: region uuid: %w", err)
		}
		sb.RegionUUID[6] = sb.RegionUUID[6]&0x0f | 0x40 // version 4
		sb.RegionUUID[8] = sb.RegionUUID[8]&0x3f | 0x80 // RFC 4122 variant
	}
	r = &Region{m: m, buf: buf, geo: g, info: m.Info(), logger: discardLogger(o.Logger)}
	r.obs, _ = m.(StoreObserver)
	defer r.guardWrite(&err, debug.SetPanicOnFault(true))
	// Invalidate the old superblocks first, each with one failure-atomic
	// store of its magic word, so that a crash while formatting leaves
	// either the old region untouched or one no copy of which opens;
	// then clear everything else before the new superblocks go in.
	for _, off := range []uint64{0, superblockSlot} {
		r.store8(off, 0)
		if err := r.persist(off, 8); err != nil {
			return nil, err
		}
	}
	r.zero(rootsOff, g.recordsEnd()-rootsOff)
	if err := r.persist(rootsOff, g.recordsEnd()-rootsOff); err != nil {
		return nil, err
	}
	// Each new copy (with the rest of its 4 KiB slot cleared) goes in
	// magic last, so that a torn copy never has a magic (and then a
	// misleading version).
	slot := make([]byte, superblockSlot)
	copy(slot, sb.Encode())
	for _, off := range []uint64{superblockSlot, 0} {
		r.storeBytes(off+8, slot[8:])
		if err := r.persist(off+8, superblockSlot-8); err != nil {
			return nil, err
		}
		r.storeBytes(off, slot[:8])
		if err := r.persist(off, 8); err != nil {
			return nil, err
		}
	}
	return Attach(m, o)
}

// formatGeometry chooses the geometry for a region of size bytes.
func formatGeometry(size uint64, fo FormatOptions) (Geometry, error) {
	g := Geometry{
		RegionSize:  size,
		BlockSize:   cmp.Or(fo.BlockSize, 4096),
		RecordSize:  cmp.Or(fo.RecordSize, 256),
		ExtentSlots: cmp.Or(fo.ExtentSlots, 4),
		LogSlots:    cmp.Or(fo.LogSlots, DefaultLogSlots),
		LogSlotSize: cmp.Or(fo.LogSlotSize, DefaultLogSlotSize),
		NumRecords:  fo.NumRecords,
	}
	if size < MinRegionSize {
		return g, fmt.Errorf("%w: region of %d bytes is smaller than the minimum %d", ErrGeometry, size, MinRegionSize)
	}
	// Defaults shrink on small regions so that the log takes at most an
	// eighth: first fewer slots (down to 4), then smaller ones.
	for fo.LogSlots == 0 && g.LogSlots > 4 && uint64(g.LogSlots)*uint64(g.LogSlotSize) > size/8 {
		g.LogSlots /= 2
	}
	for fo.LogSlotSize == 0 && g.LogSlotSize > 2048 && uint64(g.LogSlots)*uint64(g.LogSlotSize) > size/8 {
		g.LogSlotSize /= 2
	}
	// Validate everything but the counts with an empty layout first.
	base, err := layout(g)
	if err != nil {
		return g, err
	}
	if g.NumRecords == 0 {
		g.NumRecords = max(16, (size-base.DataOff)/(16*uint64(g.BlockSize)+uint64(g.RecordSize)))
	}
	if base, err = layout(g); err != nil {
		return g, err
	}
	// Each block costs BlockSize bytes and one bit; start from that
	// estimate and step down while alignment padding does not fit.
	avail := size - base.DataOff
	g.NumBlocks = avail * 8 / (8*uint64(g.BlockSize) + 1)
	for range 64 {
		if out, err := layout(g); err == nil {
			if out.NumBlocks == 0 {
				break
			}
			return out, nil
		}
		if g.NumBlocks == 0 {
			break
		}
		g.NumBlocks--
	}
	return g, fmt.Errorf("%w: region of %d bytes leaves no room for data blocks with this geometry", ErrGeometry, size)
}

// Attach opens the region already on m: it picks the superblock, repairs
// a damaged or stale copy, replays committed transactions, discards
// uncommitted ones and rebuilds the allocators' indexes. A media error
// while doing so is an error (ErrMedia), not a crash.
func Attach(m Medium, o Options) (r *Region, err error) {
	buf := m.Bytes()
	if len(buf) < MinRegionSize {
		return nil, fmt.Errorf("%w: medium of %d bytes is smaller than a region (%d)", ErrGeometry, len(buf), MinRegionSize)
	}
	if uintptr(unsafe.Pointer(&buf[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: medium is not 8-byte aligned", ErrUnsupported)
	}
	r = &Region{m: m, buf: buf, info: m.Info(), logger: discardLogger(o.Logger), opts: o}
	r.obs, _ = m.(StoreObserver)
	if o.ReadOnly || r.info.ReadOnly {
		r.ro = make(map[uint64]uint64)
	}
	defer r.guardRead(&err, debug.SetPanicOnFault(true))
	a, errA := DecodeSuperblock(buf[0:superblockSlot])
	b, errB := DecodeSuperblock(buf[superblockSlot : 2*superblockSlot])
	sb, from, fixOther, err := pickSuperblock(a, b, errA, errB)
	if err != nil {
		return nil, err
	}
	g := sb.Geometry
	if g.RegionSize > uint64(len(buf)) {
		return nil, fmt.Errorf("%w: the superblock describes %d bytes but the medium has %d: the file was truncated or the wrong device was given; restore the original or reformat", ErrGeometry, g.RegionSize, len(buf))
	}
	if !o.ExpectCluster.IsZero() && !sb.ClusterUUID.IsZero() && sb.ClusterUUID != o.ExpectCluster {
		return nil, fmt.Errorf("%w: region %s belongs to cluster %s, this node is configured for cluster %s: check the node's cluster setting or region path; reformat the region only if its data is no longer needed", ErrWrongCluster, sb.RegionUUID, sb.ClusterUUID, o.ExpectCluster)
	}
	if o.ExpectNode != 0 && sb.NodeID != 0 && sb.NodeID != o.ExpectNode {
		return nil, fmt.Errorf("%w: region %s belongs to node %d, not node %d: check the node id or the region path", ErrWrongCluster, sb.RegionUUID, sb.NodeID, o.ExpectNode)
	}
	r.sb, r.geo = sb, g
	r.buf = buf[:g.RegionSize]
	names := [2]string{"A", "B"}
	r.recovery.SuperblockFrom = names[from]
	if fixOther {
		other := 1 - from
		why := "stale"
		if e := [2]error{errA, errB}[other]; e != nil {
			why = e.Error()
		}
		r.recovery.SuperblockRepaired = fmt.Sprintf("copy %s (%s) rewritten from copy %s", names[other], why, names[from])
		r.logger.Warn("pmem: repairing superblock copy", "copy", names[other], "reason", why, "from", names[from])
		if err := r.writeSuperblockCopy(other, sb); err != nil {
			return nil, err
		}
	}
	if err := r.recoverLog(); err != nil {
		return nil, err
	}
	r.rebuildIndexes()
	r.logger.Info("pmem: region open", "region", sb.RegionUUID.String(), "mode", r.info.Mode.String(),
		"domain", r.info.Domain.String(), "instruction", r.info.Instruction.String(), "path", r.info.Path,
		"replayed", r.recovery.Replayed)
	r.slots = make(chan int, g.LogSlots)
	for i := range int(g.LogSlots) {
		r.slots <- i
	}
	return r, nil
}

func (r *Region) writeSuperblockCopy(copyIdx int, sb Superblock) error {
	off := uint64(copyIdx) * superblockSlot
	r.storeBytes(off, sb.Encode())
	return r.persist(off, superblockSize)
}

// recoverLog replays committed slots in seq order and clears them. The
// replayed words are durable before any slot is cleared, so a crash
// during recovery leaves the slots to replay again.
func (r *Region) recoverLog() error {
	g := r.geo
	type found struct {
		slot int
		s    logSlot
	}
	var committed []found
	var clearSlots []int
	var maxSeq uint64
	for i := range int(g.LogSlots) {
		off := g.slotOff(i)
		s, err := decodeLogSlot(r.buf[off:off+uint64(g.LogSlotSize)], g)
		if err != nil {
			if !r.opts.DiscardCorruptLog {
				return fmt.Errorf("redo-log slot %d: %w: a committed transaction cannot be replayed, so the region is not consistent; run `octoctl fsck --region PATH --repair` to discard it (its update is lost), or restore from a replica", i, err)
			}
			msg := fmt.Sprintf("slot %d: %v", i, err)
			r.recovery.Discarded = append(r.recovery.Discarded, msg)
			r.logger.Warn("pmem: discarding damaged redo-log slot", "slot", i, "err", err)
			clearSlots = append(clearSlots, i)
			continue
		}
		if s.committed {
			committed = append(committed, found{i, s})
			clearSlots = append(clearSlots, i)
			maxSeq = max(maxSeq, s.seq)
		}
	}
	r.seq.Store(maxSeq)
	if len(clearSlots) == 0 {
		return nil
	}
	slices.SortFunc(committed, func(a, b found) int { return cmp.Compare(a.s.seq, b.s.seq) })
	var touched spans
	for _, c := range committed {
		for _, e := range c.s.entries {
			r.applyEntry(e)
			touched.add(r.entrySpan(e))
		}
	}
	if err := r.persistSpans(touched); err != nil {
		return err
	}
	var errs flushErrs
	for _, i := range clearSlots {
		r.store8(g.slotOff(i), 0)
		errs.add(r.flush(g.slotOff(i), 8))
	}
	if errs.add(r.fence()) != nil {
		return errs.err
	}
	r.recovery.Replayed = len(committed)
	if len(committed) > 0 {
		r.logger.Info("pmem: replayed committed transactions", "count", len(committed))
	}
	return nil
}

// rebuildIndexes loads the volatile allocator indexes from the
// persistent bitmaps.
func (r *Region) rebuildIndexes() {
	g := r.geo
	load := func(off, n uint64) []uint64 {
		w := make([]uint64, (n+63)/64)
		for i := range w {
			w[i] = r.load8(off + 8*uint64(i))
		}
		return w
	}
	recs, blks := alloc.NewTree(g.NumRecords), alloc.NewTree(g.NumBlocks)
	recs.Load(load(g.RecBitmapOff, g.NumRecords))
	blks.Load(load(g.BlkBitmapOff, g.NumBlocks))
	r.allocMu.Lock()
	r.recs, r.blks = recs, blks
	r.allocMu.Unlock()
}

// Close releases the region. Transactions must be finished first.
func (r *Region) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	return r.m.Close()
}

// Bytes is the whole mapped region: one stable slice for the life of the
// Region, which the RDMA layer registers as a memory region. Stores made
// through it are not logged; make them durable with Persist. A read or
// write of a poisoned or vanished page through it faults: wrap such
// access in Guarded to get an error instead.
func (r *Region) Bytes() []byte { return r.buf }

// Info says what backs the region, its persistence domain and the flush
// instruction in use.
func (r *Region) Info() MediumInfo { return r.info }

// Geometry is the region's layout.
func (r *Region) Geometry() Geometry { return r.geo }

// Superblock returns the current superblock.
func (r *Region) Superblock() Superblock {
	r.sbMu.Lock()
	defer r.sbMu.Unlock()
	return r.sb
}

// Recovery says what opening the region did.
func (r *Region) Recovery() RecoveryInfo { return r.recovery }

// Stats counts allocated records and blocks.
func (r *Region) Stats() Stats {
	r.allocMu.Lock()
	defer r.allocMu.Unlock()
	return Stats{
		Records: r.geo.NumRecords, RecordsUsed: r.recs.Used(),
		Blocks: r.geo.NumBlocks, BlocksUsed: r.blks.Used(),
		BlockSize: r.geo.BlockSize, LongestFreeRun: r.blks.Longest(),
	}
}

// SetIdentity records the cluster and node this region belongs to. It
// rewrites the superblock copies one after the other, so a crash leaves
// at least one valid copy, old or new.
func (r *Region) SetIdentity(cluster UUID, node uint64) (err error) {
	if err := r.usable(); err != nil {
		return err
	}
	r.sbMu.Lock()
	defer r.sbMu.Unlock()
	defer r.guardWrite(&err, debug.SetPanicOnFault(true))
	sb := r.sb
	sb.ClusterUUID, sb.NodeID = cluster, node
	sb.Seq++
	for _, c := range []int{0, 1} {
		if err := r.writeSuperblockCopy(c, sb); err != nil {
			r.fail(err)
			return err
		}
	}
	if err := r.failure(); err != nil {
		return err
	}
	r.sb = sb
	return nil
}

func (r *Region) usable() error {
	switch {
	case r.closed.Load():
		return ErrClosed
	case r.ro != nil:
		return ErrReadOnly
	}
	return r.failure()
}

// failure is the error that failed the region, nil while it is healthy.
func (r *Region) failure() error {
	if p := r.failed.Load(); p != nil {
		return fmt.Errorf("pmem: region failed earlier, reopen it to recover: %w", *p)
	}
	return nil
}

func (r *Region) fail(err error) { r.failed.CompareAndSwap(nil, &err) }

// Begin starts a transaction, waiting for a free redo-log slot until ctx
// is done.
func (r *Region) Begin(ctx context.Context) (*Tx, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	select {
	case slot := <-r.slots:
		return &Tx{
			r: r, slot: slot,
			setIdx: make(map[uint64]int), bitIdx: make(map[uint64]int), words: make(map[uint64]uint64),
		}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("pmem: waiting for a redo-log slot: %w", ctx.Err())
	}
}
