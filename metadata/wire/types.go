package wire

import (
	"fmt"
	"slices"
	"time"

	"github.com/octofs/octofs/internal/codec"
)

// Cred is the caller on whose behalf a request runs: the service checks
// permissions with it.
type Cred struct {
	UID uint32
	GID uint32
	// Groups are the supplementary groups.
	Groups []uint32
}

// InGroup reports whether gid is the caller's group or one of its
// supplementary groups.
func (c *Cred) InGroup(gid uint32) bool {
	return c.GID == gid || slices.Contains(c.Groups, gid)
}

// IsRoot reports whether the caller is the superuser (the capabilities
// CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and CAP_FSETID).
func (c *Cred) IsRoot() bool { return c.UID == 0 }

func (c *Cred) encode(e *codec.Encoder) {
	e.U32(c.UID)
	e.U32(c.GID)
	e.U32s(c.Groups)
}

func (c *Cred) decode(d *codec.Decoder) {
	c.UID = d.U32()
	c.GID = d.U32()
	c.Groups = d.U32s(MaxGroups)
}

// Timespec is a time with nanoseconds, as stat(2) reports it. Seconds are
// signed so that times before 1970 survive.
type Timespec struct {
	Sec  int64
	Nsec uint32
}

// TimespecOf converts a time.
func TimespecOf(t time.Time) Timespec {
	return Timespec{Sec: t.Unix(), Nsec: uint32(t.Nanosecond())}
}

// Time converts to a time.Time.
func (t Timespec) Time() time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }

// Before reports whether t is earlier than u.
func (t Timespec) Before(u Timespec) bool {
	return t.Sec < u.Sec || (t.Sec == u.Sec && t.Nsec < u.Nsec)
}

func (t Timespec) encode(e *codec.Encoder) {
	e.I64(t.Sec)
	e.U32(t.Nsec)
}

func (t *Timespec) decode(d *codec.Decoder) {
	t.Sec = d.I64()
	t.Nsec = d.U32()
	if d.Err() == nil && t.Nsec >= 1e9 {
		d.Fail("nanoseconds %d out of range", t.Nsec)
	}
}

// Attr is an inode's attributes, as stat(2) reports them.
type Attr struct {
	Ino uint64
	// Gen is the inode's generation: (Ino, Gen) names one inode forever;
	// a request naming a stale generation is ESTALE.
	Gen   uint64
	Mode  uint32
	Nlink uint32
	UID   uint32
	GID   uint32
	Rdev  uint64
	// Size is the file's size (the target's length for a symlink).
	Size uint64
	// Blocks counts 512-byte units; the namespace service estimates it
	// from Size (the chunk service knows the real allocation).
	Blocks  uint64
	Blksize uint32
	Atime   Timespec
	Mtime   Timespec
	Ctime   Timespec
	Btime   Timespec
}

// IsDir reports whether the attributes are a directory's.
func (a Attr) IsDir() bool { return a.Mode&ModeType == ModeDir }

// AttrSize is the size of an encoded Attr (fixed).
const AttrSize = 108

func (a *Attr) encode(e *codec.Encoder) {
	e.U64(a.Ino)
	e.U64(a.Gen)
	e.U32(a.Mode)
	e.U32(a.Nlink)
	e.U32(a.UID)
	e.U32(a.GID)
	e.U64(a.Rdev)
	e.U64(a.Size)
	e.U64(a.Blocks)
	e.U32(a.Blksize)
	a.Atime.encode(e)
	a.Mtime.encode(e)
	a.Ctime.encode(e)
	a.Btime.encode(e)
}

func (a *Attr) decode(d *codec.Decoder) {
	a.Ino = d.U64()
	a.Gen = d.U64()
	a.Mode = d.U32()
	a.Nlink = d.U32()
	a.UID = d.U32()
	a.GID = d.U32()
	a.Rdev = d.U64()
	a.Size = d.U64()
	a.Blocks = d.U64()
	a.Blksize = d.U32()
	a.Atime.decode(d)
	a.Mtime.decode(d)
	a.Ctime.decode(d)
	a.Btime.decode(d)
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	// Type is the entry's file type in S_IFMT bits.
	Type uint32
	// Cookie resumes a listing after this entry.
	Cookie uint64
	// HasAttr says Attr is the entry's inode's attributes, which the
	// directory's owner gives for the inodes it holds when the caller
	// may search the directory (READDIRPLUS, ls -l): the others take a
	// lookup.
	HasAttr bool
	Attr    Attr
}

// Lock kinds: POSIX record locks (fcntl) and BSD whole-file locks (flock)
// are separate name spaces, as in Linux.
const (
	LockPOSIX uint8 = 0
	LockFlock uint8 = 1
)

// Lock types (fcntl's l_type values).
const (
	LockRead   uint8 = 0 // F_RDLCK
	LockWrite  uint8 = 1 // F_WRLCK
	LockUnlock uint8 = 2 // F_UNLCK
)

// LockEOF as Lock.End covers to the end of the file, however far it grows.
const LockEOF = ^uint64(0)

// Lock is an advisory lock on bytes [Start, End] (End inclusive).
type Lock struct {
	Kind uint8
	Type uint8
	// Owner identifies the holder within its client (FUSE's lock owner).
	// The service scopes it by the client's id.
	Owner uint64
	Start uint64
	End   uint64
	// PID is reported for a conflicting lock.
	PID uint32
}

func (l *Lock) encode(e *codec.Encoder) {
	e.U8(l.Kind)
	e.U8(l.Type)
	e.U64(l.Owner)
	e.U64(l.Start)
	e.U64(l.End)
	e.U32(l.PID)
}

func (l *Lock) decode(d *codec.Decoder) {
	l.Kind = d.U8()
	l.Type = d.U8()
	l.Owner = d.U64()
	l.Start = d.U64()
	l.End = d.U64()
	l.PID = d.U32()
	if d.Err() == nil && (l.Kind > LockFlock || l.Type > LockUnlock || l.End < l.Start) {
		d.Fail("lock kind %d type %d range [%d,%d]", l.Kind, l.Type, l.Start, l.End)
	}
}

// TxnID names a cross-partition transaction: the partition whose log
// holds the coordinator's intent or decision, and a sequence number that
// partition never reuses (it survives restarts, see docs/metadata.md).
type TxnID struct {
	Partition uint32
	Seq       uint64
}

// IsZero reports whether id is unset.
func (id TxnID) IsZero() bool { return id == TxnID{} }

func (id TxnID) String() string { return fmt.Sprintf("txn %d/%d", id.Partition, id.Seq) }

func (id TxnID) encode(e *codec.Encoder) {
	e.U32(id.Partition)
	e.U64(id.Seq)
}

func (id *TxnID) decode(d *codec.Decoder) {
	id.Partition = d.U32()
	id.Seq = d.U64()
}
