package pmem

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
)

// Redo-log slot, LogSlotSize bytes (format version 2). One transaction
// owns a slot from Begin to the end of Commit, so concurrent transactions
// never share one and commit in parallel.
//
//	header (one 64-byte cache line):
//	  0  commit  0 = nothing to replay; otherwise the seq below, and the
//	             entries are complete and durable
//	  8  count   number of entries
//	  16 seq     commit sequence number; replay goes in seq order
//	  24 csum    CRC-32C over bytes [8,24), [32,64) and the entries
//	  32 bytes   length of the entries in bytes
//	  40..64     zero
//	entries from byte 64, each 16 bytes {op<<56 | arg, val} and, for a
//	write, its data padded to 8 bytes:
//	  set     arg = word offset      val = the word's new value
//	  or      arg = word offset      val = bits to set (allocation bits)
//	  andnot  arg = word offset      val = bits to clear
//	  blkset  arg = first block      val = block count: set their bitmap bits
//	  blkclr  arg = first block      val = block count: clear them
//	  write   arg = byte offset      val = length n; n bytes follow
//
// The two block-range entries make allocating or freeing an extent of any
// length one 16-byte entry; applying one touches a bitmap word per 64
// blocks. A write logs n bytes for 16 + n rounded up, so a 128 KiB slot
// holds a transaction of 64 KiB of writes with room to spare.
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
// idempotent: set and write store values, the bit operations set and
// clear allocation bits. Commit returns only after F4, so a later
// transaction that touches the same words can only start after this slot
// is clear: replaying a stale slot can never overwrite newer data.
// Transactions in flight at once touch disjoint words, except allocation
// bitmap words, where they set or clear disjoint bits, which commutes.
const (
	logHdrSize   = 64
	logEntrySize = 16

	opShift = 56
	argMask = 1<<opShift - 1
)

type logOp uint8

const (
	opSet      logOp = 1 // word = val
	opOr       logOp = 2 // word |= val (allocation bits)
	opAndNot   logOp = 3 // word &^= val (freeing bits)
	opBlkSet   logOp = 4 // block bitmap bits [arg, arg+val) = 1
	opBlkClear logOp = 5 // block bitmap bits [arg, arg+val) = 0
	opWrite    logOp = 6 // bytes [arg, arg+val) = data
)

func (o logOp) String() string {
	switch o {
	case opSet:
		return "set"
	case opOr:
		return "or"
	case opAndNot:
		return "andnot"
	case opBlkSet:
		return "blkset"
	case opBlkClear:
		return "blkclr"
	case opWrite:
		return "write"
	}
	return fmt.Sprintf("op%d", uint8(o))
}

// logEntry is one decoded entry. For word operations off is the word's
// offset; for block ranges it is the first block and val the count; for
// writes it is the byte offset and data the bytes.
type logEntry struct {
	op   logOp
	off  uint64
	val  uint64
	data []byte
}

// size is the entry's encoded length.
func (e logEntry) size() int { return logEntrySize + int(alignUp(uint64(len(e.data)), 8)) }

// apply computes a word operation's new value.
func (e logEntry) apply(old uint64) uint64 {
	switch e.op {
	case opOr:
		return old | e.val
	case opAndNot:
		return old &^ e.val
	}
	return e.val
}

var logCRC = crc32.MakeTable(crc32.Castagnoli)

// logSlot is a decoded slot.
type logSlot struct {
	committed bool
	seq       uint64
	entries   []logEntry
}

// encodeLogSlot writes the bytes [8, 64+size) of a slot into b, which must
// have room for them (Commit passes the slot itself, so nothing is encoded
// twice), and returns them. The commit word is written separately, after
// these bytes are durable.
func encodeLogSlot(b []byte, seq uint64, entries []logEntry, size int) []byte {
	b = b[:logHdrSize-8+size]
	le := binary.LittleEndian
	ents := b[logHdrSize-8:]
	at := 0
	for _, e := range entries {
		le.PutUint64(ents[at:], uint64(e.op)<<opShift|e.off)
		le.PutUint64(ents[at+8:], e.val)
		at += logEntrySize
		if e.op == opWrite {
			n := copy(ents[at:], e.data)
			pad := int(alignUp(uint64(n), 8))
			clear(ents[at+n : at+pad])
			at += pad
		}
	}
	le.PutUint64(b[0:], uint64(len(entries)))
	le.PutUint64(b[8:], seq)
	le.PutUint64(b[24:], uint64(size))
	clear(b[32 : logHdrSize-8])
	le.PutUint64(b[16:], logChecksum(b[:logHdrSize-8], ents))
	return b
}

// logChecksum covers the header words after the commit word (hdr is the
// slot from byte 8) except the checksum itself, and the entries.
func logChecksum(hdr, ents []byte) uint64 {
	c := crc32.Update(0, logCRC, hdr[0:16])
	c = crc32.Update(c, logCRC, hdr[24:])
	return uint64(crc32.Update(c, logCRC, ents))
}

// decodeLogSlot parses one slot of g's log. A slot whose commit word is
// zero is free, whatever else it holds. A committed slot must have a
// matching seq, entries that fit, a valid checksum, known ops and targets
// inside the region's mutable areas; otherwise it is damaged
// (ErrLogCorrupt).
func decodeLogSlot(b []byte, g Geometry) (logSlot, error) {
	var s logSlot
	if len(b) < logHdrSize || len(b) < int(g.LogSlotSize) {
		return s, fmt.Errorf("%w: slot is %d bytes, want %d", ErrLogCorrupt, len(b), g.LogSlotSize)
	}
	b = b[:g.LogSlotSize]
	le := binary.LittleEndian
	commit := le.Uint64(b)
	if commit == 0 {
		return s, nil
	}
	count := le.Uint64(b[8:])
	s.seq = le.Uint64(b[16:])
	size := le.Uint64(b[32:])
	switch {
	case s.seq != commit:
		return s, fmt.Errorf("%w: commit word %d does not match seq %d", ErrLogCorrupt, commit, s.seq)
	case size > uint64(len(b)-logHdrSize) || size%8 != 0:
		return s, fmt.Errorf("%w: %d bytes of entries, a slot holds %d", ErrLogCorrupt, size, len(b)-logHdrSize)
	case count > size/logEntrySize:
		return s, fmt.Errorf("%w: %d entries in %d bytes", ErrLogCorrupt, count, size)
	}
	ents := b[logHdrSize : logHdrSize+size]
	if got, want := logChecksum(b[8:logHdrSize], ents), le.Uint64(b[24:]); got != want {
		return s, fmt.Errorf("%w: checksum %08x, stored %08x", ErrLogCorrupt, got, want)
	}
	s.entries = make([]logEntry, 0, count)
	at := uint64(0)
	for i := range count {
		if at+logEntrySize > size {
			return s, fmt.Errorf("%w: entry %d runs past the %d bytes of entries", ErrLogCorrupt, i, size)
		}
		w := le.Uint64(ents[at:])
		e := logEntry{op: logOp(w >> opShift), off: w & argMask, val: le.Uint64(ents[at+8:])}
		at += logEntrySize
		if e.op == opWrite {
			if e.val > size-at {
				return s, fmt.Errorf("%w: entry %d writes %d bytes, %d are left", ErrLogCorrupt, i, e.val, size-at)
			}
			e.data = ents[at : at+e.val : at+e.val]
			at += alignUp(e.val, 8)
		}
		if err := g.checkEntry(e); err != nil {
			return s, fmt.Errorf("%w: entry %d: %v", ErrLogCorrupt, i, err)
		}
		s.entries = append(s.entries, e)
	}
	if at != size {
		return s, fmt.Errorf("%w: %d entries use %d of %d bytes", ErrLogCorrupt, count, at, size)
	}
	s.committed = true
	return s, nil
}

// checkEntry reports whether e may be replayed: word operations on 8-byte
// words of the roots, bitmaps, records or data blocks (never the
// superblocks or the log itself), block ranges inside the block count,
// writes inside the roots or [bitmaps, data end).
func (g Geometry) checkEntry(e logEntry) error {
	switch e.op {
	case opSet, opOr, opAndNot:
		if !g.mutable(e.off, 8) || e.off%8 != 0 {
			return fmt.Errorf("%s targets offset %#x outside the mutable areas", e.op, e.off)
		}
	case opBlkSet, opBlkClear:
		if e.val == 0 || e.off >= g.NumBlocks || e.val > g.NumBlocks-e.off {
			return fmt.Errorf("%s of blocks [%d,+%d) outside the %d blocks", e.op, e.off, e.val, g.NumBlocks)
		}
	case opWrite:
		if e.val == 0 || !g.mutable(e.off, e.val) {
			return fmt.Errorf("write of [%#x,+%d) outside the mutable areas", e.off, e.val)
		}
	default:
		return fmt.Errorf("unknown op %d", e.op)
	}
	return nil
}

// mutable reports whether [off, off+n) lies inside the roots or inside
// [record bitmap, end of data).
func (g Geometry) mutable(off, n uint64) bool {
	end := off + n
	if end < off {
		return false
	}
	inRoots := off >= g.RootsOff && end <= g.RootsOff+rootsBytes
	inRest := off >= g.RecBitmapOff && end <= g.dataEnd()
	return inRoots || inRest
}

func (g Geometry) slotOff(i int) uint64 { return g.LogOff + uint64(i)*uint64(g.LogSlotSize) }
