package wire

import (
	"fmt"

	"github.com/octofs/octofs/internal/codec"
)

// Records of a chunk partition's log (plog service ServiceChunks). The
// partition's state is the extent maps of its chunks; replaying the
// records in order from the log's start rebuilds it, and a checkpoint
// (plog Rewrite) emits one RecordMap per chunk.

// ServiceChunks is the chunk service's plog service number (the namespace
// is 1).
const ServiceChunks = 2

// RecordVersion is the version byte of every log record. New record kinds
// keep it: a node that meets a kind it does not know refuses the log.
const RecordVersion = 1

// RecordKind says what a record does.
type RecordKind uint8

// Record kinds.
const (
	// RecordMap maps runs of a chunk's blocks to region blocks. The
	// blocks' bytes were written (zeroed, or the checkpointed content)
	// and persisted before the record was appended.
	RecordMap RecordKind = 1
	// RecordUnmap makes [First, First+Count) of a chunk's blocks holes;
	// the region blocks behind them are free from then on (quarantined in
	// DRAM until no lease can name them).
	RecordUnmap RecordKind = 2
	// RecordMapUnwritten maps runs of a chunk's blocks to region blocks
	// as unwritten: the blocks read as zeros whatever they hold, so
	// nothing was written to them before the record.
	RecordMapUnwritten RecordKind = 3
	// RecordConvert makes the unwritten blocks among [First,
	// First+Count) of a chunk written: their bytes were persisted before
	// the record was appended. Every block of the range is mapped.
	RecordConvert RecordKind = 4
	// RecordDefer, in the node log (partition NodeLog), says that node
	// Node must trim inode Ino to Size before it serves the inode's
	// chunks again: the trim was decided while Node was down.
	RecordDefer RecordKind = 5
	// RecordDeferDone, in the node log, says that node Node applied the
	// deferred trim of inode Ino to Size.
	RecordDeferDone RecordKind = 6
)

// NodeLog is the partition number of the chunk service's node log, which
// holds the trims deferred for nodes that were down (RecordDefer,
// RecordDeferDone). Partitions are below 65,536.
const NodeLog = 1<<32 - 1

// Run maps Count blocks of a chunk, from block index First (in block-size
// units from the chunk's start), to region data blocks [Block,
// Block+Count).
type Run struct {
	First, Count uint32
	Block        uint64
}

// Record is one log record.
type Record struct {
	Kind  RecordKind
	Ino   uint64
	Chunk uint64
	// Runs are RecordMap's and RecordMapUnwritten's runs, ordered and
	// disjoint.
	Runs []Run
	// First and Count are RecordUnmap's and RecordConvert's block range.
	First, Count uint32
	// Node and Size are RecordDefer's and RecordDeferDone's (with Ino).
	Node string
	Size uint64
}

// MaxRuns bounds a record's runs (a chunk of 512-byte blocks).
const MaxRuns = ChunkSize / 512

// Encode returns the record's bytes.
func (r *Record) Encode() []byte {
	e := codec.NewEncoder(make([]byte, 0, 40+16*len(r.Runs)))
	e.U8(RecordVersion)
	e.U8(uint8(r.Kind))
	e.U64(r.Ino)
	e.U64(r.Chunk)
	switch r.Kind {
	case RecordMap, RecordMapUnwritten:
		e.U32(uint32(len(r.Runs)))
		for _, x := range r.Runs {
			e.U32(x.First)
			e.U32(x.Count)
			e.U64(x.Block)
		}
	case RecordUnmap, RecordConvert:
		e.U32(r.First)
		e.U32(r.Count)
	case RecordDefer, RecordDeferDone:
		e.String16(r.Node)
		e.U64(r.Size)
	}
	return e.Bytes()
}

// DecodeRecord parses a log record. blocksPerChunk bounds the block
// indexes (ChunkSize / the region's block size).
func DecodeRecord(b []byte, blocksPerChunk uint32) (Record, error) {
	d := codec.NewDecoder(b)
	var r Record
	if v := d.U8(); d.Err() == nil && v != RecordVersion {
		return r, fmt.Errorf("%w: record version %d, this node reads %d (run the newer octofs)", ErrMalformed, v, RecordVersion)
	}
	r.Kind = RecordKind(d.U8())
	r.Ino = d.U64()
	r.Chunk = d.U64()
	switch r.Kind {
	case RecordMap, RecordMapUnwritten:
		n := d.U32()
		if d.Err() == nil && (n > MaxRuns || uint64(n)*16 > uint64(d.Remaining())) {
			d.Fail("%d runs (at most %d, %d bytes left)", n, MaxRuns, d.Remaining())
		}
		if d.Err() == nil && n > 0 {
			r.Runs = make([]Run, n)
			for i := range r.Runs {
				r.Runs[i] = Run{First: d.U32(), Count: d.U32(), Block: d.U64()}
			}
		}
	case RecordUnmap, RecordConvert:
		r.First = d.U32()
		r.Count = d.U32()
	case RecordDefer, RecordDeferDone:
		r.Node = d.String16(maxNode)
		r.Size = d.U64()
		if d.Err() == nil && r.Node == "" {
			d.Fail("deferred trim for no node")
		}
	default:
		if d.Err() == nil {
			d.Fail("record kind %d", r.Kind)
		}
	}
	if err := d.Finish(); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch r.Kind {
	case RecordMap, RecordMapUnwritten:
		var end uint64
		for i, x := range r.Runs {
			if x.Count == 0 || uint64(x.First)+uint64(x.Count) > uint64(blocksPerChunk) || (i > 0 && uint64(x.First) < end) ||
				x.Block+uint64(x.Count) < x.Block {
				return Record{}, fmt.Errorf("%w: run %d (%d+%d -> block %d) empty, outside the chunk or out of order", ErrMalformed, i, x.First, x.Count, x.Block)
			}
			end = uint64(x.First) + uint64(x.Count)
		}
	case RecordUnmap, RecordConvert:
		if uint64(r.First)+uint64(r.Count) > uint64(blocksPerChunk) {
			return Record{}, fmt.Errorf("%w: block range %d+%d outside a chunk of %d blocks", ErrMalformed, r.First, r.Count, blocksPerChunk)
		}
	}
	return r, nil
}
