package wire

import (
	"fmt"

	"github.com/octofs/octofs/internal/codec"
)

// RecordKind tells a partition log's records apart. Part of the on-media
// format: never renumber.
type RecordKind uint8

// Record kinds. Records state results, not operations: replaying a log
// sets the partition's state to what the records say, in order, so replay
// never re-decides anything and never depends on another partition.
const (
	// RecKindInode sets an inode's every attribute (insert or replace).
	RecKindInode RecordKind = 1
	// RecKindInodeFree removes an inode (its xattrs and, for a
	// directory, its entries, which are gone by then).
	RecKindInodeFree RecordKind = 2
	// RecKindEntryAdd adds or replaces a directory entry.
	RecKindEntryAdd RecordKind = 3
	// RecKindEntryRemove removes a directory entry.
	RecKindEntryRemove RecordKind = 4
	// RecKindXattrSet sets an xattr.
	RecKindXattrSet RecordKind = 5
	// RecKindXattrRemove removes an xattr.
	RecKindXattrRemove RecordKind = 6
	// RecKindCounters records the partition's next inode number and the
	// limit below which its transaction sequence numbers were handed out.
	RecKindCounters RecordKind = 7
	// RecKindRequest records a mutating request's answer for at-most-once
	// execution.
	RecKindRequest RecordKind = 8
	// RecKindIntent records a coordinator's intent (create, link, unlink,
	// rmdir, truncate) before it dispatches.
	RecKindIntent RecordKind = 9
	// RecKindIntentDone ends an intent.
	RecKindIntentDone RecordKind = 10
	// RecKindTxResult records a participant's outcome of a conditional
	// entry operation, so a re-dispatch gets the same answer.
	RecKindTxResult RecordKind = 11
	// RecKindLock records a rename transaction's locks at a partition.
	RecKindLock RecordKind = 12
	// RecKindUnlock releases a transaction's locks at a partition (abort,
	// or the end of an apply).
	RecKindUnlock RecordKind = 13
	// RecKindDecision is a rename coordinator's commit point: every
	// participant's updates.
	RecKindDecision RecordKind = 14
	// RecKindTxDone says every participant applied a decision.
	RecKindTxDone RecordKind = 15
)

// Record is a log record. Only this package implements it.
type Record interface {
	Kind() RecordKind
	encode(e *codec.Encoder)
	decode(d *codec.Decoder)
}

// EncodeRecord returns a record's bytes: version, kind, fields.
func EncodeRecord(r Record) []byte {
	e := codec.NewEncoder(make([]byte, 0, 128))
	return AppendRecord(e, r)
}

// AppendRecord encodes r with e (reset first), for callers that reuse a
// buffer; the result aliases e's buffer.
func AppendRecord(e *codec.Encoder, r Record) []byte {
	*e = *codec.NewEncoder(e.Bytes())
	e.U8(Version)
	e.U8(uint8(r.Kind()))
	r.encode(e)
	return e.Bytes()
}

// DecodeRecord parses a record. Strings and byte slices in the result do
// not alias b.
func DecodeRecord(b []byte) (Record, error) {
	d := codec.NewDecoder(b)
	v := d.U8()
	if d.Err() == nil && v != Version {
		return nil, fmt.Errorf("%w: record version %d, this build reads %d (run a newer octofs)", ErrMalformed, v, Version)
	}
	k := RecordKind(d.U8())
	if d.Err() != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, d.Err())
	}
	r := newRecord(k)
	if r == nil {
		return nil, fmt.Errorf("%w: unknown record kind %d", ErrMalformed, k)
	}
	r.decode(d)
	if err := d.Finish(); err != nil {
		return nil, fmt.Errorf("%w: record kind %d: %v", ErrMalformed, k, err)
	}
	return r, nil
}

func newRecord(k RecordKind) Record {
	switch k {
	case RecKindInode:
		return &InodeRecord{}
	case RecKindInodeFree:
		return &InodeFreeRecord{}
	case RecKindEntryAdd:
		return &EntryAddRecord{}
	case RecKindEntryRemove:
		return &EntryRemoveRecord{}
	case RecKindXattrSet:
		return &XattrSetRecord{}
	case RecKindXattrRemove:
		return &XattrRemoveRecord{}
	case RecKindCounters:
		return &CountersRecord{}
	case RecKindRequest:
		return &RequestRecord{}
	case RecKindIntent:
		return &IntentRecord{}
	case RecKindIntentDone:
		return &IntentDoneRecord{}
	case RecKindTxResult:
		return &TxResultRecord{}
	case RecKindLock:
		return &LockRecord{}
	case RecKindUnlock:
		return &UnlockRecord{}
	case RecKindDecision:
		return &DecisionRecord{}
	case RecKindTxDone:
		return &TxDoneRecord{}
	}
	return nil
}

// Inode flags (InodeRecord.Flags).
const (
	// InodePending: created by a cross-partition creation whose entry is
	// not yet confirmed; not visible until committed.
	InodePending uint32 = 1 << 0
	// InodeDead: a directory being removed or removed; no entry may be
	// added to it.
	InodeDead uint32 = 1 << 1
	// InodeOrphan: no links left, kept while some client has it open.
	InodeOrphan uint32 = 1 << 2
	// InodeFreeing: no links and no opens; its data is being freed, then
	// the inode is.
	InodeFreeing uint32 = 1 << 3
	// InodeLinkable: an orphan made by O_TMPFILE (without O_EXCL), which
	// link may give a name, as Linux's I_LINKABLE; the first link clears
	// it.
	InodeLinkable uint32 = 1 << 4
	// InodeHasBlocks: a regular file that may hold blocks past its size
	// (preallocated with FALLOC_FL_KEEP_SIZE, left by a fallocate that
	// failed part way, or by a writer that died before its commit). Its
	// data is freed with the inode whatever its size, and a truncate to
	// its own size frees what lies past it.
	InodeHasBlocks uint32 = 1 << 5

	inodeFlagsAll = InodeHasBlocks<<1 - 1
)

// InodeRecord is an inode's full state.
type InodeRecord struct {
	Ino   uint64
	Gen   uint64
	Mode  uint32
	UID   uint32
	GID   uint32
	Nlink uint32
	Size  uint64
	Rdev  uint64
	Atime Timespec
	Mtime Timespec
	Ctime Timespec
	Btime Timespec
	Flags uint32
	// Parent is a directory's parent directory (the root's is itself).
	Parent uint64
	// NextCookie is a directory's next readdir cookie.
	NextCookie uint64
	// Target is a symlink's target.
	Target string
}

// Kind implements Record.
func (*InodeRecord) Kind() RecordKind { return RecKindInode }

func (r *InodeRecord) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Gen)
	e.U32(r.Mode)
	e.U32(r.UID)
	e.U32(r.GID)
	e.U32(r.Nlink)
	e.U64(r.Size)
	e.U64(r.Rdev)
	r.Atime.encode(e)
	r.Mtime.encode(e)
	r.Ctime.encode(e)
	r.Btime.encode(e)
	e.U32(r.Flags)
	e.U64(r.Parent)
	e.U64(r.NextCookie)
	e.String16(r.Target)
}

func (r *InodeRecord) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Gen = d.U64()
	r.Mode = d.U32()
	r.UID = d.U32()
	r.GID = d.U32()
	r.Nlink = d.U32()
	r.Size = d.U64()
	r.Rdev = d.U64()
	r.Atime.decode(d)
	r.Mtime.decode(d)
	r.Ctime.decode(d)
	r.Btime.decode(d)
	r.Flags = d.U32()
	r.Parent = d.U64()
	r.NextCookie = d.U64()
	r.Target = d.String16(decodeMaxValue)
	if d.Err() == nil && r.Flags&^inodeFlagsAll != 0 {
		d.Fail("inode flags %#x", r.Flags)
	}
}

// InodeFreeRecord removes inode Ino.
type InodeFreeRecord struct{ Ino uint64 }

// Kind implements Record.
func (*InodeFreeRecord) Kind() RecordKind          { return RecKindInodeFree }
func (r *InodeFreeRecord) encode(e *codec.Encoder) { e.U64(r.Ino) }
func (r *InodeFreeRecord) decode(d *codec.Decoder) { r.Ino = d.U64() }

// EntryAddRecord adds Name -> Ino to directory Dir with Cookie, replacing
// an entry of that name.
type EntryAddRecord struct {
	Dir    uint64
	Name   string
	Ino    uint64
	Type   uint32
	Cookie uint64
}

// Kind implements Record.
func (*EntryAddRecord) Kind() RecordKind { return RecKindEntryAdd }

func (r *EntryAddRecord) encode(e *codec.Encoder) {
	e.U64(r.Dir)
	e.String16(r.Name)
	e.U64(r.Ino)
	e.U32(r.Type)
	e.U64(r.Cookie)
}

func (r *EntryAddRecord) decode(d *codec.Decoder) {
	r.Dir = d.U64()
	r.Name = d.String16(MaxNameLen)
	r.Ino = d.U64()
	r.Type = d.U32()
	r.Cookie = d.U64()
}

// EntryRemoveRecord removes Name from directory Dir.
type EntryRemoveRecord struct {
	Dir  uint64
	Name string
}

// Kind implements Record.
func (*EntryRemoveRecord) Kind() RecordKind { return RecKindEntryRemove }

func (r *EntryRemoveRecord) encode(e *codec.Encoder) {
	e.U64(r.Dir)
	e.String16(r.Name)
}

func (r *EntryRemoveRecord) decode(d *codec.Decoder) {
	r.Dir = d.U64()
	r.Name = d.String16(MaxNameLen)
}

// XattrSetRecord sets xattr Name of Ino.
type XattrSetRecord struct {
	Ino   uint64
	Name  string
	Value []byte
}

// Kind implements Record.
func (*XattrSetRecord) Kind() RecordKind { return RecKindXattrSet }

func (r *XattrSetRecord) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.String16(r.Name)
	e.Bytes32(r.Value)
}

func (r *XattrSetRecord) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Name = d.String16(MaxXattrNameLen)
	r.Value = append([]byte(nil), d.Bytes32(MaxXattrValueLen)...)
}

// XattrRemoveRecord removes xattr Name of Ino.
type XattrRemoveRecord struct {
	Ino  uint64
	Name string
}

// Kind implements Record.
func (*XattrRemoveRecord) Kind() RecordKind { return RecKindXattrRemove }

func (r *XattrRemoveRecord) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.String16(r.Name)
}

func (r *XattrRemoveRecord) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Name = d.String16(MaxXattrNameLen)
}

// CountersRecord: local inode numbers below NextIno are used or were;
// transaction sequences below TxnLimit may have been handed out.
type CountersRecord struct {
	NextIno  uint64
	TxnLimit uint64
}

// Kind implements Record.
func (*CountersRecord) Kind() RecordKind { return RecKindCounters }

func (r *CountersRecord) encode(e *codec.Encoder) {
	e.U64(r.NextIno)
	e.U64(r.TxnLimit)
}

func (r *CountersRecord) decode(d *codec.Decoder) {
	r.NextIno = d.U64()
	r.TxnLimit = d.U64()
}

// RequestRecord is the answer to request Seq of client (ClientID,
// Incarnation): its status and encoded reply body.
type RequestRecord struct {
	ClientID    uint64
	Incarnation uint64
	Seq         uint64
	Status      Status
	Reply       []byte
}

// Kind implements Record.
func (*RequestRecord) Kind() RecordKind { return RecKindRequest }

func (r *RequestRecord) encode(e *codec.Encoder) {
	e.U64(r.ClientID)
	e.U64(r.Incarnation)
	e.U64(r.Seq)
	e.U32(uint32(r.Status))
	e.Bytes32(r.Reply)
}

func (r *RequestRecord) decode(d *codec.Decoder) {
	r.ClientID = d.U64()
	r.Incarnation = d.U64()
	r.Seq = d.U64()
	r.Status = Status(d.U32())
	r.Reply = append([]byte(nil), d.Bytes32(decodeMaxValue)...)
}

// Intent kinds (IntentRecord.Op).
const (
	IntentCreate   uint8 = 1
	IntentLink     uint8 = 2
	IntentUnlink   uint8 = 3
	IntentRmdir    uint8 = 4
	IntentTruncate uint8 = 5
)

// IntentRecord is a coordinator's intent: what it does to inode Ino
// (which this partition owns) and to entry Name of directory Parent
// (which another partition may own), on behalf of request (ClientID, Seq)
// with Cred. Size is a truncation's new size; Type the entry's type.
type IntentRecord struct {
	Txn         TxnID
	Op          uint8
	Parent      uint64
	Name        string
	Ino         uint64
	Type        uint32
	Size        uint64
	ClientID    uint64
	Incarnation uint64
	Seq         uint64
	ReqOp       Op
	Cred        Cred
	// Umask is a creation's umask (an optional trailing field), applied
	// when the directory's owner says it has no default ACL.
	Umask uint32
}

// Kind implements Record.
func (*IntentRecord) Kind() RecordKind { return RecKindIntent }

func (r *IntentRecord) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U8(r.Op)
	e.U64(r.Parent)
	e.String16(r.Name)
	e.U64(r.Ino)
	e.U32(r.Type)
	e.U64(r.Size)
	e.U64(r.ClientID)
	e.U64(r.Incarnation)
	e.U64(r.Seq)
	e.U16(uint16(r.ReqOp))
	r.Cred.encode(e)
	putOptional32(e, r.Umask&0o777)
}

func (r *IntentRecord) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.Op = d.U8()
	r.Parent = d.U64()
	r.Name = d.String16(MaxNameLen)
	r.Ino = d.U64()
	r.Type = d.U32()
	r.Size = d.U64()
	r.ClientID = d.U64()
	r.Incarnation = d.U64()
	r.Seq = d.U64()
	r.ReqOp = Op(d.U16())
	r.Cred.decode(d)
	r.Umask = optional32(d, "umask")
	if d.Err() == nil && r.Umask&^0o777 != 0 {
		d.Fail("umask %#o", r.Umask)
	}
	if d.Err() == nil && (r.Op < IntentCreate || r.Op > IntentTruncate) {
		d.Fail("intent op %d", r.Op)
	}
}

// IntentDoneRecord ends intent Txn.
type IntentDoneRecord struct{ Txn TxnID }

// Kind implements Record.
func (*IntentDoneRecord) Kind() RecordKind          { return RecKindIntentDone }
func (r *IntentDoneRecord) encode(e *codec.Encoder) { r.Txn.encode(e) }
func (r *IntentDoneRecord) decode(d *codec.Decoder) { r.Txn.decode(d) }

// TxResultRecord is a participant's answer to a conditional entry
// operation of Txn.
type TxResultRecord struct {
	Txn    TxnID
	Status Status
	Reply  []byte
}

// Kind implements Record.
func (*TxResultRecord) Kind() RecordKind { return RecKindTxResult }

func (r *TxResultRecord) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U32(uint32(r.Status))
	e.Bytes32(r.Reply)
}

func (r *TxResultRecord) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.Status = Status(d.U32())
	r.Reply = append([]byte(nil), d.Bytes32(decodeMaxList)...)
}

// LockRecord holds Items for Txn at this partition.
type LockRecord struct {
	Txn   TxnID
	Items []LockItem
}

// Kind implements Record.
func (*LockRecord) Kind() RecordKind { return RecKindLock }

func (r *LockRecord) encode(e *codec.Encoder) {
	(&TxLockRequest{Txn: r.Txn, Items: r.Items}).encode(e)
}

func (r *LockRecord) decode(d *codec.Decoder) {
	var q TxLockRequest
	q.decode(d)
	r.Txn, r.Items = q.Txn, q.Items
}

// UnlockRecord releases Txn's locks at this partition.
type UnlockRecord struct{ Txn TxnID }

// Kind implements Record.
func (*UnlockRecord) Kind() RecordKind          { return RecKindUnlock }
func (r *UnlockRecord) encode(e *codec.Encoder) { r.Txn.encode(e) }
func (r *UnlockRecord) decode(d *codec.Decoder) { r.Txn.decode(d) }

// TxPart is one participant partition's updates in a decision.
type TxPart struct {
	Partition uint32
	Ops       []TxOp
}

const maxTxParts = 8

// DecisionRecord is a rename's commit point: from here on the coordinator
// (or its successor after a restart) dispatches Parts until each is
// applied, then answers request (ClientID, Seq).
type DecisionRecord struct {
	Txn         TxnID
	ClientID    uint64
	Incarnation uint64
	Seq         uint64
	Now         Timespec
	Parts       []TxPart
}

// Kind implements Record.
func (*DecisionRecord) Kind() RecordKind { return RecKindDecision }

func (r *DecisionRecord) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U64(r.ClientID)
	e.U64(r.Incarnation)
	e.U64(r.Seq)
	r.Now.encode(e)
	e.U8(uint8(len(r.Parts)))
	for i := range r.Parts {
		e.U32(r.Parts[i].Partition)
		encodeTxOps(e, r.Parts[i].Ops)
	}
}

func (r *DecisionRecord) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.ClientID = d.U64()
	r.Incarnation = d.U64()
	r.Seq = d.U64()
	r.Now.decode(d)
	n := d.U8()
	if d.Err() == nil && n > maxTxParts {
		d.Fail("%d decision parts, at most %d", n, maxTxParts)
		return
	}
	if n > 0 && d.Err() == nil {
		r.Parts = make([]TxPart, n)
	}
	for i := range r.Parts {
		r.Parts[i].Partition = d.U32()
		r.Parts[i].Ops = decodeTxOps(d)
	}
}

// TxDoneRecord says decision Txn is applied everywhere.
type TxDoneRecord struct{ Txn TxnID }

// Kind implements Record.
func (*TxDoneRecord) Kind() RecordKind          { return RecKindTxDone }
func (r *TxDoneRecord) encode(e *codec.Encoder) { r.Txn.encode(e) }
func (r *TxDoneRecord) decode(d *codec.Decoder) { r.Txn.decode(d) }
