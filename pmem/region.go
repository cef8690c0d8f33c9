package pmem

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
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
	// ReadOnly refuses transactions and identity changes. Recovery still
	// runs, in memory; open the file Private to keep it off the medium.
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
	LogSlots    uint32 // concurrent transactions, default 64
	LogSlotSize uint32 // default 4096 (252 logged words per transaction)
	NumRecords  uint64 // default one per 4 data blocks
	RegionUUID  UUID   // default random
	ClusterUUID UUID
	NodeID      uint64
	// Now is when the region is formatted (the caller's clock).
	Now time.Time
	// Rand supplies the region UUID; default crypto/rand.
	Rand io.Reader
}

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

	sbMu sync.Mutex
	sb   Superblock

	slots chan int      // free redo-log slots
	seq   atomic.Uint64 // last commit sequence number handed out

	allocMu          sync.Mutex
	recUsed, blkUsed bitset // allocated or reserved
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

// Create creates (or overwrites) a region file of size bytes at path and
// formats it. It refuses paths that do not meet o.Require.
func Create(path string, size int64, fo FormatOptions, o Options) (*Region, error) {
	m, err := OpenFileMedium(path, FileOptions{Require: o.Require, Create: true, Size: size})
	if err != nil {
		return nil, err
	}
	r, err := Format(m, fo, o)
	if err != nil {
		m.Close()
		return nil, err
	}
	return r, nil
}

// Open opens an existing region file or device, recovers it and checks
// its identity against o.
func Open(path string, o Options) (*Region, error) {
	m, err := OpenFileMedium(path, FileOptions{Require: o.Require})
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
// and opens it.
func Format(m Medium, fo FormatOptions, o Options) (*Region, error) {
	buf := m.Bytes()
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
	r := &Region{m: m, buf: buf, geo: g}
	r.obs, _ = m.(StoreObserver)
	// Zero the superblocks first so a crash while formatting leaves a
	// region that says "not formatted" rather than a half-written one.
	r.zero(0, rootsOff)
	if err := r.persist(0, rootsOff); err != nil {
		return nil, err
	}
	r.zero(rootsOff, g.recordsEnd()-rootsOff)
	if err := r.persist(rootsOff, g.recordsEnd()-rootsOff); err != nil {
		return nil, err
	}
	enc := sb.Encode()
	for _, off := range []uint64{superblockSlot, 0} {
		r.storeBytes(off, enc)
		if err := r.persist(off, superblockSize); err != nil {
			return nil, err
		}
	}
	return Attach(m, o)
}

func (r *Region) zero(off, n uint64) {
	clear(r.buf[off : off+n])
	r.observe(off, n)
}

// formatGeometry chooses the geometry for a region of size bytes.
func formatGeometry(size uint64, fo FormatOptions) (Geometry, error) {
	g := Geometry{
		RegionSize:  size,
		BlockSize:   cmp.Or(fo.BlockSize, 4096),
		RecordSize:  cmp.Or(fo.RecordSize, 256),
		ExtentSlots: cmp.Or(fo.ExtentSlots, 4),
		LogSlots:    cmp.Or(fo.LogSlots, 64),
		LogSlotSize: cmp.Or(fo.LogSlotSize, 4096),
		NumRecords:  fo.NumRecords,
	}
	if size < MinRegionSize {
		return g, fmt.Errorf("%w: region of %d bytes is smaller than the minimum %d", ErrGeometry, size, MinRegionSize)
	}
	// Validate everything but the counts with an empty layout first.
	base, err := layout(g)
	if err != nil {
		return g, err
	}
	if g.NumRecords == 0 {
		g.NumRecords = max(16, (size-base.DataOff)/(4*uint64(g.BlockSize)+uint64(g.RecordSize)))
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
// uncommitted ones and rebuilds the allocators' indexes.
func Attach(m Medium, o Options) (*Region, error) {
	buf := m.Bytes()
	if len(buf) < MinRegionSize {
		return nil, fmt.Errorf("%w: medium of %d bytes is smaller than a region (%d)", ErrGeometry, len(buf), MinRegionSize)
	}
	if uintptr(unsafe.Pointer(&buf[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: medium is not 8-byte aligned", ErrUnsupported)
	}
	r := &Region{m: m, buf: buf, info: m.Info(), logger: discardLogger(o.Logger), opts: o}
	r.obs, _ = m.(StoreObserver)
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

// recoverLog replays committed slots in seq order and clears them.
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
	var touched []uint64
	for _, c := range committed {
		for _, e := range c.s.entries {
			r.applyEntry(e)
			touched = append(touched, e.off)
		}
	}
	if err := r.persistWords(touched); err != nil {
		return err
	}
	for _, i := range clearSlots {
		r.store8(g.slotOff(i), 0)
		r.m.Flush(int(g.slotOff(i)), 8)
	}
	if err := r.fence(); err != nil {
		return err
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
	r.allocMu.Lock()
	defer r.allocMu.Unlock()
	r.recUsed = newBitset(g.NumRecords)
	for i := range r.recUsed.w {
		r.recUsed.w[i] = r.load8(g.RecBitmapOff + 8*uint64(i))
	}
	r.blkUsed = newBitset(g.NumBlocks)
	for i := range r.blkUsed.w {
		r.blkUsed.w[i] = r.load8(g.BlkBitmapOff + 8*uint64(i))
	}
	// Bits past the end of a map are not real entries; fsck reports them.
	maskTail(&r.recUsed)
	maskTail(&r.blkUsed)
}

func maskTail(b *bitset) {
	if rem := b.n % 64; rem != 0 && len(b.w) > 0 {
		b.w[len(b.w)-1] &= 1<<rem - 1
	}
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
// through it are not logged; make them durable with Persist.
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
		Records: r.geo.NumRecords, RecordsUsed: r.recUsed.count(),
		Blocks: r.geo.NumBlocks, BlocksUsed: r.blkUsed.count(),
		BlockSize: r.geo.BlockSize,
	}
}

// SetIdentity records the cluster and node this region belongs to. It
// rewrites the superblock copies one after the other, so a crash leaves
// at least one valid copy, old or new.
func (r *Region) SetIdentity(cluster UUID, node uint64) error {
	if err := r.usable(); err != nil {
		return err
	}
	r.sbMu.Lock()
	defer r.sbMu.Unlock()
	sb := r.sb
	sb.ClusterUUID, sb.NodeID = cluster, node
	sb.Seq++
	for _, c := range []int{0, 1} {
		if err := r.writeSuperblockCopy(c, sb); err != nil {
			r.fail(err)
			return err
		}
	}
	r.sb = sb
	return nil
}

func (r *Region) usable() error {
	switch {
	case r.closed.Load():
		return ErrClosed
	case r.opts.ReadOnly:
		return ErrReadOnly
	}
	if p := r.failed.Load(); p != nil {
		return fmt.Errorf("pmem: region failed earlier, reopen it to recover: %w", *p)
	}
	return nil
}

func (r *Region) fail(err error) { r.failed.CompareAndSwap(nil, &err) }

// Low-level access. Every store goes through store8/storeBytes so the
// tracking medium sees it.

func (r *Region) word(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.buf[off])) }

func (r *Region) load8(off uint64) uint64 { return atomic.LoadUint64(r.word(off)) }

func (r *Region) store8(off, v uint64) {
	atomic.StoreUint64(r.word(off), v)
	r.observe(off, 8)
}

func (r *Region) storeBytes(off uint64, p []byte) {
	copy(r.buf[off:off+uint64(len(p))], p)
	r.observe(off, uint64(len(p)))
}

func (r *Region) observe(off, n uint64) {
	if r.obs != nil {
		r.obs.Stored(int(off), int(n))
	}
}

func (r *Region) applyEntry(e logEntry) {
	w := r.word(e.off)
	switch e.op {
	case opSet:
		atomic.StoreUint64(w, e.val)
	case opOr:
		atomic.OrUint64(w, e.val)
	case opAndNot:
		atomic.AndUint64(w, ^e.val)
	}
	r.observe(e.off, 8)
}

func (r *Region) fence() error {
	if err := r.m.Fence(); err != nil {
		r.fail(err)
		return err
	}
	return nil
}

// persist flushes [off, off+n) and fences.
func (r *Region) persist(off, n uint64) error {
	r.m.Flush(int(off), int(n))
	return r.fence()
}

// persistWords flushes the lines holding the given words, coalescing
// neighbours (msync is a system call per range), and fences.
func (r *Region) persistWords(offs []uint64) error {
	if len(offs) == 0 {
		return nil
	}
	slices.Sort(offs)
	const gap = 256
	start, end := offs[0], offs[0]+8
	for _, o := range offs[1:] {
		if o <= end+gap {
			end = max(end, o+8)
			continue
		}
		r.m.Flush(int(start), int(end-start))
		start, end = o, o+8
	}
	r.m.Flush(int(start), int(end-start))
	return r.fence()
}

// Load8 atomically reads the 8-byte word at off. It panics if off is
// misaligned or outside the region, like an out-of-range slice index.
func (r *Region) Load8(off uint64) uint64 {
	if off%8 != 0 || off+8 > uint64(len(r.buf)) {
		panic(fmt.Sprintf("pmem: Load8 at %#x: misaligned or outside the %d-byte region", off, len(r.buf)))
	}
	return r.load8(off)
}

// Store8 is the failure-atomic single-word update: it stores v at off
// (an 8-byte aligned word in a record payload, a data block or the
// roots), flushes and fences. After a crash the word holds the old or the
// new value, never a mix. Use it for pointers; use a transaction when
// several words must change together.
func (r *Region) Store8(off, v uint64) error {
	if err := r.usable(); err != nil {
		return err
	}
	if err := r.checkUser(off, 8); err != nil {
		return err
	}
	r.store8(off, v)
	return r.persist(off, 8)
}

// Persist makes [off, off+n) durable after direct stores through Bytes()
// (e.g. data written into blocks, or by RDMA).
func (r *Region) Persist(off, n uint64) error {
	if err := r.usable(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := r.checkUser(off, n); err != nil {
		return err
	}
	// A tracking medium snapshots the flushed lines, so these untracked
	// stores reach its crash model through the flush.
	return r.persist(off, n)
}

// checkUser reports whether [off, off+n) lies wholly inside one area the
// caller may write: the roots, one record's payload, or the data blocks.
func (r *Region) checkUser(off, n uint64) error {
	g := r.geo
	end := off + n
	if n == 0 || end < off {
		return fmt.Errorf("%w: empty or wrapping range at %#x", ErrBadAddress, off)
	}
	switch {
	case off >= g.RootsOff && end <= g.RootsOff+rootsBytes:
		return nil
	case off >= g.DataOff && end <= g.dataEnd():
		return nil
	case off >= g.RecordOff && end <= g.recordsEnd():
		rel := off - g.RecordOff
		in := rel % uint64(g.RecordSize)
		if in >= g.PayloadOffset() && in+n <= uint64(g.RecordSize) {
			return nil
		}
	}
	return fmt.Errorf("%w: [%#x,%#x) is not inside the roots, one record's payload or the data blocks", ErrBadAddress, off, end)
}

// recordOff is where record id starts; id must be valid.
func (r *Region) recordOff(id RecordID) uint64 {
	return r.geo.RecordOff + (uint64(id)-1)*uint64(r.geo.RecordSize)
}

func (r *Region) checkID(id RecordID) error {
	if id == 0 || uint64(id) > r.geo.NumRecords {
		return fmt.Errorf("%w: record %d outside [1, %d]", ErrBadAddress, id, r.geo.NumRecords)
	}
	return nil
}

// readHeader decodes record id's header through load (the region, or a
// transaction's view of it).
func (r *Region) readHeader(id RecordID, load func(uint64) uint64) (recordHeader, error) {
	g := r.geo
	off := r.recordOff(id)
	raw := make([]byte, g.PayloadOffset())
	for i := uint64(0); i < g.PayloadOffset(); i += 8 {
		binary.LittleEndian.PutUint64(raw[i:], load(off+i))
	}
	h, err := decodeRecordHeader(raw, g.ExtentSlots, g.NumBlocks)
	if err != nil {
		return h, fmt.Errorf("record %d: %w", id, err)
	}
	return h, nil
}

// Record returns record id's header. ErrBadAddress if the id is out of
// range; a free record has Kind 0.
func (r *Region) Record(id RecordID) (Record, error) {
	if err := r.checkID(id); err != nil {
		return Record{}, err
	}
	h, err := r.readHeader(id, r.load8)
	if err != nil {
		return Record{}, err
	}
	return Record{
		ID: id, Kind: h.Kind, Gen: h.Gen, Extents: h.Extents,
		PayloadOff: r.recordOff(id) + r.geo.PayloadOffset(),
		PayloadLen: r.geo.PayloadSize(),
	}, nil
}

// Payload is record id's caller-owned bytes, a window of Bytes().
func (r *Region) Payload(id RecordID) ([]byte, error) {
	if err := r.checkID(id); err != nil {
		return nil, err
	}
	off := r.recordOff(id) + r.geo.PayloadOffset()
	return r.buf[off : off+r.geo.PayloadSize() : off+r.geo.PayloadSize()], nil
}

// ExtentOffset is where extent e's bytes start in the region.
func (r *Region) ExtentOffset(e Extent) uint64 {
	return r.geo.DataOff + e.Start*uint64(r.geo.BlockSize)
}

// ExtentBytes is extent e's bytes, a window of Bytes().
func (r *Region) ExtentBytes(e Extent) ([]byte, error) {
	if e.Count == 0 || e.Start >= r.geo.NumBlocks || e.Count > r.geo.NumBlocks-e.Start {
		return nil, fmt.Errorf("%w: %v outside the %d data blocks", ErrBadAddress, e, r.geo.NumBlocks)
	}
	off := r.ExtentOffset(e)
	n := e.Count * uint64(r.geo.BlockSize)
	return r.buf[off : off+n : off+n], nil
}

// Root returns root word i (0 <= i < NumRoots).
func (r *Region) Root(i int) uint64 {
	if i < 0 || i >= NumRoots {
		panic(fmt.Sprintf("pmem: root %d outside [0, %d)", i, NumRoots))
	}
	return r.load8(r.geo.RootsOff + 8*uint64(i))
}

// RootOffset is the region offset of root word i.
func (r *Region) RootOffset(i int) uint64 { return r.geo.RootsOff + 8*uint64(i) }

// Records calls fn for every allocated record, in id order, until fn
// returns false. Upper layers use it to rebuild their volatile indexes.
func (r *Region) Records(fn func(Record) bool) error {
	g := r.geo
	for w := uint64(0); w < (g.NumRecords+63)/64; w++ {
		bitsW := r.load8(g.RecBitmapOff + 8*w)
		for bitsW != 0 {
			b := uint64(bits.TrailingZeros64(bitsW))
			bitsW &= bitsW - 1
			idx := w*64 + b
			if idx >= g.NumRecords {
				break
			}
			rec, err := r.Record(RecordID(idx + 1))
			if err != nil {
				return err
			}
			if rec.Kind == 0 {
				return fmt.Errorf("%w: record %d is marked allocated but its header is free: run octoctl fsck", ErrRecordCorrupt, idx+1)
			}
			if !fn(rec) {
				return nil
			}
		}
	}
	return nil
}

// Begin starts a transaction, waiting for a free redo-log slot until ctx
// is done.
func (r *Region) Begin(ctx context.Context) (*Tx, error) {
	if err := r.usable(); err != nil {
		return nil, err
	}
	select {
	case slot := <-r.slots:
		return &Tx{r: r, slot: slot, setIdx: make(map[uint64]int)}, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("pmem: waiting for a redo-log slot: %w", ctx.Err())
	}
}
