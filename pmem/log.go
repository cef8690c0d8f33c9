package pmem

import (
	"encoding/binary"
	"fmt"
	"hash/crc64"
)

// Redo-log slot, LogSlotSize bytes. One transaction owns a slot from
// Begin to the end of Commit, so concurrent transactions never share one.
//
//	header (one 64-byte cache line):
//	  0  commit  0 = nothing to replay; otherwise the seq below, and the
//	             entries are complete and durable
//	  8  count   number of entries
//	  16 seq     commit sequence number; replay goes in seq order
//	  24 csum    CRC-64/ECMA over bytes [8,24) and the entries
//	entries from byte 64: count x {op<<56 | offset, value}
//
// Commit protocol, four fences (F1..F4):
//
//	write entries, count, seq, csum; flush; F1   (entries durable)
//	commit := seq; flush; F2                      (the commit point)
//	apply each entry in place; flush; F3          (home locations durable)
//	commit := 0; flush; F4                        (slot free again)
//
// A crash before F2 leaves commit 0 (or the old 0) and the transaction
// never happened. After F2, recovery replays the entries, which is
// idempotent: SET stores a value, OR/ANDNOT set and clear allocation
// bits. Commit returns only after F4, so a later transaction that touches
// the same words can only start after this slot is clear: replaying a
// stale slot can never overwrite newer data.
const (
	logHdrSize   = 64
	logEntrySize = 16

	opShift = 56
	offMask = 1<<opShift - 1
)

type logOp uint8

const (
	opSet    logOp = 1 // word = value
	opOr     logOp = 2 // word |= value (allocation bits)
	opAndNot logOp = 3 // word &^= value (freeing bits)
)

func (o logOp) String() string {
	switch o {
	case opSet:
		return "set"
	case opOr:
		return "or"
	case opAndNot:
		return "andnot"
	}
	return fmt.Sprintf("op%d", uint8(o))
}

type logEntry struct {
	op  logOp
	off uint64
	val uint64
}

// apply computes the word's new value.
func (e logEntry) apply(old uint64) uint64 {
	switch e.op {
	case opOr:
		return old | e.val
	case opAndNot:
		return old &^ e.val
	}
	return e.val
}

var crc64Table = crc64.MakeTable(crc64.ECMA)

// logSlot is a decoded slot.
type logSlot struct {
	committed bool
	seq       uint64
	entries   []logEntry
}

// encodeLogSlot writes the bytes [8, 64+16*len(entries)) of a slot into
// b, which must have room for them (Commit passes the slot itself, so
// nothing is encoded twice), and returns them: the count, seq and
// checksum words followed by the entries. The commit word is written
// separately, after these bytes are durable.
func encodeLogSlot(b []byte, seq uint64, entries []logEntry) []byte {
	b = b[:logHdrSize-8+logEntrySize*len(entries)]
	clear(b[24 : logHdrSize-8]) // the header's unused tail
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(len(entries)))
	le.PutUint64(b[8:], seq)
	ents := b[logHdrSize-8:]
	for i, e := range entries {
		le.PutUint64(ents[16*i:], uint64(e.op)<<opShift|e.off)
		le.PutUint64(ents[16*i+8:], e.val)
	}
	le.PutUint64(b[16:], logChecksum(b[0:16], ents))
	return b
}

func logChecksum(hdr, ents []byte) uint64 {
	c := crc64.Update(0, crc64Table, hdr)
	return crc64.Update(c, crc64Table, ents)
}

// decodeLogSlot parses one slot of g's log. A slot whose commit word is
// zero is free, whatever else it holds. A committed slot must have a
// matching seq, an entry count that fits, a valid checksum and entries
// that target 8-byte words inside the region's mutable areas; otherwise
// it is damaged (ErrLogCorrupt).
func decodeLogSlot(b []byte, g Geometry) (logSlot, error) {
	var s logSlot
	if len(b) < logHdrSize || len(b) < int(g.LogSlotSize) {
		return s, fmt.Errorf("%w: slot is %d bytes, want %d", ErrLogCorrupt, len(b), g.LogSlotSize)
	}
	le := binary.LittleEndian
	commit := le.Uint64(b)
	if commit == 0 {
		return s, nil
	}
	count := le.Uint64(b[8:])
	s.seq = le.Uint64(b[16:])
	if s.seq != commit {
		return s, fmt.Errorf("%w: commit word %d does not match seq %d", ErrLogCorrupt, commit, s.seq)
	}
	if count > uint64(g.LogEntriesPerSlot()) {
		return s, fmt.Errorf("%w: %d entries, a slot holds %d", ErrLogCorrupt, count, g.LogEntriesPerSlot())
	}
	ents := b[logHdrSize : logHdrSize+logEntrySize*int(count)]
	if got, want := logChecksum(b[8:24], ents), le.Uint64(b[24:]); got != want {
		return s, fmt.Errorf("%w: checksum %016x, stored %016x", ErrLogCorrupt, got, want)
	}
	s.entries = make([]logEntry, count)
	for i := range s.entries {
		w := le.Uint64(ents[16*i:])
		e := logEntry{op: logOp(w >> opShift), off: w & offMask, val: le.Uint64(ents[16*i+8:])}
		if e.op < opSet || e.op > opAndNot {
			return s, fmt.Errorf("%w: entry %d has unknown op %d", ErrLogCorrupt, i, e.op)
		}
		if !g.logTargetOK(e.off) {
			return s, fmt.Errorf("%w: entry %d targets offset %#x outside the mutable areas", ErrLogCorrupt, i, e.off)
		}
		s.entries[i] = e
	}
	s.committed = true
	return s, nil
}

// logTargetOK reports whether a log entry may write the 8-byte word at
// off: the roots, the bitmaps, the records and the data blocks, never the
// superblocks or the log itself.
func (g Geometry) logTargetOK(off uint64) bool {
	if off%8 != 0 {
		return false
	}
	inRoots := off >= g.RootsOff && off+8 <= g.RootsOff+rootsBytes
	inRest := off >= g.RecBitmapOff && off+8 <= g.dataEnd()
	return inRoots || inRest
}

func (g Geometry) slotOff(i int) uint64 { return g.LogOff + uint64(i)*uint64(g.LogSlotSize) }
