package pmem

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/bits"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"unsafe"
)

// Low-level access. Every store goes through store8, storeBytes, zero or
// applyEntry, so that a tracking medium sees it and a read-only region
// keeps it in memory.

func (r *Region) word(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.buf[off])) }

func (r *Region) load8(off uint64) uint64 {
	if r.ro != nil {
		if v, ok := r.ro[off]; ok {
			return v
		}
	}
	return atomic.LoadUint64(r.word(off))
}

func (r *Region) store8(off, v uint64) {
	if r.ro != nil {
		r.ro[off] = v
		return
	}
	atomic.StoreUint64(r.word(off), v)
	r.observe(off, 8)
}

func (r *Region) storeBytes(off uint64, p []byte) {
	if r.ro != nil {
		for w := off &^ 7; w < off+uint64(len(p)); w += 8 {
			r.ro[w] = mergeBytes(r.load8(w), w, off, p)
		}
		return
	}
	copy(r.buf[off:off+uint64(len(p))], p)
	r.observe(off, uint64(len(p)))
}

func (r *Region) zero(off, n uint64) {
	if r.ro != nil {
		r.storeBytes(off, make([]byte, n))
		return
	}
	clear(r.buf[off : off+n])
	r.observe(off, n)
}

// readBytes returns [off, off+n) as the region sees it: the medium's
// bytes, or a copy with a read-only region's in-memory changes applied.
func (r *Region) readBytes(off, n uint64) []byte {
	if r.ro == nil {
		return r.buf[off : off+n : off+n]
	}
	b := slices.Clone(r.buf[off : off+n])
	for w := off &^ 7; w < off+n; w += 8 {
		if v, ok := r.ro[w]; ok {
			var word [8]byte
			binary.LittleEndian.PutUint64(word[:], v)
			for i := range uint64(8) {
				if a := w + i; a >= off && a < off+n {
					b[a-off] = word[i]
				}
			}
		}
	}
	return b
}

func (r *Region) observe(off, n uint64) {
	if r.obs != nil {
		r.obs.Stored(int(off), int(n))
	}
}

// applyEntry performs one log entry in place.
func (r *Region) applyEntry(e logEntry) {
	switch e.op {
	case opSet, opOr, opAndNot:
		if r.ro != nil {
			r.ro[e.off] = e.apply(r.load8(e.off))
			return
		}
		w := r.word(e.off)
		switch e.op {
		case opSet:
			atomic.StoreUint64(w, e.val)
		case opOr:
			atomic.OrUint64(w, e.val)
		default:
			atomic.AndUint64(w, ^e.val)
		}
		r.observe(e.off, 8)
	case opBlkSet, opBlkClear:
		sp := r.entrySpan(e)
		for off := sp.off; off < sp.off+sp.n; off += 8 {
			if r.ro != nil {
				r.ro[off] = applyRange(e, r.geo, off, r.load8(off))
				continue
			}
			mask := applyRange(e, r.geo, off, 0) | ^applyRange(e, r.geo, off, ^uint64(0))
			if e.op == opBlkSet {
				atomic.OrUint64(r.word(off), mask)
			} else {
				atomic.AndUint64(r.word(off), ^mask)
			}
		}
		r.observe(sp.off, sp.n)
	case opWrite:
		r.storeBytes(e.off, e.data)
	}
}

// entrySpan is the bytes an entry changes.
func (r *Region) entrySpan(e logEntry) span {
	switch e.op {
	case opBlkSet, opBlkClear:
		g := r.geo
		first := g.BlkBitmapOff + e.off/64*8
		last := g.BlkBitmapOff + (e.off+e.val-1)/64*8
		return span{first, last + 8 - first}
	case opWrite:
		return span{e.off, e.val}
	}
	return span{e.off, 8}
}

// spans collects ranges to flush.
type spans []span

func (s *spans) add(sp span) { *s = append(*s, sp) }

// flush starts write-back of [off, off+n). A read-only region writes
// nothing, so it flushes nothing.
func (r *Region) flush(off, n uint64) error {
	if r.ro != nil {
		return nil
	}
	return r.m.Flush(int(off), int(n))
}

func (r *Region) fence() error {
	if r.ro != nil {
		return nil
	}
	return r.m.Fence()
}

// persist flushes [off, off+n) and fences.
func (r *Region) persist(off, n uint64) error {
	var errs flushErrs
	errs.add(r.flush(off, n))
	errs.add(r.fence())
	return errs.err
}

// persistSpans flushes the given ranges and fences. Ranges that share or
// neighbour a flush unit (a cache line, or a page for msync) are flushed
// together: fewer system calls, and never a unit none of them touches.
func (r *Region) persistSpans(s spans) error {
	if len(s) == 0 {
		return nil
	}
	unit := uint64(TrackLine)
	if r.info.Instruction == InstrMsync {
		unit = uint64(pageSize)
	}
	slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.off, b.off) })
	var errs flushErrs
	start, end := s[0].off, s[0].off+s[0].n
	for _, sp := range s[1:] {
		if sp.off/unit <= (end-1)/unit+1 {
			end = max(end, sp.off+sp.n)
			continue
		}
		errs.add(r.flush(start, end-start))
		start, end = sp.off, sp.off+sp.n
	}
	errs.add(r.flush(start, end-start))
	errs.add(r.fence())
	return errs.err
}

// Load8 atomically reads the 8-byte word at off. It panics if off is
// misaligned or outside the region, like an out-of-range slice index,
// and with a *MediaError if the word's page is poisoned or gone (recover
// it with Guarded).
func (r *Region) Load8(off uint64) uint64 {
	if off%8 != 0 || off+8 > uint64(len(r.buf)) {
		panic(fmt.Sprintf("pmem: Load8 at %#x: misaligned or outside the %d-byte region", off, len(r.buf)))
	}
	defer r.guardPanic(debug.SetPanicOnFault(true))
	return r.load8(off)
}

// Store8 is the failure-atomic single-word update: it stores v at off
// (an 8-byte aligned word in a record payload, a data block or the
// roots), flushes and fences. After a crash the word holds the old or the
// new value, never a mix. Use it for pointers; use a transaction when
// several words must change together.
func (r *Region) Store8(off, v uint64) (err error) {
	if err := r.usable(); err != nil {
		return err
	}
	if off%8 != 0 {
		return fmt.Errorf("%w: %#x is not 8-byte aligned", ErrBadAddress, off)
	}
	if err := r.checkUser(off, 8); err != nil {
		return err
	}
	defer r.guardWrite(&err, debug.SetPanicOnFault(true))
	r.store8(off, v)
	if err := r.persist(off, 8); err != nil {
		r.fail(err)
		return err
	}
	return r.failure()
}

// Persist makes [off, off+n) durable after direct stores through Bytes()
// (e.g. data written into blocks, or by RDMA). Like a commit, it fails
// if the region failed meanwhile.
func (r *Region) Persist(off, n uint64) (err error) {
	if err := r.usable(); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	if err := r.checkUser(off, n); err != nil {
		return err
	}
	defer r.guardWrite(&err, debug.SetPanicOnFault(true))
	// The stores happened behind the region's back; a tracking medium
	// learns of them here.
	r.observe(off, n)
	if err := r.persist(off, n); err != nil {
		r.fail(err)
		return err
	}
	return r.failure()
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

// readRaw returns record id's header and extent slots as bytes, read
// through load (the region, or a transaction's view of it).
func (r *Region) readRaw(id RecordID, load func(uint64) uint64) []byte {
	g := r.geo
	off := r.recordOff(id)
	raw := make([]byte, g.PayloadOffset())
	for i := uint64(0); i < g.PayloadOffset(); i += 8 {
		binary.LittleEndian.PutUint64(raw[i:], load(off+i))
	}
	return raw
}

// readHeader decodes record id's header through load.
func (r *Region) readHeader(id RecordID, load func(uint64) uint64) (recordHeader, error) {
	g := r.geo
	h, err := decodeRecordHeader(r.readRaw(id, load), g.ExtentSlots, g.NumBlocks)
	if err != nil {
		return h, fmt.Errorf("record %d: %w", id, err)
	}
	return h, nil
}

// Record returns record id's header. ErrBadAddress if the id is out of
// range; a free record has Kind 0.
func (r *Region) Record(id RecordID) (rec Record, err error) {
	if err := r.checkID(id); err != nil {
		return Record{}, err
	}
	defer r.guardRead(&err, debug.SetPanicOnFault(true))
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
	defer r.guardPanic(debug.SetPanicOnFault(true))
	return r.load8(r.geo.RootsOff + 8*uint64(i))
}

// RootOffset is the region offset of root word i.
func (r *Region) RootOffset(i int) uint64 { return r.geo.RootsOff + 8*uint64(i) }

// Records calls fn for every allocated record, in id order, until fn
// returns false. Upper layers use it to rebuild their volatile indexes.
// Records of kind KindQuarantined (set aside by fsck --repair) are
// included; skip them unless you know what to do with them.
func (r *Region) Records(fn func(Record) bool) (err error) {
	g := r.geo
	defer r.guardRead(&err, debug.SetPanicOnFault(true))
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
