package client

import (
	"context"
	"time"
)

// namespace is what the client needs from the namespace service: every
// operation sent to the inode's owner with the caller's credentials, retried
// at the new owner when the map moved, executed at most once. The
// production implementation wraps metadata/mdclient; tests use fakes.
//
// Errors are syscall.Errno values for what the server answered; anything
// else is a transport or protocol failure and the client reports EIO or
// ETIMEDOUT.
type namespace interface {
	Lookup(ctx context.Context, cred Cred, parent uint64, name string) (Attr, error)
	GetAttr(ctx context.Context, cred Cred, ino uint64) (Attr, error)
	// SetAttr applies in; a size change frees or zeroes the data beyond
	// the new size before the size is published.
	SetAttr(ctx context.Context, cred Cred, ino uint64, in SetAttrIn) (Attr, error)
	// Create makes a regular file in parent and registers an open of it
	// with flags, in one request: the creator may write a file whose mode
	// forbids it (open(2) with O_CREAT and mode 0444 gives a writable
	// descriptor), which a separate Open would refuse.
	// Create and Make also return the directory's attributes as the
	// entry left them, when the reply carries them (else nil).
	Create(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, flags int) (Attr, *Attr, error)
	// Tmpfile makes a regular file with no name in directory parent and
	// registers an open of it with flags (O_TMPFILE): it ends with its
	// last open unless Link names it first (not with O_EXCL).
	Tmpfile(ctx context.Context, cred Cred, parent uint64, mode uint32, flags int) (Attr, error)
	// Make creates an inode of any type in parent: a regular file, device,
	// fifo or socket (rdev for devices), a directory, or a symlink to
	// target. An existing name is EEXIST.
	Make(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, rdev uint64, target string) (Attr, *Attr, error)
	Link(ctx context.Context, cred Cred, ino, newParent uint64, newName string) (Attr, error)
	Unlink(ctx context.Context, cred Cred, parent uint64, name string) error
	Rmdir(ctx context.Context, cred Cred, parent uint64, name string) error
	Rename(ctx context.Context, cred Cred, parent uint64, name string, newParent uint64, newName string, flags uint32) error
	Readlink(ctx context.Context, cred Cred, ino uint64) (string, error)
	// ReadDir returns entries after cookie (0: from the start), at most
	// max of them, without "." and "..", and whether the listing ends
	// with them. The owner updates the directory's atime by relatime's
	// rule unless noAtime.
	ReadDir(ctx context.Context, cred Cred, ino, cookie uint64, max int, noAtime bool) ([]DirEntry, bool, error)
	// TouchAtime records a read of ino's data by cred, which the owner
	// never sees otherwise: it sets atime to its clock if relatime's
	// rule is due, and returns the attributes.
	TouchAtime(ctx context.Context, cred Cred, ino uint64) (Attr, error)
	GetXattr(ctx context.Context, cred Cred, ino uint64, name string) ([]byte, error)
	ListXattr(ctx context.Context, cred Cred, ino uint64) ([]string, error)
	SetXattr(ctx context.Context, cred Cred, ino uint64, name string, value []byte, flags int) error
	RemoveXattr(ctx context.Context, cred Cred, ino uint64, name string) error
	Access(ctx context.Context, cred Cred, ino uint64, mask uint32) error
	StatFS(ctx context.Context) (StatFS, error)

	// Open checks that cred may open ino with flags and registers the
	// open with the inode's owner (so an unlinked open file survives until
	// Release); O_TRUNC truncates a regular file, data included. It
	// returns the attributes after the open.
	Open(ctx context.Context, cred Cred, ino uint64, flags int) (Attr, error)
	// OpenDir is Open(ino, O_RDONLY|O_DIRECTORY|flags) and the first page
	// of the listing (at most max entries) in one request, without
	// updating atime; flags may hold O_NOATIME.
	OpenDir(ctx context.Context, cred Cred, ino uint64, flags int, max int) (Attr, []DirEntry, bool, error)
	// Release ends one registered open of ino made with flags.
	Release(ctx context.Context, ino uint64, flags int) error
	// reclaim registers again, at an owner that restarted, an open this
	// client held before (the file may have no name any more).
	reclaim(ctx context.Context, cred Cred, ino uint64, flags int) (Attr, error)
	// Commit records what this client wrote: the size grows to at least
	// size (never shrinks), and mtime and ctime are set to mtime.
	Commit(ctx context.Context, cred Cred, ino uint64, size uint64, mtime time.Time) (Attr, error)
	// Append places an O_APPEND write of n bytes: it returns the offset,
	// the end of the file as the owner knows it (the committed size and
	// the appends it placed before, of any client) or known, this
	// client's own end, whichever is larger, and counts the range as
	// taken. The write then goes there and is committed as any other.
	Append(ctx context.Context, cred Cred, ino uint64, n, known uint64) (uint64, error)
	// GetLk returns the first lock that conflicts with lk, or lk with
	// Type LockUnlock if none does.
	GetLk(ctx context.Context, ino uint64, lk Lock) (Lock, error)
	// SetLk takes or releases lk without waiting: a conflict is EAGAIN.
	SetLk(ctx context.Context, ino uint64, lk Lock) error
}

// dataIO is what the client needs from the data engine (dataplane's
// client side): one-sided reads and writes of a file's chunks at their
// owners, and making written ranges durable. It keeps extent maps under
// leases; the client never caches file bytes.
type dataIO interface {
	// ReadAt fills p with the file's bytes at off (holes read as zeros).
	// The caller keeps the range inside the file's size.
	ReadAt(ctx context.Context, ino uint64, p []byte, off uint64) error
	// WriteAt writes p at off, allocating blocks where needed.
	WriteAt(ctx context.Context, ino uint64, p []byte, off uint64) error
	// ReadV and WriteV are ReadAt and WriteAt of every vector, at once.
	ReadV(ctx context.Context, ino uint64, iov []IOVec) error
	WriteV(ctx context.Context, ino uint64, iov []IOVec) error
	// Reserve allocates the blocks a write of p at off needs, without
	// writing (a write kept behind meets ENOSPC when it is accepted).
	Reserve(ctx context.Context, ino uint64, p []byte, off uint64) error
	// Persist makes every range this client wrote to ino durable in the
	// owners' persistence domains.
	Persist(ctx context.Context, ino uint64) error
	// Allocate implements fallocate's modes on the data side (the
	// caller updates the size when the mode does not keep it).
	Allocate(ctx context.Context, ino uint64, mode uint32, off, length uint64) error
	// Seek returns the first offset in [off, end) that holds data (hole
	// false) or lies in a hole (hole true), and whether there is one;
	// this client's unpersisted writes are data.
	Seek(ctx context.Context, ino, off, end uint64, hole bool) (uint64, bool, error)
	// Forget drops what the engine caches about ino (extent maps), so
	// that the next read sees other clients' closed writes.
	Forget(ino uint64)
	// TakeAhead reports, once, whether the engine allocated blocks past
	// its writes to ino, which the owner frees at the last close.
	TakeAhead(ino uint64) bool
}
