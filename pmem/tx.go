package pmem

import (
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"slices"
)

// Tx is a failure-atomic transaction: the writes it logs, and the
// allocations and frees it makes, all become durable at Commit or none
// does. A Tx belongs to one goroutine. Always finish it with Commit or
// Abort (Abort after Commit is a no-op, so `defer tx.Abort()` is the
// idiom).
//
// Its size is bounded by one redo-log slot (Room): a word update costs 16
// bytes, a Write of n bytes 16 + n rounded up to 8, allocating or freeing
// an extent of any length one 16-byte range entry plus its record's
// header words.
type Tx struct {
	r       *Region
	slot    int
	entries []logEntry
	size    int            // encoded bytes of the entries
	setIdx  map[uint64]int // word offset -> its set entry, so a rewrite replaces it
	bitIdx  map[uint64]int // bitmap word -> its last or/andnot entry, to merge into
	words   map[uint64]uint64
	writes  []int  // indices of write entries
	fresh   []span // bytes allocated by this tx: WriteFresh may target them
	dirty   []span // bytes written in place, flushed before the log
	// onAbort undoes volatile reservations; onApplied returns freed
	// records and blocks to the volatile pool once the frees are durable
	// (not earlier, or another transaction could reuse them while this one
	// could still be rolled back).
	onAbort   []func()
	onApplied []func()
	err       error // sticky: the tx can only be aborted
	done      bool
}

type span struct{ off, n uint64 }

func (s span) contains(off, n uint64) bool { return off >= s.off && off+n <= s.off+s.n }

// Len is the number of log entries so far.
func (tx *Tx) Len() int { return len(tx.entries) }

// Cap is how many 16-byte word updates one transaction may hold.
func (tx *Tx) Cap() int { return tx.r.geo.LogEntriesPerSlot() }

// Room is how many bytes of log the transaction has left: a word update
// takes 16, a Write of n bytes 16 + n rounded up to a multiple of 8.
func (tx *Tx) Room() int { return tx.r.geo.LogBytesPerSlot() - tx.size }

func (tx *Tx) check() error {
	switch {
	case tx.done:
		return ErrTxDone
	case tx.err != nil:
		return tx.err
	}
	return nil
}

// log appends e, merging it into an earlier entry where that keeps replay
// equivalent: a set of a word replaces the word's earlier set when
// nothing else touched the word since, bit operations on a bitmap word
// merge with the word's previous bit operation of the same kind.
func (tx *Tx) log(e logEntry) error {
	switch e.op {
	case opSet:
		tx.words[e.off] = e.val
		if i, ok := tx.setIdx[e.off]; ok {
			tx.entries[i].val = e.val
			return nil
		}
	case opOr, opAndNot:
		tx.words[e.off] = e.apply(tx.load(e.off))
		if i, ok := tx.bitIdx[e.off]; ok && tx.entries[i].op == e.op {
			tx.entries[i].val |= e.val
			return nil
		}
	}
	if tx.size+e.size() > tx.r.geo.LogBytesPerSlot() {
		tx.err = fmt.Errorf("%w: more than %d bytes of log; split the update or format with larger log slots", ErrTxTooLarge, tx.r.geo.LogBytesPerSlot())
		return tx.err
	}
	i := len(tx.entries)
	switch e.op {
	case opSet:
		tx.setIdx[e.off] = i
		delete(tx.bitIdx, e.off)
	case opOr, opAndNot:
		tx.bitIdx[e.off] = i
		// A set logged earlier must not absorb a later set of the same
		// word once a bit operation sits between them.
		delete(tx.setIdx, e.off)
	case opBlkSet, opBlkClear:
		tx.rangeTouched(e)
	case opWrite:
		tx.writeTouched(e)
		tx.writes = append(tx.writes, i)
	}
	tx.entries = append(tx.entries, e)
	tx.size += e.size()
	return nil
}

// rangeTouched updates the view of the bitmap words a block-range entry
// covers.
func (tx *Tx) rangeTouched(e logEntry) {
	g := tx.r.geo
	first, last := g.BlkBitmapOff+e.off/64*8, g.BlkBitmapOff+(e.off+e.val-1)/64*8
	update := func(w uint64) {
		if v, ok := tx.words[w]; ok {
			tx.words[w] = applyRange(e, g, w, v)
		}
		delete(tx.bitIdx, w)
		delete(tx.setIdx, w)
	}
	if uint64(len(tx.words)) < (last-first)/8+1 {
		for w := range tx.words {
			if w >= first && w <= last {
				update(w)
			}
		}
		for w := range tx.bitIdx {
			if w >= first && w <= last {
				delete(tx.bitIdx, w)
			}
		}
		return
	}
	for w := first; w <= last; w += 8 {
		update(w)
	}
}

// writeTouched updates the view of the words a write covers.
func (tx *Tx) writeTouched(e logEntry) {
	for w := e.off &^ 7; w < e.off+e.val; w += 8 {
		if v, ok := tx.words[w]; ok {
			tx.words[w] = mergeBytes(v, w, e.off, e.data)
		}
		delete(tx.setIdx, w)
	}
}

// applyRange applies block-range entry e to bitmap word w (at offset off).
func applyRange(e logEntry, g Geometry, off, w uint64) uint64 {
	wi := (off - g.BlkBitmapOff) / 8
	lo := max(e.off, wi*64)
	hi := min(e.off+e.val, wi*64+64)
	if lo >= hi {
		return w
	}
	mask := ^uint64(0) >> (64 - (hi - lo)) << (lo - wi*64)
	if e.op == opBlkSet {
		return w | mask
	}
	return w &^ mask
}

// mergeBytes returns word w (at offset wo) with the bytes of p (at offset
// off) that fall inside it.
func mergeBytes(w, wo, off uint64, p []byte) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], w)
	for i := range uint64(8) {
		if a := wo + i; a >= off && a < off+uint64(len(p)) {
			b[i] = p[a-off]
		}
	}
	return binary.LittleEndian.Uint64(b[:])
}

// load reads a word as this transaction will leave it.
func (tx *Tx) load(off uint64) uint64 {
	if v, ok := tx.words[off]; ok {
		return v
	}
	v := tx.r.load8(off)
	g := tx.r.geo
	if off >= g.BlkBitmapOff && off < g.BlkBitmapOff+bitmapBytes(g.NumBlocks) {
		for _, e := range tx.entries {
			if e.op == opBlkSet || e.op == opBlkClear {
				v = applyRange(e, g, off, v)
			}
		}
	}
	for _, i := range tx.writes {
		if e := tx.entries[i]; off+8 > e.off && off < e.off+e.val {
			v = mergeBytes(v, off, e.off, e.data)
		}
	}
	return v
}

// Read8 reads the word at off as this transaction will leave it.
func (tx *Tx) Read8(off uint64) (v uint64, err error) {
	if off%8 != 0 || off+8 > uint64(len(tx.r.buf)) {
		return 0, fmt.Errorf("%w: word at %#x", ErrBadAddress, off)
	}
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	return tx.load(off), nil
}

// Write8 logs "word at off = v". off must be 8-byte aligned, in a record
// payload, a data block or the roots.
func (tx *Tx) Write8(off, v uint64) error {
	if err := tx.check(); err != nil {
		return err
	}
	if off%8 != 0 {
		return fmt.Errorf("%w: %#x is not 8-byte aligned", ErrBadAddress, off)
	}
	if err := tx.r.checkUser(off, 8); err != nil {
		return err
	}
	return tx.log(logEntry{op: opSet, off: off, val: v})
}

// Write logs p at off, any alignment and length up to Room()-16. The range
// must lie in one record's payload, the data blocks or the roots. It costs
// one log entry of 16 bytes plus len(p) rounded up to 8.
func (tx *Tx) Write(off uint64, p []byte) error {
	if err := tx.check(); err != nil {
		return err
	}
	if len(p) == 0 {
		return nil
	}
	if err := tx.r.checkUser(off, uint64(len(p))); err != nil {
		return err
	}
	return tx.log(logEntry{op: opWrite, off: off, val: uint64(len(p)), data: slices.Clone(p)})
}

// SetRoot logs root word i = v.
func (tx *Tx) SetRoot(i int, v uint64) error {
	if i < 0 || i >= NumRoots {
		return fmt.Errorf("%w: root %d outside [0, %d)", ErrBadAddress, i, NumRoots)
	}
	return tx.Write8(tx.r.RootOffset(i), v)
}

// WriteFresh stores p at off in place, without logging. off must lie in
// a record or extent allocated by this transaction: until Commit nothing
// reachable points there, so a crash cannot expose the bytes, and Commit
// makes them durable before the allocation is. This is how bulk data
// (file blocks, a new record's body) enters a transaction cheaply.
func (tx *Tx) WriteFresh(off uint64, p []byte) (err error) {
	if err := tx.check(); err != nil {
		return err
	}
	n := uint64(len(p))
	if n == 0 {
		return nil
	}
	ok := false
	for _, s := range tx.fresh {
		if s.contains(off, n) {
			ok = true
			break
		}
	}
	if !ok {
		return fmt.Errorf("%w: [%#x,%#x)", ErrNotFresh, off, off+n)
	}
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	tx.r.storeBytes(off, p)
	tx.dirty = append(tx.dirty, span{off, n})
	return nil
}

// AllocRecord allocates a record of the given kind (non-zero and not
// KindQuarantined; the meaning of kinds belongs to the caller). Its
// payload reads as zeroes and its generation is one more than its
// previous owner's.
func (tx *Tx) AllocRecord(kind uint16) (id RecordID, err error) {
	if err := tx.check(); err != nil {
		return 0, err
	}
	if kind == 0 || kind == KindQuarantined {
		return 0, fmt.Errorf("%w: record kind %#x is reserved (0 means free, %#x quarantined)", ErrBadAddress, kind, KindQuarantined)
	}
	r := tx.r
	g := r.geo
	r.allocMu.Lock()
	idx, ok := r.recs.Alloc(1, r.recHint)
	if ok {
		r.recHint = idx + 1
	}
	r.allocMu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: all %d records are in use; free some or format a larger region", ErrNoSpace, g.NumRecords)
	}
	tx.onAbort = append(tx.onAbort, func() { r.releaseRecord(idx) })
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	id = RecordID(idx + 1)
	off := r.recordOff(id)
	gen := r.load8(off+8) + 1
	if err := tx.log(logEntry{op: opSet, off: off + 8, val: gen}); err != nil {
		return 0, err
	}
	if err := tx.log(logEntry{op: opSet, off: off, val: encodeHeaderWord0(kind, 0)}); err != nil {
		return 0, err
	}
	if err := tx.log(logEntry{op: opOr, off: g.RecBitmapOff + idx/64*8, val: 1 << (idx % 64)}); err != nil {
		return 0, err
	}
	// The record is free on the medium until Commit, so its payload can be
	// cleared in place.
	payload := span{off + g.PayloadOffset(), g.PayloadSize()}
	tx.fresh = append(tx.fresh, payload)
	if payload.n > 0 {
		tx.r.zero(payload.off, payload.n)
		tx.dirty = append(tx.dirty, payload)
	}
	return id, nil
}

// FreeRecord frees record id and every extent it owns, whatever their
// lengths: one range entry and a slot clear per extent.
func (tx *Tx) FreeRecord(id RecordID) (err error) {
	if err := tx.check(); err != nil {
		return err
	}
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	h, err := tx.liveHeader(id)
	if err != nil {
		return err
	}
	for i, e := range h.Extents {
		if err := tx.freeBlocks(e); err != nil {
			return err
		}
		if err := tx.logExtentSlot(id, i, Extent{}); err != nil {
			return err
		}
	}
	r := tx.r
	if err := tx.log(logEntry{op: opSet, off: r.recordOff(id), val: 0}); err != nil {
		return err
	}
	idx := uint64(id) - 1
	if err := tx.log(logEntry{op: opAndNot, off: r.geo.RecBitmapOff + idx/64*8, val: 1 << (idx % 64)}); err != nil {
		return err
	}
	tx.onApplied = append(tx.onApplied, func() { r.releaseRecord(idx) })
	return nil
}

// AllocExtent allocates count contiguous blocks (any count the region has
// a free run for) and records them as owned by record owner. The blocks'
// content is whatever was there: fill them with WriteFresh in the same
// transaction.
func (tx *Tx) AllocExtent(owner RecordID, count uint64) (ext Extent, err error) {
	if err := tx.check(); err != nil {
		return Extent{}, err
	}
	r := tx.r
	g := r.geo
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	h, err := tx.liveHeader(owner)
	if err != nil {
		return Extent{}, err
	}
	if len(h.Extents) >= int(g.ExtentSlots) {
		return Extent{}, fmt.Errorf("%w: record %d already owns %d extents", ErrRecordFull, owner, g.ExtentSlots)
	}
	if count == 0 {
		return Extent{}, fmt.Errorf("%w: empty extent", ErrBadAddress)
	}
	r.allocMu.Lock()
	start, ok := r.blks.Alloc(count, r.blkHint)
	if ok {
		r.blkHint = start + count
	}
	r.allocMu.Unlock()
	if !ok {
		return Extent{}, fmt.Errorf("%w: no run of %d free blocks", ErrNoSpace, count)
	}
	e := Extent{Start: start, Count: count}
	tx.onAbort = append(tx.onAbort, func() { r.releaseBlocks(e) })
	if err := tx.log(logEntry{op: opBlkSet, off: e.Start, val: e.Count}); err != nil {
		return Extent{}, err
	}
	n := len(h.Extents)
	if err := tx.logExtentSlot(owner, n, e); err != nil {
		return Extent{}, err
	}
	if err := tx.log(logEntry{op: opSet, off: r.recordOff(owner), val: encodeHeaderWord0(h.Kind, n+1)}); err != nil {
		return Extent{}, err
	}
	tx.fresh = append(tx.fresh, span{r.ExtentOffset(e), e.Count * uint64(g.BlockSize)})
	return e, nil
}

// FreeExtent releases extent e owned by record owner, whatever its length.
// e must be exactly one of the owner's extents.
func (tx *Tx) FreeExtent(owner RecordID, e Extent) (err error) {
	if err := tx.check(); err != nil {
		return err
	}
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	h, at, err := tx.ownedExtent(owner, e)
	if err != nil {
		return err
	}
	if err := tx.freeBlocks(e); err != nil {
		return err
	}
	// Keep the used slots dense: move the last one into the hole.
	last := len(h.Extents) - 1
	if at != last {
		if err := tx.logExtentSlot(owner, at, h.Extents[last]); err != nil {
			return err
		}
	}
	if err := tx.logExtentSlot(owner, last, Extent{}); err != nil {
		return err
	}
	return tx.log(logEntry{op: opSet, off: tx.r.recordOff(owner), val: encodeHeaderWord0(h.Kind, last)})
}

// ShrinkExtent releases the blocks of extent e owned by record owner past
// its first keep (0 < keep < e.Count): the record then owns
// [e.Start, e.Start+keep) in e's slot. e must be exactly one of the
// owner's extents.
func (tx *Tx) ShrinkExtent(owner RecordID, e Extent, keep uint64) (err error) {
	if err := tx.check(); err != nil {
		return err
	}
	defer tx.r.guardRead(&err, debug.SetPanicOnFault(true))
	_, at, err := tx.ownedExtent(owner, e)
	if err != nil {
		return err
	}
	if keep == 0 || keep >= e.Count {
		return fmt.Errorf("%w: keeping %d blocks of %v", ErrBadAddress, keep, e)
	}
	if err := tx.freeBlocks(Extent{Start: e.Start + keep, Count: e.Count - keep}); err != nil {
		return err
	}
	return tx.logExtentSlot(owner, at, Extent{Start: e.Start, Count: keep})
}

// ownedExtent finds extent e among the extents of record owner (as this
// transaction leaves them): the header and e's slot. The caller guards
// the read.
func (tx *Tx) ownedExtent(owner RecordID, e Extent) (recordHeader, int, error) {
	h, err := tx.liveHeader(owner)
	if err != nil {
		return recordHeader{}, 0, err
	}
	at := slices.Index(h.Extents, e)
	if at < 0 {
		return recordHeader{}, 0, fmt.Errorf("%w: record %d does not own %v", ErrBadAddress, owner, e)
	}
	return h, at, nil
}

// liveHeader reads record id's header as this transaction leaves it; the
// record must be allocated.
func (tx *Tx) liveHeader(id RecordID) (recordHeader, error) {
	r := tx.r
	if err := r.checkID(id); err != nil {
		return recordHeader{}, err
	}
	h, err := r.readHeader(id, tx.load)
	if err != nil {
		return h, err
	}
	if !h.inUse() {
		return h, fmt.Errorf("%w: record %d is not allocated", ErrBadAddress, id)
	}
	return h, nil
}

// logExtentSlot logs extent slot i of record id = e; the zero Extent
// clears the slot.
func (tx *Tx) logExtentSlot(id RecordID, i int, e Extent) error {
	off := tx.r.recordOff(id) + recordHdrSize + uint64(i)*extentEntrySize
	if err := tx.log(logEntry{op: opSet, off: off, val: e.Start}); err != nil {
		return err
	}
	return tx.log(logEntry{op: opSet, off: off + 8, val: e.Count})
}

func (tx *Tx) freeBlocks(e Extent) error {
	if err := tx.log(logEntry{op: opBlkClear, off: e.Start, val: e.Count}); err != nil {
		return err
	}
	r := tx.r
	tx.onApplied = append(tx.onApplied, func() { r.releaseBlocks(e) })
	return nil
}

func (r *Region) releaseRecord(idx uint64) {
	r.allocMu.Lock()
	r.recs.Clear(idx, 1)
	r.allocMu.Unlock()
}

func (r *Region) releaseBlocks(e Extent) {
	r.allocMu.Lock()
	r.blks.Clear(e.Start, e.Count)
	r.allocMu.Unlock()
}

// Abort drops the transaction: nothing it logged happens and its
// reservations are released. Abort after Commit does nothing.
func (tx *Tx) Abort() {
	if tx.done {
		return
	}
	tx.done = true
	for _, f := range tx.onAbort {
		f()
	}
	tx.r.slots <- tx.slot
}

// Commit makes the transaction durable and applies it (see the protocol
// in log.go). When Commit returns nil the updates are durable and
// visible. An error other than ErrTxTooLarge means the medium failed (a
// write-back error, a media error): the region refuses further work and
// must be reopened, and recovery then decides whether the transaction
// happened. Every commit still in flight when the region fails returns
// the error too, so none reports durable a range that may not be.
func (tx *Tx) Commit() (err error) {
	if tx.done {
		return ErrTxDone
	}
	if tx.err != nil {
		err := tx.err
		tx.Abort()
		return err
	}
	r := tx.r
	if err := r.usable(); err != nil {
		tx.Abort()
		return err
	}
	tx.done = true
	defer func() { r.slots <- tx.slot }()
	defer r.guardWrite(&err, debug.SetPanicOnFault(true))
	if err := tx.commit(); err != nil {
		r.fail(err)
		return err
	}
	// A write-back error another goroutine saw may have been this
	// transaction's (see mapping.msyncMu): fail too.
	if err := r.failure(); err != nil {
		return err
	}
	for _, f := range tx.onApplied {
		f()
	}
	return nil
}

func (tx *Tx) commit() error {
	if len(tx.entries) == 0 {
		// Nothing logged means nothing allocated, so no fresh bytes
		// either: nothing to do.
		return nil
	}
	r := tx.r
	var errs flushErrs
	for _, s := range tx.dirty {
		errs.add(r.flush(s.off, s.n))
	}
	g := r.geo
	slotOff := g.slotOff(tx.slot)
	seq := r.seq.Add(1)
	enc := encodeLogSlot(r.buf[slotOff+8:slotOff+uint64(g.LogSlotSize)], seq, tx.entries, tx.size)
	r.observe(slotOff+8, uint64(len(enc)))
	errs.add(r.flush(slotOff, 8+uint64(len(enc))))
	if errs.add(r.fence()) != nil { // F1: entries durable
		return errs.err
	}
	r.store8(slotOff, seq)
	if errs.add(r.persist(slotOff, 8)) != nil { // F2: committed
		return errs.err
	}
	var touched spans
	for _, e := range tx.entries {
		r.applyEntry(e)
		touched.add(r.entrySpan(e))
	}
	if err := r.persistSpans(touched); err != nil { // F3: applied
		return err
	}
	r.store8(slotOff, 0)
	return r.persist(slotOff, 8) // F4: slot free
}

// flushErrs keeps the first of several flush errors.
type flushErrs struct{ err error }

func (f *flushErrs) add(err error) error {
	if f.err == nil {
		f.err = err
	}
	return f.err
}
