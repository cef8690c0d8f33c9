package wire

import (
	"errors"
	"fmt"
	"syscall"
)

// Version is the version byte of every envelope and record of this package.
const Version = 1

// ErrMalformed is returned for a message or record that does not decode.
var ErrMalformed = errors.New("metadata/wire: malformed message")

// Op numbers the namespace service's RPCs. The namespace service owns
// 0x0100-0x01ff of a node's RPC op space (the chunk service 0x0200-0x02ff).
// Client ops are below 0x0180, node-to-node ops from 0x0180.
type Op uint16

// Client ops. Each names the node it goes to: the owner of the inode the
// request names (Ino), of the directory (Parent), or of the new inode's
// partition (PartitionForName(Parent, Name)) for creations.
const (
	OpNull        Op = 0x0100 // nothing; answers at once (round-trip probe). Any node.
	OpLookup      Op = 0x0101 // Parent's owner
	OpGetAttr     Op = 0x0102 // Ino's owner
	OpSetAttr     Op = 0x0103 // Ino's owner
	OpCreate      Op = 0x0104 // new inode's owner: regular, fifo, socket, char, block
	OpMkdir       Op = 0x0105 // new inode's owner
	OpSymlink     Op = 0x0106 // new inode's owner
	OpLink        Op = 0x0107 // Ino's owner
	OpUnlink      Op = 0x0108 // victim's owner (Parent's owner redirects when unknown)
	OpRmdir       Op = 0x0109 // victim's owner (Parent's owner redirects when unknown)
	OpRename      Op = 0x010a // source inode's owner (SrcParent's owner redirects)
	OpReadlink    Op = 0x010b // Ino's owner
	OpReadDir     Op = 0x010c // Ino's owner
	OpStatFS      Op = 0x010d // any node: its own capacity
	OpGetXattr    Op = 0x010e // Ino's owner
	OpSetXattr    Op = 0x010f // Ino's owner
	OpListXattr   Op = 0x0110 // Ino's owner
	OpRemoveXattr Op = 0x0111 // Ino's owner
	OpAccess      Op = 0x0112 // Ino's owner
	OpOpen        Op = 0x0113 // Ino's owner
	OpRelease     Op = 0x0114 // Ino's owner
	OpWriteCommit Op = 0x0115 // Ino's owner
	OpGetLk       Op = 0x0116 // Ino's owner
	OpSetLk       Op = 0x0117 // Ino's owner
	OpKeepAlive   Op = 0x0118 // every node the client holds opens or locks at
	// OpTmpfile makes an open regular file with no name (O_TMPFILE) in
	// Parent's partition: Parent's owner.
	OpTmpfile Op = 0x0119
	// OpTouchAtime records a read of Ino's data, which the service never
	// sees (the data path is one-sided RDMA): the owner sets atime to
	// its clock when relatime's rule says so (docs/metadata.md). Any
	// caller that may read the file, or holds it open, may ask; it never
	// changes ctime. Ino's owner.
	OpTouchAtime Op = 0x011a
	// OpOpenDir is opendir in one request: it registers an open of
	// directory Ino (as OpOpen with O_RDONLY|O_DIRECTORY, released by
	// OpRelease) and answers its attributes and the first page of its
	// listing, without updating atime (the client does that when the
	// program reads the page). Ino's owner.
	OpOpenDir Op = 0x011b
	// OpAppend places an O_APPEND write of Len bytes: the owner answers
	// the offset, the end of the file as it knows it (the committed size,
	// appends placed before and not yet committed, and the caller's own
	// uncommitted end, Known), and counts the range as placed, so that
	// appends from several clients never overlap. The caller then writes
	// the bytes there and commits them as any write (OpWriteCommit).
	// Ino's owner.
	OpAppend Op = 0x011c
)

// Node-to-node ops of the collect-dispatch protocols (docs/metadata.md).
const (
	// OpEntryAdd adds a directory entry if absent (or already naming the
	// same inode), for a creation or link coordinated by the inode's owner.
	OpEntryAdd Op = 0x0180
	// OpEntryRemove removes a directory entry if it names the given inode,
	// for an unlink or rmdir coordinated by the inode's owner.
	OpEntryRemove Op = 0x0181
	// OpTxLock takes a rename transaction's persistent locks at a partition
	// and returns what the coordinator collects.
	OpTxLock Op = 0x0182
	// OpTxApply applies a decided transaction's updates at a partition and
	// releases its locks there, in one append; idempotent.
	OpTxApply Op = 0x0183
	// OpTxAbort releases an undecided transaction's locks at a partition.
	OpTxAbort Op = 0x0184
	// OpTxStatus asks a transaction's coordinator whether it is pending,
	// decided or aborted (asked by a participant holding its locks).
	OpTxStatus Op = 0x0185
	// OpGetParent returns a directory's parent, for rename's loop check.
	OpGetParent Op = 0x0186
)

// ClientOps and PeerOps list the ops, for handler registration and tests.
var (
	ClientOps = []Op{OpNull, OpLookup, OpGetAttr, OpSetAttr, OpCreate, OpMkdir, OpSymlink, OpLink,
		OpUnlink, OpRmdir, OpRename, OpReadlink, OpReadDir, OpStatFS, OpGetXattr, OpSetXattr,
		OpListXattr, OpRemoveXattr, OpAccess, OpOpen, OpRelease, OpWriteCommit, OpGetLk, OpSetLk,
		OpKeepAlive, OpTmpfile, OpTouchAtime, OpOpenDir, OpAppend}
	PeerOps = []Op{OpEntryAdd, OpEntryRemove, OpTxLock, OpTxApply, OpTxAbort, OpTxStatus, OpGetParent}
)

var opNames = map[Op]string{
	OpNull: "null", OpLookup: "lookup", OpGetAttr: "getattr", OpSetAttr: "setattr",
	OpCreate: "create", OpMkdir: "mkdir", OpSymlink: "symlink", OpLink: "link",
	OpUnlink: "unlink", OpRmdir: "rmdir", OpRename: "rename", OpReadlink: "readlink",
	OpReadDir: "readdir", OpStatFS: "statfs", OpGetXattr: "getxattr", OpSetXattr: "setxattr",
	OpListXattr: "listxattr", OpRemoveXattr: "removexattr", OpAccess: "access", OpOpen: "open",
	OpRelease: "release", OpWriteCommit: "writecommit", OpGetLk: "getlk", OpSetLk: "setlk",
	OpKeepAlive: "keepalive", OpTmpfile: "tmpfile", OpTouchAtime: "touch-atime", OpOpenDir: "opendir", OpAppend: "append",
	OpEntryAdd: "entry-add", OpEntryRemove: "entry-remove", OpTxLock: "tx-lock",
	OpTxApply: "tx-apply", OpTxAbort: "tx-abort", OpTxStatus: "tx-status", OpGetParent: "get-parent",
}

func (o Op) String() string {
	if s, ok := opNames[o]; ok {
		return s
	}
	return fmt.Sprintf("Op(%#x)", uint16(o))
}

// Mutating reports whether the op changes state, so that it carries a
// request sequence and executes at most once. OpRelease is one: it ends
// one of the client's opens of the inode, and a repeat (an attempt whose
// answer was lost) would end another, freeing a removed file under its
// last open. So is OpAppend: a repeat would place the write a second
// time, leaving a hole.
func (o Op) Mutating() bool {
	switch o {
	case OpSetAttr, OpCreate, OpMkdir, OpSymlink, OpLink, OpUnlink, OpRmdir, OpRename,
		OpSetXattr, OpRemoveXattr, OpOpen, OpWriteCommit, OpTmpfile, OpOpenDir, OpRelease, OpAppend:
		return true
	}
	return false
}

// Status is a reply's outcome: 0, a Linux errno, or an octofs status.
type Status uint32

// StatusOK is success; the reply body follows.
const StatusOK Status = 0

// Octofs statuses. They sit above every errno so that one field carries
// both; clients handle them and never return them to programs.
const (
	// StatusWrongOwner: the node does not own the partition the request
	// names; ReplyHeader.Epoch is its map epoch. Refresh the map to at
	// least that epoch and retry at the owner.
	StatusWrongOwner Status = 0x10001
	// StatusRedirect: the request must be coordinated by the owner of
	// ReplyHeader.Ino (e.g. an unlink goes to the victim's owner); resend
	// it there with that inode as the hint.
	StatusRedirect Status = 0x10002
	// StatusNotReady: the node is still opening the partition; retry.
	StatusNotReady Status = 0x10003
	// StatusStaleIncarnation: the sender's incarnation is older than one
	// the node has already seen from the same sender: the message comes
	// from a dead process and is refused.
	StatusStaleIncarnation Status = 0x10004
	// StatusLocked: a node-to-node lock request met a lock of another
	// transaction; the coordinator releases its locks and tries again.
	StatusLocked Status = 0x10005
	// StatusBadRequest: the request does not decode or names nothing
	// sensible (a protocol error, not a POSIX one).
	StatusBadRequest Status = 0x10006
	// StatusInternal: the node failed (a log append failed, ...); EIO.
	StatusInternal Status = 0x10007
)

// Errno returns the errno a client reports for s: s itself for an errno,
// EIO for an octofs status that reaches a program.
func (s Status) Errno() syscall.Errno {
	if s > 0 && s < 4096 {
		return syscall.Errno(s)
	}
	return syscall.EIO
}

// IsErrno reports whether s is a Linux errno.
func (s Status) IsErrno() bool { return s > 0 && s < 4096 }

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusWrongOwner:
		return "wrong owner"
	case StatusRedirect:
		return "redirect"
	case StatusNotReady:
		return "not ready"
	case StatusStaleIncarnation:
		return "stale incarnation"
	case StatusLocked:
		return "locked"
	case StatusBadRequest:
		return "bad request"
	case StatusInternal:
		return "internal error"
	}
	if s.IsErrno() {
		return syscall.Errno(s).Error()
	}
	return fmt.Sprintf("Status(%#x)", uint32(s))
}

// FromErrno returns the status for an errno.
func FromErrno(e syscall.Errno) Status { return Status(e) }

// Limits the service applies (with Linux's errnos) and those the decoders
// apply (to stay safe).
const (
	// MaxNameLen is the longest directory entry name (ENAMETOOLONG past it).
	MaxNameLen = 255
	// MaxSymlinkLen is the longest symlink target (ENAMETOOLONG past it).
	MaxSymlinkLen = 4095
	// MaxXattrNameLen is the longest xattr name (ERANGE past it).
	MaxXattrNameLen = 255
	// MaxXattrValueLen is the largest xattr value (E2BIG past it).
	MaxXattrValueLen = 65536
	// MaxXattrTotal bounds one inode's xattr names and values together
	// (ENOSPC past it).
	MaxXattrTotal = 1 << 20
	// MaxGroups bounds the supplementary groups a request carries.
	MaxGroups = 65535

	decodeMaxName  = 4096
	decodeMaxValue = 1 << 20
	decodeMaxList  = 1 << 20
)

// File types in Mode (S_IFMT bits, Linux values).
const (
	ModeType    = syscall.S_IFMT
	ModeDir     = syscall.S_IFDIR
	ModeRegular = syscall.S_IFREG
	ModeSymlink = syscall.S_IFLNK
	ModeFIFO    = syscall.S_IFIFO
	ModeSocket  = syscall.S_IFSOCK
	ModeChar    = syscall.S_IFCHR
	ModeBlock   = syscall.S_IFBLK
	ModePerm    = 0o7777
	ModeSetuid  = syscall.S_ISUID
	ModeSetgid  = syscall.S_ISGID
	ModeSticky  = syscall.S_ISVTX
)

// Rename flags (renameat2(2)).
const (
	RenameNoReplace uint32 = 0x1
	RenameExchange  uint32 = 0x2
	RenameWhiteout  uint32 = 0x4
)

// Xattr flags (setxattr(2)).
const (
	XattrCreate  uint32 = 0x1
	XattrReplace uint32 = 0x2
)

// Access mask bits (access(2)).
const (
	AccessExec  uint32 = 1
	AccessWrite uint32 = 2
	AccessRead  uint32 = 4
)

// Open flags the service looks at (Linux values).
const (
	OpenAccessMode uint32 = syscall.O_ACCMODE
	OpenReadOnly   uint32 = syscall.O_RDONLY
	OpenWriteOnly  uint32 = syscall.O_WRONLY
	OpenReadWrite  uint32 = syscall.O_RDWR
	OpenCreate     uint32 = syscall.O_CREAT
	OpenExcl       uint32 = syscall.O_EXCL
	OpenTrunc      uint32 = syscall.O_TRUNC
	OpenAppend     uint32 = syscall.O_APPEND
	OpenDirectory  uint32 = syscall.O_DIRECTORY
	OpenNoFollow   uint32 = syscall.O_NOFOLLOW
	OpenNoAtime    uint32 = syscall.O_NOATIME
	OpenPath       uint32 = 0x200000 // O_PATH
)

// ReleaseTrimAhead, in ReleaseRequest.Flags (no open flag has the bit),
// says the releasing client had blocks allocated past what it wrote:
// when no open of the file remains, the owner frees the data past the
// file's size (see docs/metadata.md).
const ReleaseTrimAhead uint32 = 1 << 30

// ReleaseAllocated, in ReleaseRequest.Flags, says the releasing client
// had blocks allocated for the file that its size may not cover (a
// fallocate, even one that failed): the owner marks the inode
// InodeHasBlocks, so that those blocks are freed with it.
const ReleaseAllocated uint32 = 1 << 29

// ReadDirNoAtime, in ReadDirRequest.Flags, says the listing must not
// update the directory's atime (an opendir with O_NOATIME).
const ReadDirNoAtime uint32 = 1

// RelatimeDue reports whether a read at now updates an inode's atime
// under Linux's relatime rule: atime is not after mtime or ctime, or it
// is at least a day old.
func RelatimeDue(atime, mtime, ctime, now Timespec) bool {
	return !mtime.Before(atime) || !ctime.Before(atime) || now.Sec-atime.Sec >= RelatimeAge
}

// RelatimeAge is the age in seconds past which relatime updates atime
// whatever mtime and ctime say (Linux: one day).
const RelatimeAge = 24 * 60 * 60
