package wire

import (
	"bytes"
	"fmt"

	"github.com/octofs/octofs/internal/codec"
)

// Header starts every request.
type Header struct {
	// Epoch is the map epoch the sender routed the request by.
	Epoch uint64
	// ClientID and Incarnation identify the sending process: a client
	// library instance, or a node (node-to-node requests). A sender's
	// incarnation changes each time it starts; the service fences older
	// incarnations once it has seen a newer one.
	ClientID    uint64
	Incarnation uint64
	// Seq is the request's sequence number for at-most-once execution of
	// mutating ops (0 for others): the service answers a repeated
	// (ClientID, Seq) with the first answer, across its restarts.
	Seq uint64
	// LowSeq says every sequence below it has been answered to the
	// sender, so the service may forget those answers.
	LowSeq uint64
	// Cred is the caller's identity for permission checks.
	Cred Cred
}

func (h *Header) encode(e *codec.Encoder) {
	e.U64(h.Epoch)
	e.U64(h.ClientID)
	e.U64(h.Incarnation)
	e.U64(h.Seq)
	e.U64(h.LowSeq)
	h.Cred.encode(e)
}

func (h *Header) decode(d *codec.Decoder) {
	h.Epoch = d.U64()
	h.ClientID = d.U64()
	h.Incarnation = d.U64()
	h.Seq = d.U64()
	h.LowSeq = d.U64()
	h.Cred.decode(d)
}

// ReplyHeader starts every reply.
type ReplyHeader struct {
	Status Status
	// Epoch is the responder's map epoch (StatusWrongOwner: refresh to at
	// least this).
	Epoch uint64
	// Incarnation is the responding process's incarnation: a client that
	// sees it change re-registers its opens there.
	Incarnation uint64
	// Ino is the inode a StatusRedirect sends the request to.
	Ino uint64
}

// Body is a request or reply body. Only this package implements it.
type Body interface {
	encode(e *codec.Encoder)
	decode(d *codec.Decoder)
}

// EncodeRequest returns the bytes of a request: the envelope and body.
func EncodeRequest(op Op, h *Header, body Body) []byte {
	e := codec.NewEncoder(make([]byte, 0, 96+4*len(h.Cred.Groups)))
	e.U8(Version)
	e.U16(uint16(op))
	h.encode(e)
	if body != nil {
		body.encode(e)
	}
	return e.Bytes()
}

// DecodeRequest parses a request. The body's type is the one NewRequest
// gives for the op; an unknown op is ErrMalformed.
func DecodeRequest(b []byte) (Op, Header, Body, error) {
	d := codec.NewDecoder(b)
	var h Header
	if v := d.U8(); d.Err() == nil && v != Version {
		return 0, h, nil, fmt.Errorf("%w: request version %d, this node speaks %d (run the same octofs version everywhere)", ErrMalformed, v, Version)
	}
	op := Op(d.U16())
	h.decode(d)
	if d.Err() != nil {
		return 0, Header{}, nil, fmt.Errorf("%w: %v", ErrMalformed, d.Err())
	}
	body := NewRequest(op)
	if body == nil {
		return op, Header{}, nil, fmt.Errorf("%w: unknown op %#x", ErrMalformed, uint16(op))
	}
	body.decode(d)
	if err := d.Finish(); err != nil {
		return op, Header{}, nil, fmt.Errorf("%w: %v: %v", ErrMalformed, op, err)
	}
	return op, h, body, nil
}

// replyHeaderSize is the size of an encoded ReplyHeader: version,
// status, epoch, incarnation, inode.
const replyHeaderSize = 1 + 4 + 8 + 8 + 8

// EncodeReply returns the bytes of a reply. body is encoded only with
// StatusOK (it may be nil for ops that answer nothing).
func EncodeReply(rh ReplyHeader, body Body) []byte {
	size := 160
	if s, ok := body.(sizer); ok && rh.Status == StatusOK {
		size = replyHeaderSize + s.size()
	}
	e := codec.NewEncoder(make([]byte, 0, size))
	e.U8(Version)
	e.U32(uint32(rh.Status))
	e.U64(rh.Epoch)
	e.U64(rh.Incarnation)
	e.U64(rh.Ino)
	if rh.Status == StatusOK && body != nil {
		body.encode(e)
	}
	return e.Bytes()
}

// DecodeReply parses a reply into body (when the status is StatusOK and
// body is not nil; a nil body must match an empty one).
func DecodeReply(b []byte, body Body) (ReplyHeader, error) {
	d := codec.NewDecoder(b)
	var rh ReplyHeader
	if v := d.U8(); d.Err() == nil && v != Version {
		return rh, fmt.Errorf("%w: reply version %d, this side speaks %d (run the same octofs version everywhere)", ErrMalformed, v, Version)
	}
	rh.Status = Status(d.U32())
	rh.Epoch = d.U64()
	rh.Incarnation = d.U64()
	rh.Ino = d.U64()
	if d.Err() == nil && rh.Status == StatusOK && body != nil {
		body.decode(d)
	}
	if err := d.Finish(); err != nil {
		return ReplyHeader{}, fmt.Errorf("%w: reply: %v", ErrMalformed, err)
	}
	return rh, nil
}

// NewRequest returns an empty request body for op, nil for an unknown op.
func NewRequest(op Op) Body {
	switch op {
	case OpNull, OpStatFS, OpKeepAlive:
		return &Empty{}
	case OpLookup:
		return &LookupRequest{}
	case OpGetAttr, OpTouchAtime:
		return &GetAttrRequest{}
	case OpSetAttr:
		return &SetAttrRequest{}
	case OpCreate, OpMkdir, OpSymlink, OpTmpfile:
		return &MakeRequest{}
	case OpLink:
		return &LinkRequest{}
	case OpUnlink, OpRmdir:
		return &UnlinkRequest{}
	case OpRename:
		return &RenameRequest{}
	case OpReadlink, OpGetParent:
		return &InoRequest{}
	case OpReadDir:
		return &ReadDirRequest{}
	case OpGetXattr:
		return &GetXattrRequest{}
	case OpSetXattr:
		return &SetXattrRequest{}
	case OpListXattr:
		return &ListXattrRequest{}
	case OpRemoveXattr:
		return &RemoveXattrRequest{}
	case OpAccess:
		return &AccessRequest{}
	case OpOpen:
		return &OpenRequest{}
	case OpOpenDir:
		return &OpenDirRequest{}
	case OpRelease:
		return &ReleaseRequest{}
	case OpWriteCommit:
		return &WriteCommitRequest{}
	case OpAppend:
		return &AppendRequest{}
	case OpGetLk, OpSetLk:
		return &LockRequest{}
	case OpEntryAdd:
		return &EntryAddRequest{}
	case OpEntryRemove:
		return &EntryRemoveRequest{}
	case OpTxLock:
		return &TxLockRequest{}
	case OpTxApply:
		return &TxApplyRequest{}
	case OpTxAbort, OpTxStatus:
		return &TxRequest{}
	}
	return nil
}

// NewReply returns an empty reply body for op, nil for an unknown op.
func NewReply(op Op) Body {
	switch op {
	case OpNull, OpRename, OpSetXattr, OpRemoveXattr, OpAccess,
		OpRelease, OpSetLk, OpTxApply, OpTxAbort:
		return &Empty{}
	case OpUnlink, OpRmdir, OpEntryRemove:
		return &DirReply{}
	case OpLookup:
		return &LookupReply{}
	case OpGetAttr, OpSetAttr, OpLink, OpOpen, OpWriteCommit, OpTmpfile, OpTouchAtime:
		return &AttrReply{}
	case OpCreate, OpMkdir, OpSymlink:
		return &MakeReply{}
	case OpReadlink:
		return &ReadlinkReply{}
	case OpReadDir:
		return &ReadDirReply{}
	case OpStatFS:
		return &StatFSReply{}
	case OpGetXattr:
		return &GetXattrReply{}
	case OpListXattr:
		return &ListXattrReply{}
	case OpGetLk:
		return &LockReply{}
	case OpOpenDir:
		return &OpenDirReply{}
	case OpKeepAlive:
		return &KeepAliveReply{}
	case OpAppend:
		return &AppendReply{}
	case OpEntryAdd:
		return &EntryAddReply{}
	case OpTxLock:
		return &TxLockReply{}
	case OpTxStatus:
		return &TxStatusReply{}
	case OpGetParent:
		return &GetParentReply{}
	}
	return nil
}

// Optional trailing fields. A message extended after its first release
// carries a new last field only when it is not zero, and a decoder reads
// it when bytes remain, refusing a zero there so that every message has
// one encoding. A sender of the older form is understood (the field is
// zero), and the messages and records of the older form keep their bytes.
func putOptional32(e *codec.Encoder, v uint32) {
	if v != 0 {
		e.U32(v)
	}
}

func optional32(d *codec.Decoder, what string) uint32 {
	if d.Err() != nil || d.Remaining() == 0 {
		return 0
	}
	v := d.U32()
	if d.Err() == nil && v == 0 {
		d.Fail("%s present as zero", what)
	}
	return v
}

// Empty is the body of requests and replies that carry nothing.
type Empty struct{}

func (*Empty) encode(*codec.Encoder) {}
func (*Empty) decode(*codec.Decoder) {}

// InoRequest names one inode (readlink, get-parent).
type InoRequest struct{ Ino uint64 }

func (r *InoRequest) encode(e *codec.Encoder) { e.U64(r.Ino) }
func (r *InoRequest) decode(d *codec.Decoder) { r.Ino = d.U64() }

// LookupRequest looks name up in directory Parent. "." and ".." are
// answered from the directory itself.
type LookupRequest struct {
	Parent uint64
	Name   string
}

func (r *LookupRequest) encode(e *codec.Encoder) {
	e.U64(r.Parent)
	e.String16(r.Name)
}

func (r *LookupRequest) decode(d *codec.Decoder) {
	r.Parent = d.U64()
	r.Name = d.String16(decodeMaxName)
}

// LookupReply names the entry's inode and type; when the inode lives on
// the same node the attributes come along (HasAttr), else the client asks
// the inode's owner.
type LookupReply struct {
	Ino     uint64
	Type    uint32
	HasAttr bool
	Attr    Attr
}

func (r *LookupReply) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U32(r.Type)
	e.Bool(r.HasAttr)
	if r.HasAttr {
		r.Attr.encode(e)
	}
}

func (r *LookupReply) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Type = d.U32()
	r.HasAttr = d.Bool()
	if r.HasAttr {
		r.Attr.decode(d)
	}
}

// GetAttrRequest asks for an inode's attributes. Gen 0 matches any
// generation; another mismatch is ESTALE.
type GetAttrRequest struct {
	Ino uint64
	Gen uint64
}

func (r *GetAttrRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Gen)
}

func (r *GetAttrRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Gen = d.U64()
}

// AttrReply carries an inode's attributes.
type AttrReply struct{ Attr Attr }

func (r *AttrReply) encode(e *codec.Encoder) { r.Attr.encode(e) }
func (r *AttrReply) decode(d *codec.Decoder) { r.Attr.decode(d) }

// DirReply answers an unlink or rmdir (and a peer's entry removal for
// them): the directory's attributes as the removal left them, when
// HasDir. An empty body is a DirReply without them (what CheckOnly
// removals, and older nodes, answer).
type DirReply struct {
	HasDir bool
	Dir    Attr
}

func (r *DirReply) encode(e *codec.Encoder) {
	if r.HasDir {
		e.Bool(true)
		r.Dir.encode(e)
	}
}

func (r *DirReply) decode(d *codec.Decoder) { r.HasDir = decodeOptionalDir(d, &r.Dir) }

// decodeOptionalDir reads a directory's attributes that follow only when
// present (a true byte, then the attributes; nothing when absent, the one
// encoding of "absent"), and reports whether they were.
func decodeOptionalDir(d *codec.Decoder, dir *Attr) bool {
	if d.Remaining() == 0 {
		return false
	}
	if !d.Bool() {
		d.Fail("an absent directory is encoded as nothing")
		return false
	}
	dir.decode(d)
	return true
}

// MakeReply answers a creation (create, mknod, mkdir, symlink): the new
// inode's attributes and, when HasDir, its directory's as the entry left
// them, so that the client need not ask for the directory's again (the
// kernel does, after every creation). An AttrReply's body decodes as a
// MakeReply without the directory.
type MakeReply struct {
	Attr   Attr
	HasDir bool
	Dir    Attr
}

func (r *MakeReply) encode(e *codec.Encoder) {
	r.Attr.encode(e)
	if r.HasDir {
		e.Bool(true)
		r.Dir.encode(e)
	}
}

func (r *MakeReply) decode(d *codec.Decoder) {
	r.Attr.decode(d)
	r.HasDir = decodeOptionalDir(d, &r.Dir)
}

// SetAttr fields (SetAttrRequest.Valid).
const (
	SetMode uint32 = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime
	SetMtime
	// SetAtimeNow and SetMtimeNow are utimensat's UTIME_NOW: the server's
	// clock, with the permission rule of a NULL times argument. A time
	// with neither its Set bit nor its Now bit is UTIME_OMIT.
	SetAtimeNow
	SetMtimeNow
	SetCtime
	// SetHandle says the caller holds the file open for writing (an
	// ftruncate): a size change then needs that open, registered by this
	// client, instead of write permission.
	SetHandle
	// SetKillSuidGid clears setuid and setgid as a write by the caller
	// would (FUSE's FATTR_KILL_SUIDGID).
	SetKillSuidGid

	setAll = SetKillSuidGid<<1 - 1
)

// SetAttrRequest is chmod, chown, truncate and utimens in one, as FUSE
// delivers them.
type SetAttrRequest struct {
	Ino   uint64
	Gen   uint64
	Valid uint32
	// Mode holds permission bits only; the type never changes.
	Mode  uint32
	UID   uint32
	GID   uint32
	Size  uint64
	Atime Timespec
	Mtime Timespec
	Ctime Timespec
}

func (r *SetAttrRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Gen)
	e.U32(r.Valid)
	e.U32(r.Mode)
	e.U32(r.UID)
	e.U32(r.GID)
	e.U64(r.Size)
	r.Atime.encode(e)
	r.Mtime.encode(e)
	r.Ctime.encode(e)
}

func (r *SetAttrRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Gen = d.U64()
	r.Valid = d.U32()
	r.Mode = d.U32()
	r.UID = d.U32()
	r.GID = d.U32()
	r.Size = d.U64()
	r.Atime.decode(d)
	r.Mtime.decode(d)
	r.Ctime.decode(d)
	if d.Err() == nil && r.Valid&^setAll != 0 {
		d.Fail("setattr valid bits %#x", r.Valid)
	}
}

// MakeRequest creates Name in Parent: OpCreate (a regular file, fifo,
// socket or device by Mode's type, Rdev for devices), OpMkdir, OpSymlink
// (Target). It goes to the owner of the new inode's partition,
// PartitionForName(Parent, Name). Mode is final unless Umask (an
// optional trailing field) is set: then the owner applies it, unless the
// directory has a default ACL, whose rules apply instead (the FUSE mount
// passes the caller's umask so, as Linux file systems with POSIX ACLs
// do). With Open set (OpCreate), the new file is also registered as
// open by the caller with OpenFlags, so that a creator may write a file
// whose mode forbids it, as open(2) with O_CREAT allows. An existing name
// is EEXIST whatever the flags; the client opens the existing file when
// O_EXCL was not given.
type MakeRequest struct {
	Parent    uint64
	Name      string
	Mode      uint32
	Rdev      uint64
	Target    string
	Open      bool
	OpenFlags uint32
	Umask     uint32
}

func (r *MakeRequest) encode(e *codec.Encoder) {
	e.U64(r.Parent)
	e.String16(r.Name)
	e.U32(r.Mode)
	e.U64(r.Rdev)
	e.String16(r.Target)
	e.Bool(r.Open)
	e.U32(r.OpenFlags)
	putOptional32(e, r.Umask&0o777)
}

func (r *MakeRequest) decode(d *codec.Decoder) {
	r.Parent = d.U64()
	r.Name = d.String16(decodeMaxName)
	r.Mode = d.U32()
	r.Rdev = d.U64()
	r.Target = d.String16(decodeMaxValue)
	r.Open = d.Bool()
	r.OpenFlags = d.U32()
	r.Umask = optional32(d, "umask")
	if r.Umask&^0o777 != 0 {
		d.Fail("umask %#o", r.Umask)
	}
}

// LinkRequest makes NewName in NewParent a hard link to Ino; it goes to
// Ino's owner.
type LinkRequest struct {
	Ino       uint64
	NewParent uint64
	NewName   string
}

func (r *LinkRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.NewParent)
	e.String16(r.NewName)
}

func (r *LinkRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.NewParent = d.U64()
	r.NewName = d.String16(decodeMaxName)
}

// UnlinkRequest removes Name from Parent (OpUnlink, OpRmdir). Ino is the
// entry's inode if the client knows it (then the request goes to its
// owner), else 0 and the request goes to Parent's owner, which answers
// StatusRedirect with the inode when it does not own it.
type UnlinkRequest struct {
	Parent uint64
	Name   string
	Ino    uint64
}

func (r *UnlinkRequest) encode(e *codec.Encoder) {
	e.U64(r.Parent)
	e.String16(r.Name)
	e.U64(r.Ino)
}

func (r *UnlinkRequest) decode(d *codec.Decoder) {
	r.Parent = d.U64()
	r.Name = d.String16(decodeMaxName)
	r.Ino = d.U64()
}

// RenameRequest is renameat2. SrcIno is the source entry's inode if known
// (then the request goes to its owner), else 0 (to SrcParent's owner,
// which redirects).
type RenameRequest struct {
	SrcParent uint64
	SrcName   string
	DstParent uint64
	DstName   string
	Flags     uint32
	SrcIno    uint64
}

func (r *RenameRequest) encode(e *codec.Encoder) {
	e.U64(r.SrcParent)
	e.String16(r.SrcName)
	e.U64(r.DstParent)
	e.String16(r.DstName)
	e.U32(r.Flags)
	e.U64(r.SrcIno)
}

func (r *RenameRequest) decode(d *codec.Decoder) {
	r.SrcParent = d.U64()
	r.SrcName = d.String16(decodeMaxName)
	r.DstParent = d.U64()
	r.DstName = d.String16(decodeMaxName)
	r.Flags = d.U32()
	r.SrcIno = d.U64()
}

// ReadlinkReply is a symlink's target.
type ReadlinkReply struct{ Target string }

func (r *ReadlinkReply) encode(e *codec.Encoder) { e.String32(r.Target) }
func (r *ReadlinkReply) decode(d *codec.Decoder) { r.Target = d.String32(decodeMaxValue) }

// ReadDirRequest lists directory Ino's entries after Cookie (0: from the
// start), at most MaxEntries of them (0: no count limit) in at most about
// MaxBytes of reply (0: the service's default). "." and ".." are not
// listed: their cookies are 1 and 2, the client adds them. A listing
// updates the directory's atime by relatime's rule unless Flags has
// ReadDirNoAtime.
type ReadDirRequest struct {
	Ino        uint64
	Cookie     uint64
	MaxBytes   uint32
	MaxEntries uint32
	// Flags is an optional trailing field (ReadDirNoAtime).
	Flags uint32
}

func (r *ReadDirRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Cookie)
	e.U32(r.MaxBytes)
	e.U32(r.MaxEntries)
	putOptional32(e, r.Flags)
}

func (r *ReadDirRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Cookie = d.U64()
	r.MaxBytes = d.U32()
	r.MaxEntries = d.U32()
	r.Flags = optional32(d, "readdir flags")
	if d.Err() == nil && r.Flags&^ReadDirNoAtime != 0 {
		d.Fail("readdir flags %#x", r.Flags)
	}
}

// ReadDirReply is a page of entries in cookie order; EOF says none follow.
type ReadDirReply struct {
	Entries []DirEntry
	EOF     bool
}

func (r *ReadDirReply) encode(e *codec.Encoder) {
	e.U32(uint32(len(r.Entries)))
	for i := range r.Entries {
		x := &r.Entries[i]
		e.String16(x.Name)
		e.U64(x.Ino)
		e.U32(x.Type)
		e.U64(x.Cookie)
		e.Bool(x.HasAttr)
		if x.HasAttr {
			x.Attr.encode(e)
		}
	}
	e.Bool(r.EOF)
}

// sizer is a body that knows its encoded size beforehand, so that its
// encoder is made large enough at once (a page of a listing is tens of
// KiB, grown by doubling from 160 bytes before).
type sizer interface{ size() int }

func (r *ReadDirReply) size() int {
	n := 4 + 1
	for i := range r.Entries {
		n += DirEntrySize(r.Entries[i].Name, r.Entries[i].HasAttr)
	}
	return n
}

// DirEntrySize is the encoded size of a DirEntry named name, with or
// without attributes: what a page's byte budget counts.
func DirEntrySize(name string, withAttr bool) int {
	n := dirEntryMin + len(name)
	if withAttr {
		n += AttrSize
	}
	return n
}

func (r *OpenDirReply) size() int { return AttrSize + r.Page.size() }

// dirEntryMin is the smallest encoded entry.
const dirEntryMin = 2 + 8 + 4 + 8 + 1

func (r *ReadDirReply) decode(d *codec.Decoder) {
	n := d.U32()
	if d.Err() == nil && uint64(n)*dirEntryMin > uint64(d.Remaining()) {
		d.Fail("%d entries in %d bytes", n, d.Remaining())
		return
	}
	if n > 0 {
		r.Entries = make([]DirEntry, n)
	}
	for i := range r.Entries {
		x := &r.Entries[i]
		x.Name = d.String16(decodeMaxName)
		x.Ino = d.U64()
		x.Type = d.U32()
		x.Cookie = d.U64()
		x.HasAttr = d.Bool()
		if x.HasAttr {
			x.Attr.decode(d)
			if d.Err() == nil && (x.Attr.Ino != x.Ino || x.Attr.Mode&ModeType != x.Type) {
				d.Fail("entry %q: attributes of inode %#x (type %#o) for inode %#x (type %#o)", x.Name, x.Attr.Ino, x.Attr.Mode&ModeType, x.Ino, x.Type)
			}
		}
	}
	r.EOF = d.Bool()
}

// StatFSReply is one node's capacity; the client sums the nodes.
type StatFSReply struct {
	Bsize   uint32
	Blocks  uint64
	Bfree   uint64
	Bavail  uint64
	Files   uint64
	Ffree   uint64
	NameLen uint32
}

func (r *StatFSReply) encode(e *codec.Encoder) {
	e.U32(r.Bsize)
	e.U64(r.Blocks)
	e.U64(r.Bfree)
	e.U64(r.Bavail)
	e.U64(r.Files)
	e.U64(r.Ffree)
	e.U32(r.NameLen)
}

func (r *StatFSReply) decode(d *codec.Decoder) {
	r.Bsize = d.U32()
	r.Blocks = d.U64()
	r.Bfree = d.U64()
	r.Bavail = d.U64()
	r.Files = d.U64()
	r.Ffree = d.U64()
	r.NameLen = d.U32()
}

// GetXattrRequest reads xattr Name. Size is the caller's buffer: 0 asks
// for the value whatever its size (getxattr's size query), a smaller
// buffer than the value is ERANGE.
type GetXattrRequest struct {
	Ino  uint64
	Name string
	Size uint32
}

func (r *GetXattrRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.String16(r.Name)
	e.U32(r.Size)
}

func (r *GetXattrRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Name = d.String16(decodeMaxName)
	r.Size = d.U32()
}

// GetXattrReply is an xattr's value.
type GetXattrReply struct{ Value []byte }

func (r *GetXattrReply) encode(e *codec.Encoder) { e.Bytes32(r.Value) }
func (r *GetXattrReply) decode(d *codec.Decoder) { r.Value = d.Bytes32(decodeMaxValue) }

// SetXattrRequest sets xattr Name to Value; Flags are XattrCreate or
// XattrReplace.
type SetXattrRequest struct {
	Ino   uint64
	Name  string
	Value []byte
	Flags uint32
}

func (r *SetXattrRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.String16(r.Name)
	e.Bytes32(r.Value)
	e.U32(r.Flags)
}

func (r *SetXattrRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Name = d.String16(decodeMaxName)
	r.Value = d.Bytes32(decodeMaxValue)
	r.Flags = d.U32()
}

// ListXattrRequest lists the xattr names the caller may see. Size as in
// GetXattrRequest, against listxattr's NUL-separated list.
type ListXattrRequest struct {
	Ino  uint64
	Size uint32
}

func (r *ListXattrRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U32(r.Size)
}

func (r *ListXattrRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Size = d.U32()
}

// ListXattrReply is the names, sorted.
type ListXattrReply struct{ Names []string }

func (r *ListXattrReply) encode(e *codec.Encoder) {
	e.U32(uint32(len(r.Names)))
	for _, n := range r.Names {
		e.String16(n)
	}
}

func (r *ListXattrReply) decode(d *codec.Decoder) {
	n := d.U32()
	if d.Err() == nil && uint64(n)*2 > uint64(d.Remaining()) {
		d.Fail("%d names in %d bytes", n, d.Remaining())
		return
	}
	if n > 0 {
		r.Names = make([]string, n)
	}
	for i := range r.Names {
		r.Names[i] = d.String16(decodeMaxName)
	}
}

// RemoveXattrRequest removes xattr Name.
type RemoveXattrRequest struct {
	Ino  uint64
	Name string
}

func (r *RemoveXattrRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.String16(r.Name)
}

func (r *RemoveXattrRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Name = d.String16(decodeMaxName)
}

// AccessRequest is access(2) with Mask of AccessRead, AccessWrite,
// AccessExec (0: existence only).
type AccessRequest struct {
	Ino  uint64
	Mask uint32
}

func (r *AccessRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U32(r.Mask)
}

func (r *AccessRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Mask = d.U32()
}

// OpenRequest checks that the caller may open Ino with Flags, truncates a
// regular file for O_TRUNC, and registers the open for the client's
// session (an unlinked open file lives until its last release). Reclaim
// re-registers an open the client held before the node restarted; it may
// name a file whose link count is zero.
type OpenRequest struct {
	Ino     uint64
	Gen     uint64
	Flags   uint32
	Reclaim bool
}

func (r *OpenRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Gen)
	e.U32(r.Flags)
	e.Bool(r.Reclaim)
}

func (r *OpenRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Gen = d.U64()
	r.Flags = d.U32()
	r.Reclaim = d.Bool()
}

// OpenDirRequest opens directory Ino for a listing (OpOpenDir). Flags
// may hold OpenNoAtime only (the owner's privilege, EPERM otherwise);
// MaxBytes and MaxEntries bound the first page as ReadDirRequest's do.
type OpenDirRequest struct {
	Ino        uint64
	Gen        uint64
	Flags      uint32
	MaxBytes   uint32
	MaxEntries uint32
}

func (r *OpenDirRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Gen)
	e.U32(r.Flags)
	e.U32(r.MaxBytes)
	e.U32(r.MaxEntries)
}

func (r *OpenDirRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Gen = d.U64()
	r.Flags = d.U32()
	r.MaxBytes = d.U32()
	r.MaxEntries = d.U32()
	if d.Err() == nil && r.Flags&^OpenNoAtime != 0 {
		d.Fail("opendir flags %#x", r.Flags)
	}
}

// OpenDirReply is the opened directory's attributes and the first page
// of its listing (from cookie 0).
type OpenDirReply struct {
	Attr Attr
	Page ReadDirReply
}

func (r *OpenDirReply) encode(e *codec.Encoder) {
	r.Attr.encode(e)
	r.Page.encode(e)
}

func (r *OpenDirReply) decode(d *codec.Decoder) {
	r.Attr.decode(d)
	r.Page.decode(d)
}

// ReleaseRequest ends one registered open of Ino with Flags.
type ReleaseRequest struct {
	Ino   uint64
	Flags uint32
}

func (r *ReleaseRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U32(r.Flags)
}

func (r *ReleaseRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Flags = d.U32()
}

// WriteCommitRequest records a write the caller made durable: the size
// becomes at least Size, mtime and ctime become Mtime (the server's clock
// if zero), and setuid/setgid are cleared as a write by the caller clears
// them.
type WriteCommitRequest struct {
	Ino   uint64
	Size  uint64
	Mtime Timespec
}

func (r *WriteCommitRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Size)
	r.Mtime.encode(e)
}

func (r *WriteCommitRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Size = d.U64()
	r.Mtime.decode(d)
}

// AppendRequest asks where an O_APPEND write of Len bytes goes (OpAppend).
// Known is the end of the file as the caller knows it, its own writes
// not yet committed included.
type AppendRequest struct {
	Ino   uint64
	Len   uint64
	Known uint64
}

func (r *AppendRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	e.U64(r.Len)
	e.U64(r.Known)
}

func (r *AppendRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Len = d.U64()
	r.Known = d.U64()
}

// AppendReply is the offset an O_APPEND write goes to.
type AppendReply struct{ Offset uint64 }

func (r *AppendReply) encode(e *codec.Encoder) { e.U64(r.Offset) }
func (r *AppendReply) decode(d *codec.Decoder) { r.Offset = d.U64() }

// LockRequest tests (OpGetLk) or sets (OpSetLk, never waiting: a conflict
// is EAGAIN) an advisory lock.
type LockRequest struct {
	Ino  uint64
	Lock Lock
}

func (r *LockRequest) encode(e *codec.Encoder) {
	e.U64(r.Ino)
	r.Lock.encode(e)
}

func (r *LockRequest) decode(d *codec.Decoder) {
	r.Ino = d.U64()
	r.Lock.decode(d)
}

// LockReply is the first conflicting lock, or the request's lock with
// Type LockUnlock if none conflicts.
type LockReply struct{ Lock Lock }

func (r *LockReply) encode(e *codec.Encoder) { r.Lock.encode(e) }
func (r *LockReply) decode(d *codec.Decoder) { r.Lock.decode(d) }

// KeepAliveReply says how long the node keeps the client's session (its
// opens and locks) without hearing from it.
type KeepAliveReply struct{ LeaseMillis uint32 }

func (r *KeepAliveReply) encode(e *codec.Encoder) { e.U32(r.LeaseMillis) }
func (r *KeepAliveReply) decode(d *codec.Decoder) { r.LeaseMillis = d.U32() }

// EntryAddRequest adds Name -> Ino (of Type) to directory Dir if the name
// is absent or already names Ino, for the coordinator of Txn (a creation
// or a link). The header's Cred must be allowed to write Dir. Watermark:
// every transaction of Txn.Partition below it is finished, so the
// participant may forget their outcomes. Flags (EntryAddCheckName) is an
// optional trailing field.
type EntryAddRequest struct {
	Txn       TxnID
	Watermark uint64
	Dir       uint64
	Name      string
	Ino       uint64
	Type      uint32
	Flags     uint32
}

// EntryAdd flags.
const (
	// EntryAddCheckName asks only for the checks Linux makes of the
	// directory and the name before a link's protected_hardlinks check
	// (the directory exists, search permission, the name is free),
	// changing nothing and recording nothing: the coordinator of a link
	// that check refuses learns whether one of them answers first.
	EntryAddCheckName uint32 = 1 << 0

	entryAddFlagsAll = EntryAddCheckName<<1 - 1
)

func (r *EntryAddRequest) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U64(r.Watermark)
	e.U64(r.Dir)
	e.String16(r.Name)
	e.U64(r.Ino)
	e.U32(r.Type)
	putOptional32(e, r.Flags)
}

func (r *EntryAddRequest) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.Watermark = d.U64()
	r.Dir = d.U64()
	r.Name = d.String16(decodeMaxName)
	r.Ino = d.U64()
	r.Type = d.U32()
	r.Flags = optional32(d, "entry-add flags")
	if d.Err() == nil && r.Flags&^entryAddFlagsAll != 0 {
		d.Fail("entry-add flags %#x", r.Flags)
	}
}

// EntryAddReply carries what a creation inherits from the directory.
type EntryAddReply struct {
	DirMode uint32
	DirUID  uint32
	DirGID  uint32
	Cookie  uint64
	// Dir is the directory as the entry left it (zero for
	// EntryAddCheckName), for the creator's MakeReply.
	Dir Attr
	// DirDefaultACL is the directory's default ACL xattr (an optional
	// trailing field, empty when it has none): what the new inode
	// inherits.
	DirDefaultACL []byte
}

func (r *EntryAddReply) encode(e *codec.Encoder) {
	e.U32(r.DirMode)
	e.U32(r.DirUID)
	e.U32(r.DirGID)
	e.U64(r.Cookie)
	r.Dir.encode(e)
	if len(r.DirDefaultACL) > 0 {
		e.Bytes32(r.DirDefaultACL)
	}
}

func (r *EntryAddReply) decode(d *codec.Decoder) {
	r.DirMode = d.U32()
	r.DirUID = d.U32()
	r.DirGID = d.U32()
	r.Cookie = d.U64()
	r.Dir.decode(d)
	if d.Err() == nil && d.Remaining() > 0 {
		v := d.Bytes32(MaxXattrValueLen)
		if d.Err() == nil && len(v) == 0 {
			d.Fail("default ACL present as empty")
		}
		r.DirDefaultACL = bytes.Clone(v)
	}
}

// EntryRemoveRequest removes Name from Dir if it names Ino, for the
// coordinator of Txn (an unlink or rmdir). VictimUID is the inode's owner,
// for the sticky-directory rule; IsDir says whether it is a directory
// (the entry's type must agree, and Dir loses a link). CheckOnly asks
// only for the permission and entry checks, changing nothing: the
// coordinator uses it to report Linux's error when its own checks failed
// too (Linux checks the directory before the victim).
type EntryRemoveRequest struct {
	Txn       TxnID
	Watermark uint64
	Dir       uint64
	Name      string
	Ino       uint64
	VictimUID uint32
	IsDir     bool
	CheckOnly bool
}

func (r *EntryRemoveRequest) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U64(r.Watermark)
	e.U64(r.Dir)
	e.String16(r.Name)
	e.U64(r.Ino)
	e.U32(r.VictimUID)
	e.Bool(r.IsDir)
	e.Bool(r.CheckOnly)
}

func (r *EntryRemoveRequest) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.Watermark = d.U64()
	r.Dir = d.U64()
	r.Name = d.String16(decodeMaxName)
	r.Ino = d.U64()
	r.VictimUID = d.U32()
	r.IsDir = d.Bool()
	r.CheckOnly = d.Bool()
}

// Lock item kinds of a rename transaction.
const (
	// LockItemEntry locks name Name of directory Ino.
	LockItemEntry uint8 = 1
	// LockItemInode locks inode Ino (and, for a directory, its entries).
	LockItemInode uint8 = 2
	// LockItemRename is the cluster-wide directory-rename lock, kept by
	// the owner of the root's partition.
	LockItemRename uint8 = 3
)

// LockItem is one thing a transaction locks at a partition.
type LockItem struct {
	Kind uint8
	Ino  uint64
	Name string
}

func (x *LockItem) encode(e *codec.Encoder) {
	e.U8(x.Kind)
	e.U64(x.Ino)
	e.String16(x.Name)
}

func (x *LockItem) decode(d *codec.Decoder) {
	x.Kind = d.U8()
	x.Ino = d.U64()
	x.Name = d.String16(decodeMaxName)
	if d.Err() == nil && (x.Kind < LockItemEntry || x.Kind > LockItemRename) {
		d.Fail("lock item kind %d", x.Kind)
	}
}

// LockResult is what a lock collects for its item: for an entry, the
// inode and type it names (0 if absent) and the directory's attributes;
// for an inode, its attributes, whether it is an empty directory, its
// parent (directories) and whether it was removed.
type LockResult struct {
	Ino    uint64
	Type   uint32
	Attr   Attr
	Empty  bool
	Parent uint64
	// ACL is the locked inode's (or directory's) access ACL xattr, for
	// the coordinator's permission checks; empty when it has none.
	ACL []byte
}

func (x *LockResult) encode(e *codec.Encoder) {
	e.U64(x.Ino)
	e.U32(x.Type)
	x.Attr.encode(e)
	e.Bool(x.Empty)
	e.U64(x.Parent)
	e.Bytes32(x.ACL)
}

func (x *LockResult) decode(d *codec.Decoder) {
	x.Ino = d.U64()
	x.Type = d.U32()
	x.Attr.decode(d)
	x.Empty = d.Bool()
	x.Parent = d.U64()
	if v := d.Bytes32(MaxXattrValueLen); len(v) > 0 {
		x.ACL = bytes.Clone(v)
	}
}

const maxLockItems = 16

// TxLockRequest locks Items for Txn at the partition of the first item
// (all items of one request belong to one partition) and collects their
// state. A lock held by another transaction answers StatusLocked and
// takes nothing.
type TxLockRequest struct {
	Txn   TxnID
	Items []LockItem
}

func (r *TxLockRequest) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U16(uint16(len(r.Items)))
	for i := range r.Items {
		r.Items[i].encode(e)
	}
}

func (r *TxLockRequest) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	n := d.U16()
	if d.Err() == nil && n > maxLockItems {
		d.Fail("%d lock items, at most %d", n, maxLockItems)
		return
	}
	if n > 0 {
		r.Items = make([]LockItem, n)
	}
	for i := range r.Items {
		r.Items[i].decode(d)
	}
}

// TxLockReply is one LockResult per item, in order.
type TxLockReply struct{ Results []LockResult }

func (r *TxLockReply) encode(e *codec.Encoder) {
	e.U16(uint16(len(r.Results)))
	for i := range r.Results {
		r.Results[i].encode(e)
	}
}

func (r *TxLockReply) decode(d *codec.Decoder) {
	n := d.U16()
	if d.Err() == nil && n > maxLockItems {
		d.Fail("%d lock results, at most %d", n, maxLockItems)
		return
	}
	if n > 0 {
		r.Results = make([]LockResult, n)
	}
	for i := range r.Results {
		r.Results[i].decode(d)
	}
}

// Transaction update kinds (TxOp.Kind).
const (
	// TxEntrySet makes Name in directory Ino name Target (of Type), with a
	// new cookie, replacing what it named.
	TxEntrySet uint8 = 1
	// TxEntryDel removes Name from directory Ino.
	TxEntryDel uint8 = 2
	// TxDirTouch sets directory Ino's mtime and ctime and adds Delta to
	// its link count.
	TxDirTouch uint8 = 3
	// TxInodeTouch sets inode Ino's ctime and, if Target is not 0, makes
	// Target the directory's parent.
	TxInodeTouch uint8 = 4
	// TxInodeDrop removes a link of inode Ino (a directory loses all and
	// is marked removed); at zero links it is freed or kept as an orphan
	// while open.
	TxInodeDrop uint8 = 5
)

// TxOp is one update of a decided transaction at a participant.
type TxOp struct {
	Kind   uint8
	Ino    uint64
	Name   string
	Target uint64
	Type   uint32
	Delta  int32
}

func (x *TxOp) encode(e *codec.Encoder) {
	e.U8(x.Kind)
	e.U64(x.Ino)
	e.String16(x.Name)
	e.U64(x.Target)
	e.U32(x.Type)
	e.U32(uint32(x.Delta))
}

func (x *TxOp) decode(d *codec.Decoder) {
	x.Kind = d.U8()
	x.Ino = d.U64()
	x.Name = d.String16(decodeMaxName)
	x.Target = d.U64()
	x.Type = d.U32()
	x.Delta = int32(d.U32())
	if d.Err() == nil && (x.Kind < TxEntrySet || x.Kind > TxInodeDrop) {
		d.Fail("transaction op kind %d", x.Kind)
	}
}

const maxTxOps = 32

func encodeTxOps(e *codec.Encoder, ops []TxOp) {
	e.U16(uint16(len(ops)))
	for i := range ops {
		ops[i].encode(e)
	}
}

func decodeTxOps(d *codec.Decoder) []TxOp {
	n := d.U16()
	if d.Err() == nil && n > maxTxOps {
		d.Fail("%d transaction ops, at most %d", n, maxTxOps)
		return nil
	}
	if n == 0 || d.Err() != nil {
		return nil
	}
	ops := make([]TxOp, n)
	for i := range ops {
		ops[i].decode(d)
	}
	return ops
}

// TxApplyRequest applies Ops of decided transaction Txn at one partition
// and releases Txn's locks there, in one append. A partition that holds
// no lock of Txn has applied it already and answers OK. Now is the
// transaction's time (ctime, mtime).
type TxApplyRequest struct {
	Txn       TxnID
	Watermark uint64
	Partition uint32
	Now       Timespec
	Ops       []TxOp
}

func (r *TxApplyRequest) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U64(r.Watermark)
	e.U32(r.Partition)
	r.Now.encode(e)
	encodeTxOps(e, r.Ops)
}

func (r *TxApplyRequest) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.Watermark = d.U64()
	r.Partition = d.U32()
	r.Now.decode(d)
	r.Ops = decodeTxOps(d)
}

// TxRequest names a transaction at a partition (tx-abort: release its
// locks at Partition; tx-status: asked of the coordinator, Partition is
// the asker's).
type TxRequest struct {
	Txn       TxnID
	Partition uint32
}

func (r *TxRequest) encode(e *codec.Encoder) {
	r.Txn.encode(e)
	e.U32(r.Partition)
}

func (r *TxRequest) decode(d *codec.Decoder) {
	r.Txn.decode(d)
	r.Partition = d.U32()
}

// Transaction states (TxStatusReply.State).
const (
	// TxPending: the coordinator is still collecting; keep the locks.
	TxPending uint8 = 1
	// TxDecided: the decision is durable; the coordinator dispatches it.
	TxDecided uint8 = 2
	// TxAborted: it never will be decided; release its locks.
	TxAborted uint8 = 3
)

// TxStatusReply is a transaction's state at its coordinator.
type TxStatusReply struct{ State uint8 }

func (r *TxStatusReply) encode(e *codec.Encoder) { e.U8(r.State) }

func (r *TxStatusReply) decode(d *codec.Decoder) {
	r.State = d.U8()
	if d.Err() == nil && (r.State < TxPending || r.State > TxAborted) {
		d.Fail("transaction state %d", r.State)
	}
}

// GetParentReply is a directory's parent (the root is its own parent).
type GetParentReply struct{ Parent uint64 }

func (r *GetParentReply) encode(e *codec.Encoder) { e.U64(r.Parent) }
func (r *GetParentReply) decode(d *codec.Decoder) { r.Parent = d.U64() }
