package wire

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/octofs/octofs/internal/codec"
)

// ChunkSize is the size of a file's chunks: chunk i of inode n covers bytes
// [i*ChunkSize, (i+1)*ChunkSize) and lives on partition
// cluster.ChunkPartition(n, i). 4 MiB: large enough that a 1 MiB sequential
// stream asks each owner for extents once per 4 MiB and that a chunk's map
// is one small reply (at most 1024 extents of 4 KiB blocks), small enough
// that a 64 MiB file spreads over 16 partitions and so over every node of
// a small cluster.
const ChunkSize = 4 << 20

// Version is the version byte of every message of this package. Version
// 2 added unwritten extents (Extent.Stamp, Range.Stamp) and allocation
// ahead (Request.Ahead); version 3 Reply.Next (next-data). Log records
// carry RecordVersion.
const Version = 3

// ErrMalformed is returned for a message or record that does not decode.
var ErrMalformed = errors.New("dataplane/wire: malformed message")

// Op numbers the chunk service's RPCs. The chunk service owns 0x0200-0x02ff
// of the node's RPC op space (the namespace service another range).
type Op uint16

// Ops.
const (
	// OpMap returns a chunk's extents under a lease.
	OpMap Op = 0x0201
	// OpAllocate maps blocks where a write range (and the Ahead bytes
	// after it) has none, as unwritten extents, and returns the chunk's
	// extents. Blocks the write covers only in part are made written
	// with zeros first (fresh ones, and unwritten ones).
	OpAllocate Op = 0x0202
	// OpPersist makes written ranges durable in the owner's persistence
	// domain.
	OpPersist Op = 0x0203
	// OpTrim frees a file's data beyond a size on every chunk the node
	// holds, and zeroes the tail of the block holding the size.
	OpTrim Op = 0x0204
	// OpFree frees all of a file's chunks the node holds.
	OpFree Op = 0x0205
	// OpFallocate applies a fallocate mode to a range of one chunk.
	OpFallocate Op = 0x0206
	// OpStatfs reports the node's data capacity.
	OpStatfs Op = 0x0207
	// OpTrimCollect is node to node: the caller (Request.Node) asks for
	// the trims the callee deferred for it while it was down (at most
	// MaxTrims; Reply.More says there are more).
	OpTrimCollect Op = 0x0208
	// OpTrimDone is node to node: the caller applied Request.Trims, which
	// the callee had deferred for it; the callee forgets them.
	OpTrimDone Op = 0x0209
	// OpUsage reports, in Reply.Capacity.Used, the bytes of the blocks
	// that file Ino holds on the node (every chunk, written or not): the
	// inode's owner sums them for st_blocks.
	OpUsage Op = 0x020a
	// OpNextData reports, in Reply.Next, the lowest chunk at or after
	// Chunk of file Ino that holds blocks in a partition of the node
	// (NoChunk if none): lseek's SEEK_DATA asks every node and skips the
	// chunks between, instead of one map per chunk of a sparse file.
	OpNextData Op = 0x020b
)

// NoChunk is OpNextData's answer when the node holds no later chunk.
const NoChunk = ^uint64(0)

// Ops lists every op, for handler registration and tests.
var Ops = []Op{OpMap, OpAllocate, OpPersist, OpTrim, OpFree, OpFallocate, OpStatfs, OpTrimCollect, OpTrimDone, OpUsage, OpNextData}

func (o Op) String() string {
	switch o {
	case OpMap:
		return "map"
	case OpAllocate:
		return "allocate"
	case OpPersist:
		return "persist"
	case OpTrim:
		return "trim"
	case OpFree:
		return "free"
	case OpFallocate:
		return "fallocate"
	case OpStatfs:
		return "statfs"
	case OpTrimCollect:
		return "trim-collect"
	case OpTrimDone:
		return "trim-done"
	case OpUsage:
		return "usage"
	case OpNextData:
		return "next-data"
	}
	return fmt.Sprintf("Op(%#x)", uint16(o))
}

// Status is a reply's outcome: 0, a Linux errno, or an octofs status
// above every errno. The values are those of metadata/wire (StatusOK,
// StatusWrongOwner, StatusNotReady, ...), so that a client handles both
// services' replies alike; the chunk service's own statuses sit at
// 0x10100 and above.
type Status uint32

// Statuses.
const (
	StatusOK Status = 0
	// StatusNoSpace: no blocks left (ENOSPC); nothing changed.
	StatusNoSpace Status = Status(syscall.ENOSPC)
	// StatusIO: the node failed to do it (EIO); Message says why.
	StatusIO Status = Status(syscall.EIO)
	// StatusWrongOwner: the node does not own the request's partition;
	// Reply.Epoch is its map epoch. Refresh the map to at least that
	// epoch and retry at the owner.
	StatusWrongOwner Status = 0x10001
	// StatusNotReady: the node is still recovering the partition; retry.
	StatusNotReady Status = 0x10003
	// StatusBadRequest: the request does not decode or names nothing
	// sensible (a protocol error).
	StatusBadRequest Status = 0x10006
	// StatusNoSession: the request named a data session the node does
	// not have; reconnect the data connection and retry.
	StatusNoSession Status = 0x10101
	// StatusDataLost: a persist named an earlier incarnation of the
	// node: what was written then and not yet persisted may be lost
	// (EIO for the fsync).
	StatusDataLost Status = 0x10102
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusWrongOwner:
		return "wrong owner"
	case StatusNotReady:
		return "not ready"
	case StatusBadRequest:
		return "bad request"
	case StatusNoSession:
		return "no session"
	case StatusDataLost:
		return "data lost"
	}
	if s > 0 && s < 4096 {
		return syscall.Errno(s).Error()
	}
	return fmt.Sprintf("Status(%#x)", uint32(s))
}

// known reports whether s is a status this package defines or an errno.
func (s Status) known() bool {
	switch s {
	case StatusOK, StatusWrongOwner, StatusNotReady, StatusBadRequest, StatusNoSession, StatusDataLost:
		return true
	}
	return s > 0 && s < 4096
}

// Fallocate modes (the Linux FALLOC_FL_* bits this service implements).
const (
	FallocKeepSize  uint32 = 0x01
	FallocPunchHole uint32 = 0x02
	FallocZeroRange uint32 = 0x10
)

// Header starts every request.
type Header struct {
	// Epoch is the map epoch the sender routed the request by.
	Epoch uint64
	// ClientID and Incarnation identify the sending process.
	ClientID    uint64
	Incarnation uint64
}

func (h *Header) encode(e *codec.Encoder) {
	e.U64(h.Epoch)
	e.U64(h.ClientID)
	e.U64(h.Incarnation)
}

func (h *Header) decode(d *codec.Decoder) {
	h.Epoch = d.U64()
	h.ClientID = d.U64()
	h.Incarnation = d.U64()
}

// Request is every chunk-service request; which fields matter depends on
// Op (see each op's constructor below). One shape for all keeps one
// decoder and one fuzz target.
type Request struct {
	Op Op
	Header
	// Session is the caller's data session at this node (map, allocate,
	// fallocate): the reply's rkeys are for it.
	Session uint64
	Ino     uint64
	Chunk   uint64
	// Off and Len are a byte range inside the chunk (allocate,
	// fallocate).
	Off, Len uint32
	// Ahead is, for allocate, how many bytes after Off+Len to map as
	// well (unwritten), for a sequential writer's next writes; the owner
	// stops at the chunk's end.
	Ahead uint32
	// MineHead and MineTail are, for allocate, the stamps of unwritten
	// blocks that the caller has written whole itself, if the write
	// covers the block holding its first (last) byte only in part: the
	// owner leaves such a block as it is instead of zeroing it (0: none).
	MineHead, MineTail uint64
	// Mode is the fallocate mode.
	Mode uint32
	// Size is the trim size in bytes.
	Size uint64
	// Owner is, for persist, the node incarnation the written ranges were
	// written under.
	Owner uint64
	// Ranges are persist's ranges.
	Ranges []Range
	// Node is, for trim-collect and trim-done, the calling node's id.
	Node string
	// Trims are trim-done's trims.
	Trims []Trim
}

// Trim is a trim one node deferred for another: free the inode's data at
// and beyond Size.
type Trim struct {
	Ino, Size uint64
}

// MaxTrims bounds the trims of one message.
const MaxTrims = 4096

// maxNode bounds a node id in a message or record.
const maxNode = 128

// Range is a byte range inside one chunk that the caller wrote through
// extents of one stamp (0: written extents).
type Range struct {
	Chunk    uint64
	Off, Len uint32
	// Stamp is the Extent.Stamp of the extents the bytes were written
	// through: persist converts unwritten blocks of that stamp that the
	// ranges of the request cover whole.
	Stamp uint64
}

// MaxRanges bounds a persist request's ranges.
const MaxRanges = 4096

// Encode returns the request's bytes.
func (r *Request) Encode() []byte {
	e := codec.NewEncoder(make([]byte, 0, 120+24*len(r.Ranges)))
	e.U8(Version)
	e.U16(uint16(r.Op))
	r.Header.encode(e)
	e.U64(r.Session)
	e.U64(r.Ino)
	e.U64(r.Chunk)
	e.U32(r.Off)
	e.U32(r.Len)
	e.U32(r.Ahead)
	e.U64(r.MineHead)
	e.U64(r.MineTail)
	e.U32(r.Mode)
	e.U64(r.Size)
	e.U64(r.Owner)
	e.U32(uint32(len(r.Ranges)))
	for _, g := range r.Ranges {
		e.U64(g.Chunk)
		e.U32(g.Off)
		e.U32(g.Len)
		e.U64(g.Stamp)
	}
	e.String16(r.Node)
	encodeTrims(e, r.Trims)
	return e.Bytes()
}

func encodeTrims(e *codec.Encoder, ts []Trim) {
	e.U32(uint32(len(ts)))
	for _, t := range ts {
		e.U64(t.Ino)
		e.U64(t.Size)
	}
}

func decodeTrims(d *codec.Decoder) []Trim {
	n := d.U32()
	if d.Err() == nil && (n > MaxTrims || uint64(n)*16 > uint64(d.Remaining())) {
		d.Fail("%d trims (at most %d, %d bytes left)", n, MaxTrims, d.Remaining())
	}
	if d.Err() != nil || n == 0 {
		return nil
	}
	ts := make([]Trim, n)
	for i := range ts {
		ts[i] = Trim{Ino: d.U64(), Size: d.U64()}
	}
	return ts
}

// DecodeRequest parses a request and checks its ranges.
func DecodeRequest(b []byte) (Request, error) {
	d := codec.NewDecoder(b)
	var r Request
	if v := d.U8(); d.Err() == nil && v != Version {
		return r, fmt.Errorf("%w: request version %d, this node speaks %d (run the same octofs version on both sides)", ErrMalformed, v, Version)
	}
	r.Op = Op(d.U16())
	r.Header.decode(d)
	r.Session = d.U64()
	r.Ino = d.U64()
	r.Chunk = d.U64()
	r.Off = d.U32()
	r.Len = d.U32()
	r.Ahead = d.U32()
	r.MineHead = d.U64()
	r.MineTail = d.U64()
	r.Mode = d.U32()
	r.Size = d.U64()
	r.Owner = d.U64()
	n := d.U32()
	if d.Err() == nil && (n > MaxRanges || uint64(n)*24 > uint64(d.Remaining())) {
		d.Fail("%d ranges (at most %d, %d bytes left)", n, MaxRanges, d.Remaining())
	}
	if d.Err() == nil && n > 0 {
		r.Ranges = make([]Range, n)
		for i := range r.Ranges {
			r.Ranges[i] = Range{Chunk: d.U64(), Off: d.U32(), Len: d.U32(), Stamp: d.U64()}
		}
	}
	r.Node = d.String16(maxNode)
	r.Trims = decodeTrims(d)
	if err := d.Finish(); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := r.check(); err != nil {
		return Request{}, err
	}
	return r, nil
}

func inChunk(off, n uint32) bool { return uint64(off)+uint64(n) <= ChunkSize }

func (r *Request) check() error {
	if !inChunk(r.Off, r.Len) {
		return fmt.Errorf("%w: range [%d,+%d) outside a %d-byte chunk", ErrMalformed, r.Off, r.Len, ChunkSize)
	}
	if r.Ahead > ChunkSize {
		return fmt.Errorf("%w: %d bytes ahead, more than a chunk", ErrMalformed, r.Ahead)
	}
	for _, g := range r.Ranges {
		if !inChunk(g.Off, g.Len) {
			return fmt.Errorf("%w: range [%d,+%d) of chunk %d outside a %d-byte chunk", ErrMalformed, g.Off, g.Len, g.Chunk, ChunkSize)
		}
	}
	return nil
}

// Extent is a run of a chunk's bytes that has blocks: chunk bytes
// [Off, Off+Len) are at remote address Addr of the caller's data session,
// through RKey. Off and Len are whole blocks.
//
// A non-zero Stamp marks an unwritten extent: its blocks are allocated but
// hold nothing of the file yet (their bytes are whatever the blocks held
// before, never to be shown), so they read as zeros. A client may write
// whole blocks of it (a write that covers a block only in part asks the
// owner with allocate first, which makes that block written); a persist
// naming the stamp converts the blocks it covers whole. The stamp tells
// one allocation from another, so a persist never converts blocks that
// were freed and allocated again since the client wrote.
type Extent struct {
	Off, Len uint32
	Addr     uint64
	RKey     uint32
	Stamp    uint64
}

// Unwritten reports whether the extent reads as zeros.
func (x Extent) Unwritten() bool { return x.Stamp != 0 }

// End is one past the extent's last chunk byte.
func (x Extent) End() uint32 { return x.Off + x.Len }

// MaxExtents bounds a reply's extents: a chunk of 512-byte blocks, none
// adjacent to the next.
const MaxExtents = ChunkSize / 512

// maxMessage bounds a reply's message.
const maxMessage = 512

// Capacity is a node's data capacity.
type Capacity struct {
	// Total is the region's data area in bytes; Free what data may still
	// take (free pool blocks plus free region blocks beyond the logs'
	// reserve).
	Total, Free uint64
	// Used is bytes in file blocks; Quarantined bytes freed but not yet
	// reusable.
	Used, Quarantined uint64
}

// Reply is every chunk-service reply.
type Reply struct {
	Status Status
	// Epoch is the node's map epoch (meaningful with StatusWrongOwner).
	Epoch uint64
	// Incarnation is the node process's incarnation.
	Incarnation uint64
	// Message explains an error status.
	Message string
	// Lease is how long, from the moment the caller sent the request, the
	// extents may be used (map, allocate, fallocate).
	Lease time.Duration
	// Extents are the chunk's extents in order (map, allocate,
	// fallocate).
	Extents  []Extent
	Capacity Capacity
	// Trims are trim-collect's trims; More says the callee has more.
	Trims []Trim
	More  bool
	// Next is next-data's chunk.
	Next uint64
}

// Encode returns the reply's bytes.
func (r *Reply) Encode() []byte {
	e := codec.NewEncoder(make([]byte, 0, 80+len(r.Message)+28*len(r.Extents)))
	e.U8(Version)
	e.U32(uint32(r.Status))
	e.U64(r.Epoch)
	e.U64(r.Incarnation)
	msg := r.Message
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
	}
	e.String16(msg)
	e.I64(int64(r.Lease))
	e.U32(uint32(len(r.Extents)))
	for _, x := range r.Extents {
		e.U32(x.Off)
		e.U32(x.Len)
		e.U64(x.Addr)
		e.U32(x.RKey)
		e.U64(x.Stamp)
	}
	e.U64(r.Capacity.Total)
	e.U64(r.Capacity.Free)
	e.U64(r.Capacity.Used)
	e.U64(r.Capacity.Quarantined)
	encodeTrims(e, r.Trims)
	e.Bool(r.More)
	e.U64(r.Next)
	return e.Bytes()
}

// DecodeReply parses a reply and checks that its extents are ordered,
// disjoint and inside the chunk.
func DecodeReply(b []byte) (Reply, error) {
	d := codec.NewDecoder(b)
	var r Reply
	if v := d.U8(); d.Err() == nil && v != Version {
		return r, fmt.Errorf("%w: reply version %d, this client speaks %d (run the same octofs version on both sides)", ErrMalformed, v, Version)
	}
	r.Status = Status(d.U32())
	r.Epoch = d.U64()
	r.Incarnation = d.U64()
	r.Message = d.String16(maxMessage)
	r.Lease = time.Duration(d.I64())
	n := d.U32()
	if d.Err() == nil && (n > MaxExtents || uint64(n)*28 > uint64(d.Remaining())) {
		d.Fail("%d extents (at most %d, %d bytes left)", n, MaxExtents, d.Remaining())
	}
	if d.Err() == nil && n > 0 {
		r.Extents = make([]Extent, n)
		for i := range r.Extents {
			r.Extents[i] = Extent{Off: d.U32(), Len: d.U32(), Addr: d.U64(), RKey: d.U32(), Stamp: d.U64()}
		}
	}
	r.Capacity = Capacity{Total: d.U64(), Free: d.U64(), Used: d.U64(), Quarantined: d.U64()}
	r.Trims = decodeTrims(d)
	r.More = d.Bool()
	r.Next = d.U64()
	if err := d.Finish(); err != nil {
		return Reply{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch {
	case !r.Status.known():
		return Reply{}, fmt.Errorf("%w: status %#x", ErrMalformed, uint32(r.Status))
	case r.Lease < 0:
		return Reply{}, fmt.Errorf("%w: negative lease", ErrMalformed)
	}
	var end uint32
	for i, x := range r.Extents {
		if x.Len == 0 || !inChunk(x.Off, x.Len) || (i > 0 && x.Off < end) {
			return Reply{}, fmt.Errorf("%w: extent %d [%d,+%d) empty, outside the chunk or out of order", ErrMalformed, i, x.Off, x.Len)
		}
		end = x.End()
	}
	return r, nil
}
