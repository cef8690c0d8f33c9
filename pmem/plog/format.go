package plog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/octofs/octofs/pmem"
)

// On-media format, version 1. All integers are little-endian. plog keeps
// three kinds of pmem records; their payloads start with the same word:
//
//	word 0: "PLOG" magic (bits 0-31) | format version (32-47) | type (48-63)
//
// Log head (KindHead, type 1), one per log, owns no extent:
//
//	 8 log id        service (bits 32-47) | partition (bits 0-31)
//	16 epoch         1 at creation, +1 at every Rewrite
//	24 first         record id of the first segment, 0 for an empty log
//	32 last          record id of the last segment (0 iff first is 0)
//	40 rewrite bytes the log's size right after the last Rewrite
//	48 state         0 live, 1 being deleted
//
// Segment (KindSegment, type 2), owns exactly one extent holding records:
//
//	 8 log id        as in the head
//	16 owner         record id of the log's head
//	24 epoch         the head's epoch when the segment was made
//	32 seq           position in the chain, 0 for the first segment
//	40 next          record id of the next segment, 0 for the last
//	48 end           bytes of records in the extent: the published tail
//
// Pool (KindPool, type 3), owns exactly one extent of data blocks the
// log's user sub-allocates:
//
//	8 log id, 16 owner (as in a segment)
//
// Records inside a segment's extent, back to back from its first byte:
//
//	0 length  uint32, bytes of the record
//	4 crc     CRC-32C seeded with the segment's salt, over length and record
//	8 record  then zero padding to a multiple of 8
//
// The salt is the CRC-32C of the segment's (log id, owner, epoch, seq), so
// a record copied to another place, or left from an earlier use of the
// blocks, does not verify.
const (
	// FormatVersion is the plog on-media format this build writes and reads.
	FormatVersion = 1

	// KindHead, KindSegment and KindPool are plog's pmem record kinds;
	// no other package may allocate records of these kinds.
	KindHead    uint16 = 0x6c01
	KindSegment uint16 = 0x6c02
	KindPool    uint16 = 0x6c03

	plogMagic = 0x474f4c50 // "PLOG"

	typeHead    = 1
	typeSegment = 2
	typePool    = 3

	// Payload word offsets.
	offID     = 8
	offOwner  = 16 // segment, pool
	offEpoch  = 16 // head
	offFirst  = 24 // head
	offLast   = 32 // head
	offRewrBy = 40 // head
	offState  = 48 // head
	offSegEp  = 24 // segment
	offSegSeq = 32 // segment
	offNext   = 40 // segment
	offEnd    = 48 // segment

	headSize = 56
	segSize  = 56
	poolSize = 24

	// minPayload is the smallest record payload plog can use.
	minPayload = 64

	stateLive     = 0
	stateDeleting = 1

	frameHdr = 8

	// MaxGroupSize bounds the framed size of one Append's records (8
	// bytes of framing per record plus padding to 8 bytes).
	MaxGroupSize = 16 << 20
	// MaxRecordSize is the largest single record.
	MaxRecordSize = MaxGroupSize - frameHdr
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// LogID names a log: the service that owns it and a partition number.
// Service 0 is reserved.
type LogID struct {
	Service   uint16 `json:"service"`
	Partition uint32 `json:"partition"`
}

func (id LogID) String() string { return fmt.Sprintf("log %d/%d", id.Service, id.Partition) }

func (id LogID) word() uint64 { return uint64(id.Service)<<32 | uint64(id.Partition) }

func (id LogID) valid() error {
	if id.Service == 0 {
		return fmt.Errorf("%w: %v: service 0 is reserved", ErrBadID, id)
	}
	return nil
}

func decodeLogID(w uint64) (LogID, error) {
	id := LogID{Service: uint16(w >> 32), Partition: uint32(w)}
	if w>>48 != 0 || id.Service == 0 {
		return id, fmt.Errorf("%w: log id word %#x", ErrCorrupt, w)
	}
	return id, nil
}

func word0(typ uint16) uint64 { return plogMagic | FormatVersion<<32 | uint64(typ)<<48 }

func checkWord0(b []byte, typ uint16, size int) error {
	if len(b) < size {
		return fmt.Errorf("%w: payload of %d bytes, want %d", ErrCorrupt, len(b), size)
	}
	w := binary.LittleEndian.Uint64(b)
	switch {
	case uint32(w) != plogMagic:
		return fmt.Errorf("%w: no plog magic in %#016x", ErrCorrupt, w)
	case uint16(w>>32) != FormatVersion:
		return fmt.Errorf("%w: plog format version %d, this build reads %d: run an octofs release that reads it", ErrCorrupt, uint16(w>>32), FormatVersion)
	case uint16(w>>48) != typ:
		return fmt.Errorf("%w: payload type %d, want %d", ErrCorrupt, uint16(w>>48), typ)
	}
	return nil
}

func checkRecordID(name string, id, numRecords uint64) error {
	if id > numRecords {
		return fmt.Errorf("%w: %s record %d outside [1, %d]", ErrCorrupt, name, id, numRecords)
	}
	return nil
}

// head is a decoded log head.
type head struct {
	ID           LogID
	Epoch        uint64
	First, Last  pmem.RecordID
	RewriteBytes uint64
	State        uint64
}

func encodeHead(h head) []byte {
	b := make([]byte, headSize)
	le := binary.LittleEndian
	le.PutUint64(b, word0(typeHead))
	le.PutUint64(b[offID:], h.ID.word())
	le.PutUint64(b[offEpoch:], h.Epoch)
	le.PutUint64(b[offFirst:], uint64(h.First))
	le.PutUint64(b[offLast:], uint64(h.Last))
	le.PutUint64(b[offRewrBy:], h.RewriteBytes)
	le.PutUint64(b[offState:], h.State)
	return b
}

// decodeHead parses a head payload; numRecords bounds record ids.
func decodeHead(b []byte, numRecords uint64) (head, error) {
	var h head
	if err := checkWord0(b, typeHead, headSize); err != nil {
		return h, err
	}
	le := binary.LittleEndian
	id, err := decodeLogID(le.Uint64(b[offID:]))
	if err != nil {
		return h, err
	}
	h = head{
		ID:           id,
		Epoch:        le.Uint64(b[offEpoch:]),
		First:        pmem.RecordID(le.Uint64(b[offFirst:])),
		Last:         pmem.RecordID(le.Uint64(b[offLast:])),
		RewriteBytes: le.Uint64(b[offRewrBy:]),
		State:        le.Uint64(b[offState:]),
	}
	switch {
	case h.Epoch == 0:
		return h, fmt.Errorf("%w: head epoch 0", ErrCorrupt)
	case (h.First == 0) != (h.Last == 0):
		return h, fmt.Errorf("%w: head names first segment %d and last %d", ErrCorrupt, h.First, h.Last)
	case h.State != stateLive && h.State != stateDeleting:
		return h, fmt.Errorf("%w: head state %d", ErrCorrupt, h.State)
	}
	if err := checkRecordID("first segment", uint64(h.First), numRecords); err != nil {
		return h, err
	}
	return h, checkRecordID("last segment", uint64(h.Last), numRecords)
}

// segment is a decoded segment header.
type segment struct {
	ID    LogID
	Owner pmem.RecordID
	Epoch uint64
	Seq   uint64
	Next  pmem.RecordID
	End   uint64
}

func encodeSegment(s segment) []byte {
	b := make([]byte, segSize)
	le := binary.LittleEndian
	le.PutUint64(b, word0(typeSegment))
	le.PutUint64(b[offID:], s.ID.word())
	le.PutUint64(b[offOwner:], uint64(s.Owner))
	le.PutUint64(b[offSegEp:], s.Epoch)
	le.PutUint64(b[offSegSeq:], s.Seq)
	le.PutUint64(b[offNext:], uint64(s.Next))
	le.PutUint64(b[offEnd:], s.End)
	return b
}

// decodeSegment parses a segment payload; numRecords bounds record ids.
// Whether End fits the segment's extent is checked against the extent.
func decodeSegment(b []byte, numRecords uint64) (segment, error) {
	var s segment
	if err := checkWord0(b, typeSegment, segSize); err != nil {
		return s, err
	}
	le := binary.LittleEndian
	id, err := decodeLogID(le.Uint64(b[offID:]))
	if err != nil {
		return s, err
	}
	s = segment{
		ID:    id,
		Owner: pmem.RecordID(le.Uint64(b[offOwner:])),
		Epoch: le.Uint64(b[offSegEp:]),
		Seq:   le.Uint64(b[offSegSeq:]),
		Next:  pmem.RecordID(le.Uint64(b[offNext:])),
		End:   le.Uint64(b[offEnd:]),
	}
	switch {
	case s.Owner == 0:
		return s, fmt.Errorf("%w: segment has no owner", ErrCorrupt)
	case s.Epoch == 0:
		return s, fmt.Errorf("%w: segment epoch 0", ErrCorrupt)
	case s.End%8 != 0:
		return s, fmt.Errorf("%w: segment end %d is not a multiple of 8", ErrCorrupt, s.End)
	}
	if err := checkRecordID("owner", uint64(s.Owner), numRecords); err != nil {
		return s, err
	}
	return s, checkRecordID("next segment", uint64(s.Next), numRecords)
}

// pool is a decoded pool header.
type pool struct {
	ID    LogID
	Owner pmem.RecordID
}

func encodePool(p pool) []byte {
	b := make([]byte, poolSize)
	le := binary.LittleEndian
	le.PutUint64(b, word0(typePool))
	le.PutUint64(b[offID:], p.ID.word())
	le.PutUint64(b[offOwner:], uint64(p.Owner))
	return b
}

// decodePool parses a pool payload; numRecords bounds record ids.
func decodePool(b []byte, numRecords uint64) (pool, error) {
	var p pool
	if err := checkWord0(b, typePool, poolSize); err != nil {
		return p, err
	}
	le := binary.LittleEndian
	id, err := decodeLogID(le.Uint64(b[offID:]))
	if err != nil {
		return p, err
	}
	p = pool{ID: id, Owner: pmem.RecordID(le.Uint64(b[offOwner:]))}
	if p.Owner == 0 {
		return p, fmt.Errorf("%w: pool has no owner", ErrCorrupt)
	}
	return p, checkRecordID("owner", uint64(p.Owner), numRecords)
}

// segmentSalt seeds the checksums of the records in one segment.
func segmentSalt(id LogID, owner pmem.RecordID, epoch, seq uint64) uint32 {
	var b [32]byte
	le := binary.LittleEndian
	le.PutUint64(b[0:], id.word())
	le.PutUint64(b[8:], uint64(owner))
	le.PutUint64(b[16:], epoch)
	le.PutUint64(b[24:], seq)
	return crc32.Checksum(b[:], castagnoli)
}

func (s segment) salt() uint32 { return segmentSalt(s.ID, s.Owner, s.Epoch, s.Seq) }

// frameSize is the framed size of a record of n bytes.
func frameSize(n int) int { return frameHdr + (n+7)&^7 }

// putFrame frames rec into dst (at least frameSize(len(rec)) bytes) and
// returns the bytes used.
func putFrame(dst []byte, salt uint32, rec []byte) int {
	n := frameSize(len(rec))
	binary.LittleEndian.PutUint32(dst, uint32(len(rec)))
	copy(dst[frameHdr:], rec)
	clear(dst[frameHdr+len(rec) : n])
	c := crc32.Update(salt, castagnoli, dst[0:4])
	c = crc32.Update(c, castagnoli, rec)
	binary.LittleEndian.PutUint32(dst[4:], c)
	return n
}

// decodeFrame parses the record at the start of b, which holds the rest
// of the published bytes of its segment. It returns the record (a window
// of b) and the framed size.
func decodeFrame(b []byte, salt uint32) ([]byte, int, error) {
	if len(b) < frameHdr {
		return nil, 0, fmt.Errorf("%w: %d bytes left, too few for a record header", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	n := int(le.Uint32(b))
	if n > MaxRecordSize || frameSize(n) > len(b) {
		return nil, 0, fmt.Errorf("%w: record length %d overruns the %d published bytes left", ErrCorrupt, n, len(b))
	}
	rec := b[frameHdr : frameHdr+n : frameHdr+n]
	c := crc32.Update(salt, castagnoli, b[0:4])
	c = crc32.Update(c, castagnoli, rec)
	if stored := le.Uint32(b[4:]); c != stored {
		return nil, 0, fmt.Errorf("%w: record checksum %08x, stored %08x", ErrCorrupt, c, stored)
	}
	for _, p := range b[frameHdr+n : frameSize(n)] {
		if p != 0 {
			return nil, 0, fmt.Errorf("%w: non-zero padding after a %d-byte record", ErrCorrupt, n)
		}
	}
	return rec, frameSize(n), nil
}
