package client

import (
	"context"
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// This file is the low-level inode API, the one the FUSE adapter uses:
// every call names inodes by number, carries the caller's credentials and
// returns a syscall.Errno on failure. Each is one request to the owner of
// the inode or directory concerned (Rename and cross-partition creates are
// coordinated by the servers), bounded by Config.OpTimeout.

// checkName refuses names no directory can hold: empty (ENOENT), longer
// than MaxNameLen (ENAMETOOLONG), holding '/' or NUL, or "." and ".." where
// an entry is created or removed (EINVAL, as the VFS would never send them).
func checkName(name string, creating bool) error {
	switch {
	case name == "":
		return syscall.ENOENT
	case len(name) > MaxNameLen:
		return syscall.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return syscall.EINVAL
	case creating && (name == "." || name == ".."):
		return syscall.EEXIST
	}
	return nil
}

// Lookup finds name in directory parent.
func (c *Client) Lookup(ctx context.Context, cred Cred, parent uint64, name string) (Attr, error) {
	if err := checkName(name, false); err != nil {
		return Attr{}, err
	}
	if a, ok := c.entries.get(entryKey{parent, name}); ok {
		if a2, ok := c.attrs.get(a.Ino); ok {
			return c.opens.overlay(a2), nil
		}
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, c.fail(ctx, "lookup", err)
	}
	a, err := c.ns.Lookup(octx, cred, parent, name)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			c.entries.drop(entryKey{parent, name})
		}
		return Attr{}, c.fail(ctx, "lookup", err)
	}
	c.entries.put(entryKey{parent, name}, a)
	c.attrs.put(a.Ino, a)
	return c.opens.overlay(a), nil
}

// GetAttr returns ino's attributes. For a file this client has written
// and not yet flushed, the size and mtime include those writes.
func (c *Client) GetAttr(ctx context.Context, cred Cred, ino uint64) (Attr, error) {
	if a, ok := c.fresh.take(ino); ok {
		return c.opens.overlay(a), nil
	}
	if a, ok := c.attrs.get(ino); ok {
		return c.opens.overlay(a), nil
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, c.fail(ctx, "getattr", err)
	}
	a, err := c.ns.GetAttr(octx, cred, ino)
	if err != nil {
		c.dropAttrs(ino)
		return Attr{}, c.fail(ctx, "getattr", err)
	}
	c.attrs.put(ino, a)
	return c.opens.overlay(a), nil
}

// SetAttr changes ino's attributes: chmod, chown, utimens and truncate
// (SetSize) in one request, as FUSE's setattr delivers them. Before a size
// change this client's unflushed writes to the file are flushed, so that
// none lands beyond the new end afterwards.
func (c *Client) SetAttr(ctx context.Context, cred Cred, ino uint64, in SetAttrIn) (Attr, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, c.fail(ctx, "setattr", err)
	}
	c.dropAttrs(ino)
	var a Attr
	// Unflushed writes are committed first when the size or the mtime
	// changes: no write may land beyond a new end afterwards, and the
	// commit of earlier writes must not overwrite an mtime set after them
	// (cp -a and tar write, then set the times, then close).
	if oi := c.opens.get(ino); oi != nil && in.Valid&(SetSize|SetMtime|SetMtimeNow) != 0 {
		oi.mu.Lock()
		if err = c.flushLocked(octx, oi); err == nil {
			if a, err = c.ns.SetAttr(octx, cred, ino, in); err == nil {
				oi.size, oi.committed = a.Size, a
				c.truncated(ino, in.Valid&SetSize != 0)
			}
		}
		oi.mu.Unlock()
	} else {
		a, err = c.ns.SetAttr(octx, cred, ino, in)
		if err == nil {
			c.truncated(ino, in.Valid&SetSize != 0)
		}
	}
	if err != nil {
		return Attr{}, c.fail(ctx, "setattr", err)
	}
	c.attrs.put(ino, a)
	return c.opens.overlay(a), nil
}

// KillPrivs clears the setuid and setgid bits of ino as a write by cred
// does (FUSE's FUSE_WRITE_KILL_SUIDGID, which the kernel sets on every
// write of a caller without CAP_FSETID, whatever the file's mode). It asks
// the owner unless ino is open in this client with a mode, as this client
// last learnt it, that has neither bit: most files never have them, and a
// request per write made non-root writers several times slower. A bit set
// through another client since this one learnt the mode is cleared by the
// commit of the writes instead (at close or fsync), as the consistency
// model allows for attributes. It reports whether it asked the owner,
// after which the caller's cached mode may be out of date.
func (c *Client) KillPrivs(ctx context.Context, cred Cred, ino uint64) (asked bool, err error) {
	if oi := c.opens.get(ino); oi != nil {
		if m := oi.mode.Load(); m != 0 && m&(syscall.S_ISUID|syscall.S_ISGID) == 0 {
			return false, nil
		}
	}
	_, err = c.SetAttr(ctx, cred, ino, SetAttrIn{Valid: SetKillSuidGid})
	return true, err
}

// truncated forgets the extents of ino cached for the data path after a
// request that may have changed its size (set) returned: the owner freed
// the blocks past the new end, and a read through their extents would
// show the bytes they held, a write through them would be lost.
func (c *Client) truncated(ino uint64, set bool) {
	if set {
		c.data.Forget(ino)
	}
}

// Create makes a regular file and opens it with flags. An existing name
// is EEXIST whether or not flags hold O_EXCL: the FUSE kernel and OpenFile
// look a plain O_CREAT name up first.
func (c *Client) Create(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, flags int) (Attr, *File, error) {
	if err := checkName(name, true); err != nil {
		return Attr{}, nil, err
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, nil, c.fail(ctx, "create", err)
	}
	flags &^= syscall.O_TRUNC | syscall.O_CREAT | syscall.O_EXCL
	gen := c.fresh.gen(parent)
	a, dir, err := c.ns.Create(octx, cred, parent, name, syscall.S_IFREG|mode&modePerm, flags)
	c.changedDir(parent, dir, gen)
	if err != nil {
		return Attr{}, nil, c.fail(ctx, "create", err)
	}
	c.entries.put(entryKey{parent, name}, a)
	c.attrs.put(a.Ino, a)
	return a, c.newFile(cred, a, flags), nil
}

// Tmpfile makes a regular file with no name in directory dir, open with
// flags, as open(2) with O_TMPFILE does: flags must allow writing, and
// the file ends with its last close unless Link gives it a name first,
// which O_EXCL forbids.
func (c *Client) Tmpfile(ctx context.Context, cred Cred, dir uint64, mode uint32, flags int) (Attr, *File, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, nil, c.fail(ctx, "tmpfile", err)
	}
	flags &^= syscall.O_TRUNC | syscall.O_CREAT | syscall.O_DIRECTORY | unix.O_TMPFILE
	a, err := c.ns.Tmpfile(octx, cred, dir, mode&modePerm, flags)
	if err != nil {
		return Attr{}, nil, c.fail(ctx, "tmpfile", err)
	}
	c.attrs.put(a.Ino, a)
	return a, c.newFile(cred, a, flags&^syscall.O_EXCL), nil
}

// changedDir records that a request changed directory ino: what the
// caches held of it goes, and dir, its attributes as the reply gave them
// (nil if it did not), are kept for the next GetAttr, unless another
// change of ino overtook the request (gen is fresh.gen(ino) from before
// it was sent).
func (c *Client) changedDir(ino uint64, dir *Attr, gen uint64) {
	c.attrs.drop(ino)
	if dir == nil {
		c.fresh.drop(ino)
		return
	}
	c.fresh.put(ino, *dir, gen)
}

// Mknod makes a regular file, device, fifo or socket (mode's type bits
// say which; rdev is the device number).
func (c *Client) Mknod(ctx context.Context, cred Cred, parent uint64, name string, mode uint32, rdev uint64) (Attr, error) {
	switch mode & modeType {
	case 0:
		mode |= syscall.S_IFREG
	case syscall.S_IFREG, syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK:
	default:
		return Attr{}, syscall.EINVAL
	}
	return c.make(ctx, "mknod", cred, parent, name, mode&(modeType|modePerm), rdev, "")
}

// Mkdir makes a directory.
func (c *Client) Mkdir(ctx context.Context, cred Cred, parent uint64, name string, mode uint32) (Attr, error) {
	return c.make(ctx, "mkdir", cred, parent, name, syscall.S_IFDIR|mode&modePerm, 0, "")
}

// Symlink makes a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, cred Cred, parent uint64, name, target string) (Attr, error) {
	if target == "" {
		return Attr{}, syscall.ENOENT
	}
	if len(target) > maxSymlinkLen {
		return Attr{}, syscall.ENAMETOOLONG
	}
	return c.make(ctx, "symlink", cred, parent, name, syscall.S_IFLNK|0o777, 0, target)
}

// maxSymlinkLen is the longest symlink target (PATH_MAX minus the NUL).
const maxSymlinkLen = 4095

func (c *Client) make(ctx context.Context, op string, cred Cred, parent uint64, name string, mode uint32, rdev uint64, target string) (Attr, error) {
	if err := checkName(name, true); err != nil {
		return Attr{}, err
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, c.fail(ctx, op, err)
	}
	gen := c.fresh.gen(parent)
	a, dir, err := c.ns.Make(octx, cred, parent, name, mode, rdev, target)
	c.changedDir(parent, dir, gen)
	if err != nil {
		return Attr{}, c.fail(ctx, op, err)
	}
	c.entries.put(entryKey{parent, name}, a)
	c.attrs.put(a.Ino, a)
	return a, nil
}

// Link makes newName in newParent another name of ino.
func (c *Client) Link(ctx context.Context, cred Cred, ino, newParent uint64, newName string) (Attr, error) {
	if err := checkName(newName, true); err != nil {
		return Attr{}, err
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return Attr{}, c.fail(ctx, "link", err)
	}
	a, err := c.ns.Link(octx, cred, ino, newParent, newName)
	c.dropAttrs(newParent)
	c.dropAttrs(ino)
	if err != nil {
		return Attr{}, c.fail(ctx, "link", err)
	}
	c.entries.put(entryKey{newParent, newName}, a)
	c.attrs.put(a.Ino, a)
	return c.opens.overlay(a), nil
}

// Unlink removes name (not a directory) from parent.
func (c *Client) Unlink(ctx context.Context, cred Cred, parent uint64, name string) error {
	return c.remove(ctx, "unlink", cred, parent, name, 0)
}

// Rmdir removes the empty directory name from parent.
func (c *Client) Rmdir(ctx context.Context, cred Cred, parent uint64, name string) error {
	return c.remove(ctx, "rmdir", cred, parent, name, 0)
}

// UnlinkKnown is Unlink for a caller that knows which inode name names
// (the FUSE kernel looks a name up before it removes it): the request goes
// straight to ino's owner, which coordinates the removal, instead of going
// to the directory's owner and being redirected there, one round trip
// fewer when the two are different nodes. The outcome is Unlink's: if
// name has come to name another inode the servers redirect to it, and if
// ino is gone the request is made again without it.
func (c *Client) UnlinkKnown(ctx context.Context, cred Cred, parent uint64, name string, ino uint64) error {
	return c.remove(ctx, "unlink", cred, parent, name, ino)
}

// RmdirKnown is Rmdir for a caller that knows the directory's inode, as
// UnlinkKnown.
func (c *Client) RmdirKnown(ctx context.Context, cred Cred, parent uint64, name string, ino uint64) error {
	return c.remove(ctx, "rmdir", cred, parent, name, ino)
}

// knownRouter is implemented by namespaces that can send a removal or a
// rename straight to the owner of the inode a name is known to name
// (ino); a namespace without one takes the name alone.
type knownRouter interface {
	// RemoveKnown also returns the directory's attributes as the
	// removal left them, when the reply has them (else nil).
	RemoveKnown(ctx context.Context, cred Cred, parent uint64, name string, ino uint64, dir bool) (*Attr, error)
	RenameKnown(ctx context.Context, cred Cred, parent uint64, name string, ino, newParent uint64, newName string, flags uint32) error
}

// known runs withIno when ino is known and the namespace routes by it,
// else without; a known inode that is gone (ENOENT: the name may name
// another inode by now) falls back to without.
func (c *Client) known(ino uint64, withIno func(knownRouter) error, without func() error) error {
	r, ok := c.ns.(knownRouter)
	if ino == 0 || !ok {
		return without()
	}
	if err := withIno(r); !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return without()
}

func (c *Client) remove(ctx context.Context, op string, cred Cred, parent uint64, name string, ino uint64) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	if name == "." || name == ".." {
		if op == "rmdir" && name == "." {
			return syscall.EINVAL
		}
		return syscall.ENOTEMPTY
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return c.fail(ctx, op, err)
	}
	c.forgetEntry(parent, name)
	c.dropAttrs(ino) // the inode the caller knows: its link count and ctime change
	dir := op == "rmdir"
	gen := c.fresh.gen(parent)
	var dirAttr *Attr
	err = c.known(ino, func(r knownRouter) error {
		var err error
		dirAttr, err = r.RemoveKnown(octx, cred, parent, name, ino, dir)
		return err
	}, func() error {
		dirAttr = nil
		if dir {
			return c.ns.Rmdir(octx, cred, parent, name)
		}
		return c.ns.Unlink(octx, cred, parent, name)
	})
	if err == nil {
		// As after a creation: the kernel asks for the directory next.
		c.changedDir(parent, dirAttr, gen)
	}
	return c.fail(ctx, op, err)
}

// forgetEntry drops a name and the attributes of the inode it named and
// of its directory from the caches: removing or renaming it changes their
// link counts and times.
func (c *Client) forgetEntry(parent uint64, name string) {
	if a, ok := c.entries.get(entryKey{parent, name}); ok {
		c.dropAttrs(a.Ino)
	}
	c.entries.drop(entryKey{parent, name})
	c.dropAttrs(parent)
}

// Rename moves name in parent to newName in newParent; flags are
// renameat2's RenameNoReplace or RenameExchange.
func (c *Client) Rename(ctx context.Context, cred Cred, parent uint64, name string, newParent uint64, newName string, flags uint32) error {
	return c.RenameKnown(ctx, cred, parent, name, 0, newParent, newName, 0, flags)
}

// RenameKnown is Rename for a caller that knows the inode name names
// (ino): the rename is coordinated by ino's owner from the start, as
// UnlinkKnown. replaced, if not 0, is the inode newName names now, as the
// caller knows it: what the client keeps of its attributes is dropped
// too, since it loses a link (an fstat through a descriptor open on it
// says so at once).
func (c *Client) RenameKnown(ctx context.Context, cred Cred, parent uint64, name string, ino, newParent uint64, newName string, replaced uint64, flags uint32) error {
	if err := checkName(name, false); err != nil {
		return err
	}
	if err := checkName(newName, false); err != nil {
		return err
	}
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	if name == "." || name == ".." || newName == "." || newName == ".." {
		return syscall.EBUSY
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return c.fail(ctx, "rename", err)
	}
	c.forgetEntry(parent, name)
	c.forgetEntry(newParent, newName)
	c.dropAttrs(ino) // the inode the caller knows: its ctime (a directory's parent) changes
	c.dropAttrs(replaced)
	withIno := func(r knownRouter) error {
		return r.RenameKnown(octx, cred, parent, name, ino, newParent, newName, flags)
	}
	err = c.known(ino, withIno, func() error { return c.ns.Rename(octx, cred, parent, name, newParent, newName, flags) })
	return c.fail(ctx, "rename", err)
}

// Readlink returns a symlink's target.
func (c *Client) Readlink(ctx context.Context, cred Cred, ino uint64) (string, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return "", c.fail(ctx, "readlink", err)
	}
	t, err := c.ns.Readlink(octx, cred, ino)
	return t, c.fail(ctx, "readlink", err)
}

// ReadDir returns up to max entries of directory ino after cookie (0: from
// the start), in cookie order, without "." and "..". An empty result ends
// the listing. Entries added during a listing may or may not appear;
// removed ones do not; every other entry appears exactly once.
func (c *Client) ReadDir(ctx context.Context, cred Cred, ino, cookie uint64, max int) ([]DirEntry, error) {
	ents, _, err := c.ReadDirPage(ctx, cred, ino, cookie, max)
	return ents, err
}

// ReadDirPage is ReadDir that also reports whether the listing ends with
// this page, which saves the request that would return nothing.
func (c *Client) ReadDirPage(ctx context.Context, cred Cred, ino, cookie uint64, max int) ([]DirEntry, bool, error) {
	return c.readDirPage(ctx, cred, ino, cookie, max, c.noAtime)
}

func (c *Client) readDirPage(ctx context.Context, cred Cred, ino, cookie uint64, max int, noAtime bool) ([]DirEntry, bool, error) {
	if max <= 0 {
		max = defaultReadDirBatch
	}
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, false, c.fail(ctx, "readdir", err)
	}
	ents, eof, err := c.ns.ReadDir(octx, cred, ino, cookie, max, noAtime)
	if err != nil {
		return nil, false, c.fail(ctx, "readdir", err)
	}
	if !noAtime {
		// The listing may have moved the directory's atime.
		c.dropAttrs(ino)
	}
	return c.overlayEntries(ents), eof, nil
}

// overlayEntries adds this client's unflushed writes to the attributes a
// listing carried, as GetAttr does.
func (c *Client) overlayEntries(ents []DirEntry) []DirEntry {
	for i := range ents {
		if a := ents[i].Attr; a != nil {
			*a = c.opens.overlay(*a)
		}
	}
	return ents
}

// defaultReadDirBatch is how many entries one ReadDir asks for when the
// caller does not say.
const defaultReadDirBatch = 512

// StatFS returns the cluster's capacity: the sum over its nodes.
func (c *Client) StatFS(ctx context.Context) (StatFS, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return StatFS{}, c.fail(ctx, "statfs", err)
	}
	s, err := c.ns.StatFS(octx)
	return s, c.fail(ctx, "statfs", err)
}

// GetXattr returns the value of extended attribute name.
func (c *Client) GetXattr(ctx context.Context, cred Cred, ino uint64, name string) ([]byte, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, c.fail(ctx, "getxattr", err)
	}
	v, err := c.ns.GetXattr(octx, cred, ino, name)
	return v, c.fail(ctx, "getxattr", err)
}

// ListXattr returns the names of ino's extended attributes.
func (c *Client) ListXattr(ctx context.Context, cred Cred, ino uint64) ([]string, error) {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return nil, c.fail(ctx, "listxattr", err)
	}
	v, err := c.ns.ListXattr(octx, cred, ino)
	return v, c.fail(ctx, "listxattr", err)
}

// SetXattr sets extended attribute name; flags are XattrCreate or
// XattrReplace.
func (c *Client) SetXattr(ctx context.Context, cred Cred, ino uint64, name string, value []byte, flags int) error {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return c.fail(ctx, "setxattr", err)
	}
	c.dropAttrs(ino)
	return c.fail(ctx, "setxattr", c.ns.SetXattr(octx, cred, ino, name, value, flags))
}

// RemoveXattr removes extended attribute name.
func (c *Client) RemoveXattr(ctx context.Context, cred Cred, ino uint64, name string) error {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return c.fail(ctx, "removexattr", err)
	}
	c.dropAttrs(ino)
	return c.fail(ctx, "removexattr", c.ns.RemoveXattr(octx, cred, ino, name))
}

// Access checks whether cred may access ino with mask (R_OK, W_OK, X_OK
// bits; 0 checks existence).
func (c *Client) Access(ctx context.Context, cred Cred, ino uint64, mask uint32) error {
	octx, cancel, err := c.op(ctx)
	defer cancel()
	if err != nil {
		return c.fail(ctx, "access", err)
	}
	return c.fail(ctx, "access", c.ns.Access(octx, cred, ino, mask))
}
