package pmem

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// Tx is a failure-atomic transaction: the 8-byte-aligned writes it logs,
// and the allocations and frees it makes, all become durable at Commit or
// none does. A Tx belongs to one goroutine. Always finish it with Commit
// or Abort (Abort after Commit is a no-op, so `defer tx.Abort()` is the
// idiom).
type Tx struct {
	r       *Region
	slot    int
	entries []logEntry
	setIdx  map[uint64]int // word offset -> its SET entry, so a rewrite replaces it
	fresh   []span         // bytes allocated by this tx: WriteFresh may target them
	dirty   []span         // bytes written in place, flushed before the log
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

// Len is the number of logged word updates so far.
func (tx *Tx) Len() int { return len(tx.entries) }

// Cap is how many logged word updates one transaction may hold.
func (tx *Tx) Cap() int { return tx.r.geo.LogEntriesPerSlot() }

func (tx *Tx) check() error {
	switch {
	case tx.done:
		return ErrTxDone
	case tx.err != nil:
		return tx.err
	}
	return nil
}

func (tx *Tx) log(e logEntry) error {
	if e.op == opSet {
		if i, ok := tx.setIdx[e.off]; ok {
			tx.entries[i].val = e.val
			return nil
		}
	} else {
		// Bit operations on one bitmap word merge when nothing else
		// touched the word since (allocating many records or blocks).
		for i := len(tx.entries) - 1; i >= 0; i-- {
			if x := &tx.entries[i]; x.off == e.off {
				if x.op == e.op {
					x.val |= e.val
					return nil
				}
				break
			}
		}
	}
	if len(tx.entries) >= tx.Cap() {
		tx.err = fmt.Errorf("%w: more than %d word updates; split the update or format with larger log slots", ErrTxTooLarge, tx.Cap())
		return tx.err
	}
	if e.op == opSet {
		tx.setIdx[e.off] = len(tx.entries)
	} else {
		// A SET logged earlier must not absorb a later SET of the same
		// word once a bit operation sits between them.
		delete(tx.setIdx, e.off)
	}
	tx.entries = append(tx.entries, e)
	return nil
}

// load reads a word as this transaction will leave it.
func (tx *Tx) load(off uint64) uint64 {
	v := tx.r.load8(off)
	for _, e := range tx.entries {
		if e.off == off {
			v = e.apply(v)
		}
	}
	return v
}

// Read8 reads the word at off as this transaction will leave it.
func (tx *Tx) Read8(off uint64) (uint64, error) {
	if off%8 != 0 || off+8 > uint64(len(tx.r.buf)) {
		return 0, fmt.Errorf("%w: word at %#x", ErrBadAddress, off)
	}
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

// Write logs p at off (any alignment: partial words are merged with
// their current bytes). The range must lie in one record's payload, the
// data blocks or the roots. It costs one log entry per word touched.
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
	var w [8]byte
	for wo := off &^ 7; wo < off+uint64(len(p)); wo += 8 {
		binary.LittleEndian.PutUint64(w[:], tx.load(wo))
		for i := range uint64(8) {
			if a := wo + i; a >= off && a < off+uint64(len(p)) {
				w[i] = p[a-off]
			}
		}
		if err := tx.log(logEntry{op: opSet, off: wo, val: binary.LittleEndian.Uint64(w[:])}); err != nil {
			return err
		}
	}
	return nil
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
func (tx *Tx) WriteFresh(off uint64, p []byte) error {
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
	tx.r.storeBytes(off, p)
	tx.dirty = append(tx.dirty, span{off, n})
	return nil
}

// AllocRecord allocates a record of the given kind (non-zero; the
// meaning of kinds belongs to the caller). Its payload reads as zeroes
// and its generation is one more than its previous owner's.
func (tx *Tx) AllocRecord(kind uint16) (RecordID, error) {
	if err := tx.check(); err != nil {
		return 0, err
	}
	if kind == 0 {
		return 0, fmt.Errorf("%w: record kind 0 means free", ErrBadAddress)
	}
	r := tx.r
	g := r.geo
	r.allocMu.Lock()
	idx, ok := r.recUsed.findRun(1, r.recHint)
	if ok {
		r.recUsed.set(idx)
		r.recHint = idx + 1
	}
	r.allocMu.Unlock()
	if !ok {
		return 0, fmt.Errorf("%w: all %d records are in use; free some or format a larger region", ErrNoSpace, g.NumRecords)
	}
	tx.onAbort = append(tx.onAbort, func() { r.releaseRecord(idx) })
	id := RecordID(idx + 1)
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

// FreeRecord frees record id and every extent it owns.
func (tx *Tx) FreeRecord(id RecordID) error {
	if err := tx.check(); err != nil {
		return err
	}
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

// AllocExtent allocates count contiguous blocks and records them as
// owned by record owner. The blocks' content is whatever was there:
// fill them with WriteFresh in the same transaction.
func (tx *Tx) AllocExtent(owner RecordID, count uint64) (Extent, error) {
	if err := tx.check(); err != nil {
		return Extent{}, err
	}
	r := tx.r
	g := r.geo
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
	start, ok := r.blkUsed.findRun(count, r.blkHint)
	if ok {
		r.blkUsed.setRange(start, count)
		r.blkHint = start + count
	}
	r.allocMu.Unlock()
	if !ok {
		return Extent{}, fmt.Errorf("%w: no run of %d free blocks", ErrNoSpace, count)
	}
	e := Extent{Start: start, Count: count}
	tx.onAbort = append(tx.onAbort, func() { r.releaseBlocks(e) })
	if err := tx.bitOps(opOr, e); err != nil {
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

// FreeExtent releases extent e owned by record owner. e must be exactly
// one of the owner's extents.
func (tx *Tx) FreeExtent(owner RecordID, e Extent) error {
	if err := tx.check(); err != nil {
		return err
	}
	h, err := tx.liveHeader(owner)
	if err != nil {
		return err
	}
	at := slices.Index(h.Extents, e)
	if at < 0 {
		return fmt.Errorf("%w: record %d does not own %v", ErrBadAddress, owner, e)
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
	if err := tx.bitOps(opAndNot, e); err != nil {
		return err
	}
	r := tx.r
	tx.onApplied = append(tx.onApplied, func() { r.releaseBlocks(e) })
	return nil
}

// bitOps logs one OR or ANDNOT per bitmap word covering e.
func (tx *Tx) bitOps(op logOp, e Extent) error {
	g := tx.r.geo
	for b := e.Start; b < e.End(); {
		w := b / 64
		lo := b % 64
		hi := min(uint64(64), e.End()-w*64)
		mask := ^uint64(0) >> (64 - (hi - lo)) << lo
		if err := tx.log(logEntry{op: op, off: g.BlkBitmapOff + 8*w, val: mask}); err != nil {
			return err
		}
		b = w*64 + hi
	}
	return nil
}

func (r *Region) releaseRecord(idx uint64) {
	r.allocMu.Lock()
	r.recUsed.clear(idx)
	r.allocMu.Unlock()
}

func (r *Region) releaseBlocks(e Extent) {
	r.allocMu.Lock()
	r.blkUsed.clearRange(e.Start, e.Count)
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
// visible. An error other than ErrTxTooLarge means the medium failed: the
// region refuses further work and must be reopened (recovery then
// decides whether the transaction happened).
func (tx *Tx) Commit() error {
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
	for _, s := range tx.dirty {
		r.m.Flush(int(s.off), int(s.n))
	}
	if len(tx.entries) == 0 {
		if len(tx.dirty) > 0 {
			return r.fence()
		}
		return nil
	}
	g := r.geo
	slotOff := g.slotOff(tx.slot)
	seq := r.seq.Add(1)
	enc := encodeLogSlot(r.buf[slotOff+8:slotOff+uint64(g.LogSlotSize)], seq, tx.entries)
	r.observe(slotOff+8, uint64(len(enc)))
	r.m.Flush(int(slotOff), 8+len(enc))
	if err := r.fence(); err != nil { // F1: entries durable
		return err
	}
	r.store8(slotOff, seq)
	if err := r.persist(slotOff, 8); err != nil { // F2: committed
		return err
	}
	offs := make([]uint64, len(tx.entries))
	for i, e := range tx.entries {
		r.applyEntry(e)
		offs[i] = e.off
	}
	if err := r.persistWords(offs); err != nil { // F3: applied
		return err
	}
	r.store8(slotOff, 0)
	if err := r.persist(slotOff, 8); err != nil { // F4: slot free
		return err
	}
	for _, f := range tx.onApplied {
		f()
	}
	return nil
}
