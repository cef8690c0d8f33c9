package client

import (
	"os"
	"syscall"
	"time"
)

// Cred is the caller on whose behalf an operation runs. Every namespace
// request carries it and the inode's owner checks permissions with it, so
// a client cannot widen its rights by lying about a cached attribute.
type Cred struct {
	UID uint32
	GID uint32
	// Groups are the supplementary groups.
	Groups []uint32
	// Umask, when set, is the caller's file creation mask, for the
	// owner of a new inode to apply unless the directory has a default
	// ACL (which then rules instead, as on Linux file systems with POSIX
	// ACLs). Zero: the mode a creation passes is final.
	Umask uint32
}

// RootCred is uid 0, gid 0: the superuser.
var RootCred = Cred{}

// ProcessCred returns the credentials of the running process: its
// effective uid, gid and supplementary groups. It is the natural Cred for
// a program using the native API.
func ProcessCred() Cred {
	c := Cred{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if gs, err := os.Getgroups(); err == nil {
		for _, g := range gs {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	return c
}

// Mode bits are Linux's: the file type in S_IFMT (syscall.S_IFREG,
// S_IFDIR, ...) and the permission bits including setuid, setgid and
// sticky, as stat(2) reports them.
const (
	modeType = syscall.S_IFMT
	modePerm = 0o7777
)

// Attr is an inode's attributes, as stat(2) reports them.
type Attr struct {
	Ino uint64
	// Gen is the inode's generation: an (Ino, Gen) pair names one inode
	// forever, and a stale one answers ESTALE.
	Gen   uint64
	Mode  uint32
	Nlink uint32
	UID   uint32
	GID   uint32
	Rdev  uint64
	Size  uint64
	// Blocks counts 512-byte units allocated to the file.
	Blocks uint64
	// Blksize is the preferred I/O size.
	Blksize uint32
	Atime   time.Time
	Mtime   time.Time
	Ctime   time.Time
	Btime   time.Time
}

// IsDir reports whether the inode is a directory.
func (a *Attr) IsDir() bool { return a.Mode&modeType == syscall.S_IFDIR }

// IsRegular reports whether the inode is a regular file.
func (a *Attr) IsRegular() bool { return a.Mode&modeType == syscall.S_IFREG }

// IsSymlink reports whether the inode is a symbolic link.
func (a *Attr) IsSymlink() bool { return a.Mode&modeType == syscall.S_IFLNK }

// SetAttrMask says which fields of a SetAttrIn to apply.
type SetAttrMask uint32

// Fields of SetAttrIn. SetAtimeNow and SetMtimeNow are utimensat's
// UTIME_NOW (the server's clock); leaving a time out is UTIME_OMIT.
// SetHandle says the caller truncates through a descriptor open for
// writing (ftruncate), which needs that open instead of write permission;
// SetKillSuidGid clears setuid and setgid as a write would (FUSE's
// FATTR_KILL_SUIDGID). The bits are the namespace protocol's.
const (
	SetMode SetAttrMask = 1 << iota
	SetUID
	SetGID
	SetSize
	SetAtime
	SetMtime
	SetAtimeNow
	SetMtimeNow
	SetCtime
	SetHandle
	SetKillSuidGid
)

// SetAttrIn is a setattr request: chmod, chown, truncate and utimens in
// one, as FUSE delivers them.
type SetAttrIn struct {
	Valid SetAttrMask
	// Mode holds permission bits only; the file type never changes.
	Mode  uint32
	UID   uint32
	GID   uint32
	Size  uint64
	Atime time.Time
	Mtime time.Time
	Ctime time.Time
}

// DirEntry is one entry of a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	// Type is the entry's file type, in S_IFMT bits (0 if unknown).
	Type uint32
	// Cookie resumes a listing after this entry: pass it to ReadDir.
	Cookie uint64
	// Attr is the entry's inode's attributes when the listing carried
	// them (nil: ask with Lookup). The directory's owner gives them for
	// the inodes it holds, to a caller that may search the directory.
	Attr *Attr
}

// StatFS is the file system's capacity, summed over the cluster's nodes.
type StatFS struct {
	// Bsize is the block size the counts are in.
	Bsize  uint32
	Blocks uint64
	Bfree  uint64
	Bavail uint64
	Files  uint64
	Ffree  uint64
	// NameLen is the longest file name (255).
	NameLen uint32
}

// MaxNameLen is the longest name of a directory entry, in bytes.
const MaxNameLen = 255

// LockKind tells POSIX record locks from BSD whole-file locks: they are
// separate name spaces with different owners, as in Linux.
type LockKind uint8

const (
	// LockPOSIX is an fcntl(F_SETLK) record lock, owned by a process (FUSE's
	// lock owner): closing any descriptor of the file releases it.
	LockPOSIX LockKind = iota
	// LockFlock is a flock(2) whole-file lock, owned by an open file
	// description.
	LockFlock
)

// Lock types, as fcntl's l_type.
const (
	LockRead   = syscall.F_RDLCK
	LockWrite  = syscall.F_WRLCK
	LockUnlock = syscall.F_UNLCK
)

// Lock is an advisory lock on a byte range [Start, End] (End inclusive;
// LockEOF means to the end of the file, however far it grows).
type Lock struct {
	Kind LockKind
	// Type is LockRead, LockWrite or LockUnlock.
	Type int16
	// Owner identifies the holder within this client (FUSE's lock owner,
	// or an id the native API chooses per open file).
	Owner uint64
	Start uint64
	End   uint64
	// PID is reported by GetLk for a conflicting lock (0 if unknown).
	PID uint32
}

// LockEOF as Lock.End covers to the end of the file.
const LockEOF = ^uint64(0)

// Fallocate modes (fallocate(2)).
const (
	FallocKeepSize  = 0x01 // FALLOC_FL_KEEP_SIZE
	FallocPunchHole = 0x02 // FALLOC_FL_PUNCH_HOLE
	FallocZeroRange = 0x10 // FALLOC_FL_ZERO_RANGE
)

// Rename flags (renameat2(2)).
const (
	RenameNoReplace = 0x1 // RENAME_NOREPLACE
	RenameExchange  = 0x2 // RENAME_EXCHANGE
)

// Xattr flags (setxattr(2)).
const (
	XattrCreate  = 0x1 // XATTR_CREATE
	XattrReplace = 0x2 // XATTR_REPLACE
)
