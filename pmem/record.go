package pmem

import (
	"encoding/binary"
	"fmt"
)

// RecordID names a fixed-size record. IDs start at 1, so the zero value
// can be stored in a record as "no record".
type RecordID uint64

// Extent is a run of data blocks, counted in blocks.
type Extent struct {
	Start uint64 `json:"start"`
	Count uint64 `json:"count"`
}

// End is one past the last block.
func (e Extent) End() uint64 { return e.Start + e.Count }

func (e Extent) String() string { return fmt.Sprintf("blocks [%d,%d)", e.Start, e.End()) }

// Record header, 16 bytes at the start of every record:
//
//	word 0: 0 when the record is free; otherwise
//	        kind (bits 0-15) | extent count (bits 16-31) | recordMagic (bits 48-63)
//	word 1: generation, bumped on every allocation and kept across frees
//
// then ExtentSlots entries of {start block, block count}, the first
// `extent count` of them in use and the rest zero, then the payload.
const recordMagic = 0x5245 // "RE"

// KindQuarantined is the kind fsck --repair gives a record whose header
// was damaged: it keeps the blocks the record may own and its payload, so
// that repair never frees live data, until someone who knows the record
// (the upper layer, or an operator with octoctl fsck --repair
// --release-quarantined) decides.
// AllocRecord refuses it.
const KindQuarantined uint16 = 0xffff

// recordHeader is a decoded record header.
type recordHeader struct {
	Kind    uint16
	Gen     uint64
	Extents []Extent
}

func (h recordHeader) inUse() bool { return h.Kind != 0 }

func encodeHeaderWord0(kind uint16, nExt int) uint64 {
	if kind == 0 {
		return 0
	}
	return uint64(kind) | uint64(nExt)<<16 | uint64(recordMagic)<<48
}

// decodeRecordHeader parses the header and extent slots of one record (b
// holds at least the header and extent slots). numBlocks bounds the
// extents.
func decodeRecordHeader(b []byte, extentSlots uint32, numBlocks uint64) (recordHeader, error) {
	var h recordHeader
	need := recordHdrSize + int(extentSlots)*extentEntrySize
	if extentSlots > maxExtentSlots || len(b) < need {
		return h, fmt.Errorf("%w: %d bytes, want %d", ErrRecordCorrupt, len(b), need)
	}
	le := binary.LittleEndian
	w0 := le.Uint64(b)
	h.Gen = le.Uint64(b[8:])
	if w0 == 0 {
		// A free record's extent slots must be zero: Free clears them.
		for i := range int(extentSlots) {
			if le.Uint64(b[recordHdrSize+16*i:]) != 0 || le.Uint64(b[recordHdrSize+16*i+8:]) != 0 {
				return h, fmt.Errorf("%w: free record has a stale extent in slot %d", ErrRecordCorrupt, i)
			}
		}
		return h, nil
	}
	if w0>>48 != recordMagic || (w0>>32)&0xffff != 0 {
		return h, fmt.Errorf("%w: header word %#016x has no record magic", ErrRecordCorrupt, w0)
	}
	kind := uint16(w0)
	n := int(uint16(w0 >> 16))
	if kind == 0 {
		return h, fmt.Errorf("%w: in-use header with kind 0", ErrRecordCorrupt)
	}
	if n > int(extentSlots) {
		return h, fmt.Errorf("%w: %d extents, only %d slots", ErrRecordCorrupt, n, extentSlots)
	}
	h.Kind = kind
	h.Extents = make([]Extent, 0, n)
	for i := range int(extentSlots) {
		e := Extent{Start: le.Uint64(b[recordHdrSize+16*i:]), Count: le.Uint64(b[recordHdrSize+16*i+8:])}
		if i >= n {
			if e != (Extent{}) {
				return h, fmt.Errorf("%w: unused extent slot %d is not zero", ErrRecordCorrupt, i)
			}
			continue
		}
		if e.Count == 0 || e.Start >= numBlocks || e.Count > numBlocks-e.Start {
			return h, fmt.Errorf("%w: extent %d (%v) outside the %d data blocks", ErrRecordCorrupt, i, e, numBlocks)
		}
		h.Extents = append(h.Extents, e)
	}
	return h, nil
}

// Record is a read-only view of one record's header.
type Record struct {
	ID      RecordID `json:"id"`
	Kind    uint16   `json:"kind"`
	Gen     uint64   `json:"gen"`
	Extents []Extent `json:"extents,omitempty"`
	// PayloadOff and PayloadLen locate the caller-owned bytes in the region.
	PayloadOff uint64 `json:"payload_off"`
	PayloadLen uint64 `json:"payload_len"`
}
