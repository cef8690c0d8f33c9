package pmem

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
)

// On-media layout, format version 2. All integers are little-endian.
// Version 2 changed the redo-log slot (range and write entries, CRC-32C);
// nothing deployed holds version 1, which is refused with ErrVersion.
//
//	offset                 size                     what
//	0                      4 KiB                    superblock copy A
//	4 KiB                  4 KiB                    superblock copy B
//	8 KiB                  4 KiB                    roots: 512 words for upper layers
//	12 KiB                 LogSlots*LogSlotSize     redo-log slots
//	RecBitmapOff           ceil(NumRecords/64)*8    record allocation bitmap
//	BlkBitmapOff           ceil(NumBlocks/64)*8     block allocation bitmap
//	RecordOff (4 KiB al.)  NumRecords*RecordSize    fixed-size records
//	DataOff (block al.)    NumBlocks*BlockSize      data blocks
const (
	// FormatVersion is the on-media format this build writes and reads.
	FormatVersion = 2

	superblockSlot = 4096 // each copy has a 4 KiB slot of its own
	superblockSize = 256  // encoded bytes inside the slot
	superblockCRC  = 248  // offset of the CRC-32C over [0, superblockCRC)

	rootsOff = 2 * superblockSlot
	// NumRoots is how many root words the region offers upper layers.
	NumRoots   = 512
	rootsBytes = NumRoots * 8
	logAreaOff = rootsOff + rootsBytes

	// MinRegionSize is the smallest region Format accepts.
	MinRegionSize = 64 << 10

	maxBlockSize    = 1 << 24
	minBlockSize    = 512
	maxRecordSize   = 1 << 16
	minRecordSize   = 64
	maxExtentSlots  = 1024
	minLogSlotSize  = 128
	maxLogSlotSize  = 1 << 20
	maxLogSlots     = 4096
	recordHdrSize   = 16
	extentEntrySize = 16
)

var superblockMagic = [8]byte{'O', 'C', 'T', 'O', 'P', 'M', 'E', 'M'}

// crcTable is CRC-32C (Castagnoli), what ext4 and iSCSI use for metadata.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

// UUID is a 16-byte identifier (region, cluster).
type UUID [16]byte

// IsZero reports whether u is all zeroes ("not set").
func (u UUID) IsZero() bool { return u == UUID{} }

func (u UUID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// MarshalText makes UUIDs print as strings in JSON.
func (u UUID) MarshalText() ([]byte, error) { return []byte(u.String()), nil }

// Geometry is where each area of a region lies. The primary fields
// (sizes and counts) determine the offsets; decode recomputes the offsets
// and rejects a superblock whose stored offsets disagree, which bounds
// every later loop by the region size.
type Geometry struct {
	RegionSize   uint64 `json:"region_size"`
	BlockSize    uint32 `json:"block_size"`
	RecordSize   uint32 `json:"record_size"`
	ExtentSlots  uint32 `json:"extent_slots"`
	LogSlots     uint32 `json:"log_slots"`
	LogSlotSize  uint32 `json:"log_slot_size"`
	NumRecords   uint64 `json:"num_records"`
	NumBlocks    uint64 `json:"num_blocks"`
	RootsOff     uint64 `json:"roots_off"`
	LogOff       uint64 `json:"log_off"`
	RecBitmapOff uint64 `json:"rec_bitmap_off"`
	BlkBitmapOff uint64 `json:"blk_bitmap_off"`
	RecordOff    uint64 `json:"record_off"`
	DataOff      uint64 `json:"data_off"`
}

// PayloadOffset is where a record's caller-owned bytes start.
func (g Geometry) PayloadOffset() uint64 {
	return recordHdrSize + uint64(g.ExtentSlots)*extentEntrySize
}

// PayloadSize is how many caller-owned bytes each record has.
func (g Geometry) PayloadSize() uint64 { return uint64(g.RecordSize) - g.PayloadOffset() }

// LogEntriesPerSlot is how many 8-byte updates one transaction may log.
func (g Geometry) LogEntriesPerSlot() int {
	return int((uint64(g.LogSlotSize) - logHdrSize) / logEntrySize)
}

// LogBytesPerSlot is how many bytes of log entries one transaction may
// use (see Tx.Room).
func (g Geometry) LogBytesPerSlot() int { return int(g.LogSlotSize) - logHdrSize }

// recordsEnd is one past the last record byte.
func (g Geometry) recordsEnd() uint64 { return g.RecordOff + g.NumRecords*uint64(g.RecordSize) }

// dataEnd is one past the last data block byte.
func (g Geometry) dataEnd() uint64 { return g.DataOff + g.NumBlocks*uint64(g.BlockSize) }

func alignUp(v, a uint64) uint64 { return (v + a - 1) &^ (a - 1) }

func bitmapBytes(n uint64) uint64 { return (n + 63) / 64 * 8 }

// layout fills in the offsets of g from its primary fields and checks
// that everything fits; it is used both to format and to validate.
func layout(g Geometry) (Geometry, error) {
	bad := func(format string, args ...any) (Geometry, error) {
		return g, fmt.Errorf("%w: %s", ErrGeometry, fmt.Sprintf(format, args...))
	}
	switch {
	case g.RegionSize < MinRegionSize || g.RegionSize > 1<<56:
		return bad("region size %d outside [%d, 2^56]", g.RegionSize, MinRegionSize)
	case g.BlockSize < minBlockSize || g.BlockSize > maxBlockSize || g.BlockSize&(g.BlockSize-1) != 0:
		return bad("block size %d is not a power of two in [%d, %d]", g.BlockSize, minBlockSize, maxBlockSize)
	case g.RecordSize < minRecordSize || g.RecordSize > maxRecordSize || g.RecordSize%64 != 0:
		return bad("record size %d is not a multiple of 64 in [%d, %d]", g.RecordSize, minRecordSize, maxRecordSize)
	case g.ExtentSlots > maxExtentSlots || recordHdrSize+uint64(g.ExtentSlots)*extentEntrySize > uint64(g.RecordSize):
		return bad("%d extent slots do not fit a %d-byte record", g.ExtentSlots, g.RecordSize)
	case g.LogSlots < 1 || g.LogSlots > maxLogSlots:
		return bad("%d log slots outside [1, %d]", g.LogSlots, maxLogSlots)
	case g.LogSlotSize < minLogSlotSize || g.LogSlotSize > maxLogSlotSize || g.LogSlotSize%64 != 0:
		return bad("log slot size %d is not a multiple of 64 in [%d, %d]", g.LogSlotSize, minLogSlotSize, maxLogSlotSize)
	case g.NumRecords > g.RegionSize/uint64(g.RecordSize):
		return bad("%d records of %d bytes exceed the region", g.NumRecords, g.RecordSize)
	case g.NumBlocks > g.RegionSize/uint64(g.BlockSize):
		return bad("%d blocks of %d bytes exceed the region", g.NumBlocks, g.BlockSize)
	}
	g.RootsOff = rootsOff
	g.LogOff = logAreaOff
	off := g.LogOff + uint64(g.LogSlots)*uint64(g.LogSlotSize)
	g.RecBitmapOff = alignUp(off, 64)
	off = g.RecBitmapOff + bitmapBytes(g.NumRecords)
	g.BlkBitmapOff = alignUp(off, 64)
	off = g.BlkBitmapOff + bitmapBytes(g.NumBlocks)
	g.RecordOff = alignUp(off, 4096)
	g.DataOff = alignUp(g.recordsEnd(), uint64(g.BlockSize))
	if end := g.dataEnd(); end > g.RegionSize {
		return bad("areas end at %d, past the region size %d", end, g.RegionSize)
	}
	return g, nil
}

// Superblock is the region's identity and geometry. Two copies are kept;
// the valid one with the higher Seq wins.
type Superblock struct {
	Version     uint32   `json:"version"`
	Seq         uint64   `json:"seq"`
	RegionUUID  UUID     `json:"region_uuid"`
	ClusterUUID UUID     `json:"cluster_uuid"`
	NodeID      uint64   `json:"node_id"`
	FormatTime  int64    `json:"format_time_unix_nano"`
	Geometry    Geometry `json:"geometry"`
}

// Encode returns the superblock's 256-byte on-media form.
func (s *Superblock) Encode() []byte {
	b := make([]byte, superblockSize)
	le := binary.LittleEndian
	copy(b[0:8], superblockMagic[:])
	le.PutUint32(b[8:], s.Version)
	le.PutUint32(b[12:], superblockSize)
	le.PutUint64(b[16:], s.Seq)
	copy(b[24:40], s.RegionUUID[:])
	copy(b[40:56], s.ClusterUUID[:])
	le.PutUint64(b[56:], s.NodeID)
	g := &s.Geometry
	le.PutUint64(b[64:], g.RegionSize)
	le.PutUint32(b[72:], g.BlockSize)
	le.PutUint32(b[76:], g.RecordSize)
	le.PutUint32(b[80:], g.ExtentSlots)
	le.PutUint32(b[84:], g.LogSlots)
	le.PutUint32(b[88:], g.LogSlotSize)
	// b[92:96] flags, none defined in version 2.
	le.PutUint64(b[96:], g.RootsOff)
	le.PutUint64(b[104:], NumRoots)
	le.PutUint64(b[112:], g.LogOff)
	le.PutUint64(b[120:], g.RecBitmapOff)
	le.PutUint64(b[128:], g.BlkBitmapOff)
	le.PutUint64(b[136:], g.RecordOff)
	le.PutUint64(b[144:], g.NumRecords)
	le.PutUint64(b[152:], g.DataOff)
	le.PutUint64(b[160:], g.NumBlocks)
	le.PutUint64(b[168:], uint64(s.FormatTime))
	le.PutUint32(b[superblockCRC:], crc32.Checksum(b[:superblockCRC], crcTable))
	return b
}

// DecodeSuperblock parses one superblock copy. It checks, in order: that
// the bytes are not blank, the magic, the format version (both at offsets
// fixed for every version), the checksum and the geometry.
func DecodeSuperblock(b []byte) (Superblock, error) {
	var s Superblock
	if len(b) < superblockSize {
		return s, fmt.Errorf("%w: %d bytes, want %d", ErrTornSuperblock, len(b), superblockSize)
	}
	b = b[:superblockSize]
	le := binary.LittleEndian
	if isZero(b) {
		return s, ErrNotFormatted
	}
	if !bytes.Equal(b[0:8], superblockMagic[:]) {
		return s, fmt.Errorf("%w: found %q", ErrBadMagic, b[0:8])
	}
	s.Version = le.Uint32(b[8:])
	if s.Version != FormatVersion {
		return s, fmt.Errorf("%w: the region has format version %d, this octofs reads version %d: run an octofs release that reads version %d (or migrate the region with it)", ErrVersion, s.Version, FormatVersion, s.Version)
	}
	if got, want := crc32.Checksum(b[:superblockCRC], crcTable), le.Uint32(b[superblockCRC:]); got != want {
		return s, fmt.Errorf("%w: crc %08x, stored %08x", ErrTornSuperblock, got, want)
	}
	if n := le.Uint32(b[12:]); n != superblockSize {
		return s, fmt.Errorf("%w: encoded size %d, want %d", ErrGeometry, n, superblockSize)
	}
	if flags := le.Uint32(b[92:]); flags != 0 {
		return s, fmt.Errorf("%w: unknown feature flags %#x: run a newer octofs", ErrVersion, flags)
	}
	if !isZero(b[176:superblockCRC]) || !isZero(b[superblockCRC+4:]) {
		return s, fmt.Errorf("%w: reserved bytes are not zero", ErrGeometry)
	}
	s.Seq = le.Uint64(b[16:])
	copy(s.RegionUUID[:], b[24:40])
	copy(s.ClusterUUID[:], b[40:56])
	s.NodeID = le.Uint64(b[56:])
	s.FormatTime = int64(le.Uint64(b[168:]))
	stored := Geometry{
		RegionSize:   le.Uint64(b[64:]),
		BlockSize:    le.Uint32(b[72:]),
		RecordSize:   le.Uint32(b[76:]),
		ExtentSlots:  le.Uint32(b[80:]),
		LogSlots:     le.Uint32(b[84:]),
		LogSlotSize:  le.Uint32(b[88:]),
		RootsOff:     le.Uint64(b[96:]),
		LogOff:       le.Uint64(b[112:]),
		RecBitmapOff: le.Uint64(b[120:]),
		BlkBitmapOff: le.Uint64(b[128:]),
		RecordOff:    le.Uint64(b[136:]),
		NumRecords:   le.Uint64(b[144:]),
		DataOff:      le.Uint64(b[152:]),
		NumBlocks:    le.Uint64(b[160:]),
	}
	if n := le.Uint64(b[104:]); n != NumRoots {
		return s, fmt.Errorf("%w: %d roots, want %d", ErrGeometry, n, NumRoots)
	}
	g, err := layout(stored)
	if err != nil {
		return s, err
	}
	if g != stored {
		return s, fmt.Errorf("%w: stored area offsets disagree with the geometry", ErrGeometry)
	}
	s.Geometry = g
	return s, nil
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// pickSuperblock chooses between the two decoded copies. It returns the
// winner, which copy it came from (0 = A, 1 = B), and whether the other
// copy needs rewriting; err is set when neither copy is usable.
func pickSuperblock(a, b Superblock, errA, errB error) (sb Superblock, from int, fixOther bool, err error) {
	switch {
	case errA == nil && errB == nil:
		switch {
		case b.Seq > a.Seq:
			return b, 1, true, nil
		case a.Seq > b.Seq:
			return a, 0, true, nil
		case a != b:
			// Both valid, same sequence number, different content: no
			// crash leaves that (SetIdentity bumps the sequence number),
			// and nothing tells which copy is right.
			return sb, 0, false, fmt.Errorf("%w: copies A and B both pass their checksums with sequence number %d but disagree (A: cluster %s node %#x, B: cluster %s node %#x), and nothing tells which is right: restore this node from a replica or reformat it", ErrTornSuperblock, a.Seq, a.ClusterUUID, a.NodeID, b.ClusterUUID, b.NodeID)
		}
		return a, 0, false, nil
	case errA == nil:
		return a, 0, true, nil
	case errB == nil:
		return b, 1, true, nil
	}
	// Neither copy is usable: report the most specific reason.
	for _, e := range []error{ErrVersion, ErrBadMagic, ErrGeometry, ErrTornSuperblock} {
		if errors.Is(errA, e) {
			return sb, 0, false, superblockAdvice(errA)
		}
		if errors.Is(errB, e) {
			return sb, 0, false, superblockAdvice(errB)
		}
	}
	return sb, 0, false, superblockAdvice(errA)
}

// superblockAdvice adds what an operator should do to a superblock error.
func superblockAdvice(err error) error {
	switch {
	case errors.Is(err, ErrNotFormatted):
		return fmt.Errorf("%w: both superblock copies are blank: format the region first (octofs format), or check that the path is the right device", err)
	case errors.Is(err, ErrBadMagic):
		return fmt.Errorf("%w: this device or file holds something else; check the path, or format it (destroys its content)", err)
	case errors.Is(err, ErrTornSuperblock), errors.Is(err, ErrGeometry):
		return fmt.Errorf("superblock copies A and B are both unusable (%w): the region cannot be opened safely; restore this node from a replica or reformat it", err)
	}
	return err
}
