package fuse

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/client"
)

// node is one inode of the mount. It holds nothing but its place in
// go-fuse's tree: the inode number is its StableAttr.Ino, and everything
// else is asked of the cluster.
type node struct {
	fs.Inode
	fsys *FS

	// seen is what the kernel was last told of the inode's data version
	// (kernelSaw), for opens to tell whether its attribute cache is
	// behind the cluster; pages is the data version of the kernel's
	// cached pages of the file: the owner's answer to the open that last
	// let the kernel keep or drop them (pagesSet: there was one).
	seenMu   sync.Mutex
	seen     client.DataVersion
	pages    client.DataVersion
	pagesSet bool
}

// kernelSaw records that the kernel was given a, the inode's attributes.
func (n *node) kernelSaw(a *client.Attr) {
	n.seenMu.Lock()
	n.seen = client.DataVersionOf(*a)
	n.seenMu.Unlock()
}

// opened is for a buffered open (direct: O_DIRECT) whose owner answered
// a; it reports whether the kernel may keep the pages it cached of the
// file before (FOPEN_KEEP_CACHE).
//
// Close-to-open says the open sees what other mounts closed before it.
// The kernel keeps the attributes it was given for the attribute
// timeout, across opens, and bounds reads by the size it holds (a file
// another mount shrank kept its old size in fstat; one it grew read
// short): if a differs from what the kernel was last given, its
// attributes are dropped, so that it asks again (the client answers from
// the open's reply).
//
// The pages may stay when a is the answer the open that last kept or
// dropped them had: every change of a file's data by any client moves
// its data version (client.DataVersion; the client library keeps extent
// maps across opens by the same rule). An open that does not keep them
// drops them, so pages cached after it were read after the version it
// recorded. Writes through this mount keep the page cache right as they
// go, but their commit moves the version too, so the next open reads the
// file again: cheap and safe. An open through which a read is due to
// update atime drops them too: a read the page cache answers reaches
// nobody who could update it.
func (n *node) opened(a *client.Attr, direct, atimeDue bool) (keep bool) {
	v := client.DataVersionOf(*a)
	n.seenMu.Lock()
	stale := n.seen != v
	n.seen = v
	if !direct {
		keep = !atimeDue && n.pagesSet && n.pages == v
		n.pages, n.pagesSet = v, true
	}
	n.seenMu.Unlock()
	if stale {
		// A negative offset drops the attributes only; the open drops
		// the cached pages itself unless it keeps them.
		n.NotifyContent(-1, 0)
	}
	return keep
}

// The operations node implements; a missing one would silently fall back
// to go-fuse's default.
var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeAccesser       = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
)

func (n *node) ino() uint64 { return n.StableAttr().Ino }

func (n *node) cred(ctx context.Context) client.Cred { return n.fsys.creds.cred(ctx) }

// credMasked is the caller's credentials for a creation of mode, with
// the umask the kernel left to the mount (rawFS.Create), and the mode
// without it.
func (n *node) credMasked(ctx context.Context, mode uint32) (uint32, client.Cred) {
	mode, umask := splitUmask(mode)
	c := n.cred(ctx)
	c.Umask = umask
	return mode, c
}

func (n *node) fail(op string, err error) syscall.Errno { return errno(n.fsys.log, op, err) }

// failIno is fail for an operation that names the inode by number: the
// cluster answers ENOENT when the inode is gone (its last name went and it
// was freed, which the kernel, holding the number, cannot know). That is
// ESTALE to the kernel, on which it looks a path up again and retries
// once, so stat(2) of a name another mount replaced finds the new file.
func (n *node) failIno(op string, err error) syscall.Errno {
	if err == syscall.ENOENT {
		return syscall.ESTALE
	}
	return n.fail(op, err)
}

// fillAttr converts the client's attributes to FUSE's.
func fillAttr(a *client.Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Rdev = uint32(a.Rdev)
	out.Blksize = a.Blksize
	out.SetTimes(&a.Atime, &a.Mtime, &a.Ctime)
}

// fillStatx converts the client's attributes to FUSE's statx answer:
// stat(2)'s fields and the birth time when the owner recorded one.
func fillStatx(a *client.Attr, out *fuse.Statx) {
	out.Mask = unix.STATX_BASIC_STATS
	out.Ino = a.Ino
	out.Size = a.Size
	out.Blocks = a.Blocks
	out.Mode = uint16(a.Mode)
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.RdevMajor, out.RdevMinor = unix.Major(a.Rdev), unix.Minor(a.Rdev)
	out.Blksize = a.Blksize
	sx := func(t time.Time, to *fuse.SxTime) {
		to.Sec, to.Nsec = uint64(t.Unix()), uint32(t.Nanosecond())
	}
	sx(a.Atime, &out.Atime)
	sx(a.Mtime, &out.Mtime)
	sx(a.Ctime, &out.Ctime)
	if !a.Btime.IsZero() {
		sx(a.Btime, &out.Btime)
		out.Mask |= unix.STATX_BTIME
	}
}

// entry fills out and returns the go-fuse inode for a (found or made by
// this directory).
func (n *node) entry(ctx context.Context, a *client.Attr, out *fuse.EntryOut) *fs.Inode {
	ctx = detach(ctx)
	fillAttr(a, &out.Attr)
	out.SetEntryTimeout(n.fsys.o.EntryTimeout)
	out.SetAttrTimeout(n.fsys.o.AttrTimeout)
	out.Generation = a.Gen
	ch := n.NewInode(ctx, &node{fsys: n.fsys}, fs.StableAttr{Mode: a.Mode & syscall.S_IFMT, Ino: a.Ino, Gen: a.Gen})
	ch.Operations().(*node).kernelSaw(a)
	return ch
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	a, err := n.fsys.c.Lookup(ctx, n.cred(ctx), n.ino(), name)
	if err != nil {
		if err == syscall.ENOENT {
			out.SetEntryTimeout(n.fsys.o.NegativeTimeout)
		}
		return nil, n.fail("lookup", err)
	}
	return n.entry(ctx, &a, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a, e := n.getattr(ctx, f)
	if e != 0 {
		return e
	}
	fillAttr(&a, &out.Attr)
	out.SetTimeout(n.fsys.o.AttrTimeout)
	return 0
}

// Statx is what the kernel asks instead of Getattr when the caller of
// statx(2) wants more than stat(2) gives: here, the birth time.
func (n *node) Statx(ctx context.Context, f fs.FileHandle, flags uint32, mask uint32, out *fuse.StatxOut) syscall.Errno {
	a, e := n.getattr(ctx, f)
	if e != 0 {
		return e
	}
	fillStatx(&a, &out.Statx)
	out.SetTimeout(n.fsys.o.AttrTimeout)
	return 0
}

// getattr answers Getattr and Statx: through the open file when there is
// one (its unflushed writes count), else by inode.
func (n *node) getattr(ctx context.Context, f fs.FileHandle) (client.Attr, syscall.Errno) {
	ctx = detach(ctx)
	var a client.Attr
	var err error
	if h, ok := f.(*handle); ok {
		a, err = h.f.Attr(ctx)
	} else {
		a, err = n.fsys.c.GetAttr(ctx, n.cred(ctx), n.ino())
	}
	if err != nil {
		return a, n.failIno("getattr", err)
	}
	n.kernelSaw(&a)
	return a, 0
}

// ftime converts a FUSE time (seconds, nanoseconds) to a time.Time.
func ftime(sec uint64, nsec uint32) time.Time { return time.Unix(int64(sec), int64(nsec)) }

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	var s client.SetAttrIn
	v := in.Valid
	if v&fuse.FATTR_MODE != 0 {
		s.Valid |= client.SetMode
		s.Mode = in.Mode & 0o7777
		defer n.fsys.acls.drop(n.ino()) // the cluster rewrites the ACL's mask
	}
	if v&fuse.FATTR_UID != 0 {
		s.Valid |= client.SetUID
		s.UID = in.Uid
	}
	if v&fuse.FATTR_GID != 0 {
		s.Valid |= client.SetGID
		s.GID = in.Gid
	}
	switch {
	case v&fuse.FATTR_ATIME_NOW != 0:
		s.Valid |= client.SetAtimeNow
	case v&fuse.FATTR_ATIME != 0:
		s.Valid |= client.SetAtime
		s.Atime = ftime(in.Atime, in.Atimensec)
	}
	switch {
	case v&fuse.FATTR_MTIME_NOW != 0:
		s.Valid |= client.SetMtimeNow
	case v&fuse.FATTR_MTIME != 0:
		s.Valid |= client.SetMtime
		s.Mtime = ftime(in.Mtime, in.Mtimensec)
	}
	if v&fuse.FATTR_CTIME != 0 {
		s.Valid |= client.SetCtime
		s.Ctime = ftime(in.Ctime, in.Ctimensec)
	}
	if v&fuse.FATTR_KILL_SUIDGID != 0 {
		s.Valid |= client.SetKillSuidGid
	}
	cred := n.cred(ctx)
	h, _ := f.(*handle)
	if v&fuse.FATTR_SIZE != 0 {
		if h != nil {
			// ftruncate: the open file decides, not the inode's
			// permissions (a file opened for writing may be truncated
			// even if its mode no longer allows writing).
			if err := h.f.Truncate(ctx, in.Size); err != nil {
				return n.fail("truncate", err)
			}
		} else {
			s.Valid |= client.SetSize
			s.Size = in.Size
		}
	}
	var a client.Attr
	var err error
	switch {
	case s.Valid != 0:
		a, err = n.fsys.c.SetAttr(ctx, cred, n.ino(), s)
	case h != nil:
		a, err = h.f.Attr(ctx)
	default:
		a, err = n.fsys.c.GetAttr(ctx, cred, n.ino())
	}
	if err != nil {
		return n.failIno("setattr", err)
	}
	n.kernelSaw(&a)
	fillAttr(&a, &out.Attr)
	out.SetTimeout(n.fsys.o.AttrTimeout)
	return 0
}

// openFlags is what the client library takes of an open's flags.
func openFlags(flags uint32) int {
	return int(flags) &^ (syscall.O_CREAT | syscall.O_EXCL | syscall.O_NOCTTY)
}

// fuseOpenFlags are the FOPEN_ flags for an open file: O_DIRECT bypasses
// the kernel's page cache.
func fuseOpenFlags(flags uint32) uint32 {
	if flags&syscall.O_DIRECT != 0 {
		return fuse.FOPEN_DIRECT_IO
	}
	return 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	mode, cred := n.credMasked(ctx, mode)
	if mode&syscall.S_IFMT == 0 {
		mode |= syscall.S_IFREG
	}
	a, f, err := n.fsys.c.Create(ctx, cred, n.ino(), name, mode, int(flags))
	if err != nil {
		return nil, nil, 0, n.fail("create", err)
	}
	child := n.entry(ctx, &a, out)
	return child, newHandle(n.fsys, child.Operations().(*node), f), fuseOpenFlags(flags), 0
}

// Tmpfile answers open(2) with O_TMPFILE: a file with no name, which
// linkat(2) of the descriptor may name later (not with O_EXCL).
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	mode, cred := n.credMasked(ctx, mode)
	a, f, err := n.fsys.c.Tmpfile(ctx, cred, n.ino(), mode, int(flags)&^syscall.O_NOCTTY)
	if err != nil {
		return nil, nil, 0, n.fail("tmpfile", err)
	}
	child := n.entry(ctx, &a, out)
	return child, newHandle(n.fsys, child.Operations().(*node), f), fuseOpenFlags(flags), 0
}

func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	mode, cred := n.credMasked(ctx, mode)
	a, err := n.fsys.c.Mknod(ctx, cred, n.ino(), name, mode, uint64(dev))
	if err != nil {
		return nil, n.fail("mknod", err)
	}
	return n.entry(ctx, &a, out), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	mode, cred := n.credMasked(ctx, mode)
	a, err := n.fsys.c.Mkdir(ctx, cred, n.ino(), name, mode&0o7777)
	if err != nil {
		return nil, n.fail("mkdir", err)
	}
	return n.entry(ctx, &a, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	a, err := n.fsys.c.Symlink(ctx, n.cred(ctx), n.ino(), name, target)
	if err != nil {
		return nil, n.fail("symlink", err)
	}
	return n.entry(ctx, &a, out), 0
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	ino := target.EmbeddedInode().StableAttr().Ino
	a, err := n.fsys.c.Link(ctx, n.cred(ctx), ino, n.ino(), name)
	if err != nil {
		return nil, n.fail("link", err)
	}
	return n.entry(ctx, &a, out), 0
}

// childIno is the inode the kernel last looked name up as (it always
// looks a name up before it removes or renames it), or 0. The client
// sends the removal or rename straight to that inode's owner, which
// coordinates it, instead of to the directory's owner, which would
// redirect it there; a stale guess costs a redirect, never a wrong result.
func (n *node) childIno(name string) uint64 {
	if c := n.GetChild(name); c != nil {
		return c.StableAttr().Ino
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = detach(ctx)
	return n.fail("unlink", n.fsys.c.UnlinkKnown(ctx, n.cred(ctx), n.ino(), name, n.childIno(name)))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = detach(ctx)
	return n.fail("rmdir", n.fsys.c.RmdirKnown(ctx, n.cred(ctx), n.ino(), name, n.childIno(name)))
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	np := newParent.EmbeddedInode().StableAttr().Ino
	var replaced uint64 // the inode newName names, when the kernel knows it
	if p, ok := newParent.(*node); ok {
		replaced = p.childIno(newName)
	}
	return n.fail("rename", n.fsys.c.RenameKnown(ctx, n.cred(ctx), n.ino(), name, n.childIno(name), np, newName, replaced, flags))
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = detach(ctx)
	t, err := n.fsys.c.Readlink(ctx, n.cred(ctx), n.ino())
	if err != nil {
		return nil, n.failIno("readlink", err)
	}
	return []byte(t), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	cred := n.cred(ctx)
	f, err := n.fsys.c.Open(ctx, cred, n.ino(), openFlags(flags))
	if err == syscall.ESTALE || err == syscall.ENOENT {
		// Opening an inode by number: ENOENT means the inode is gone.
		return nil, 0, n.staleOpen(ctx, cred)
	}
	if err != nil {
		return nil, 0, n.fail("open", err)
	}
	a := f.Opened()
	fl := fuseOpenFlags(flags)
	if n.opened(&a, fl&fuse.FOPEN_DIRECT_IO != 0, f.AtimeDue()) {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	return newHandle(n.fsys, n, f), fl, 0
}

// staleOpen answers an open of an inode that was freed after the kernel
// looked it up (its last name went away meanwhile; a local file system
// would pin the inode, a cluster cannot). If the name the kernel found now
// names another inode (replaced by a rename, as editors and git do), the
// answer is ESTALE, on which the kernel looks the path up again and
// retries once; if the name is gone, ENOENT, which is what the open would
// have seen a moment later.
func (n *node) staleOpen(ctx context.Context, cred client.Cred) syscall.Errno {
	ctx = detach(ctx)
	name, parent := n.Parent()
	if parent == nil {
		return syscall.ESTALE
	}
	_, err := n.fsys.c.Lookup(ctx, cred, parent.StableAttr().Ino, name)
	if err == syscall.ENOENT {
		return syscall.ENOENT
	}
	return syscall.ESTALE
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	// One request: the directory's owner checks read permission (EACCES
	// and ENOTDIR as Linux's opendir), registers the open, so that a
	// removed directory stays answerable while open, and answers the
	// first page, which the first readdir returns (and updates atime
	// then: opening a directory does not).
	f, err := n.fsys.c.OpenDir(ctx, n.cred(ctx), n.ino(), int(flags))
	if err != nil {
		return nil, 0, n.fail("opendir", err)
	}
	return &dirHandle{n: n, f: f}, 0, 0
}

// Statfs answers from the last answer while it is younger than the
// attribute timeout: the cluster's answer costs a request to every node,
// and programs that watch free space (stress-ng calls statfs twice per
// file it removes) made it the cost of their loops. df may lag the
// cluster by that much, as it may lag another mount's writes anyway.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx = detach(ctx)
	fsys := n.fsys
	fsys.statfsMu.Lock()
	s := fsys.statfs
	if ttl := fsys.o.AttrTimeout; ttl <= 0 || time.Since(fsys.statfsAt) >= ttl {
		var err error
		if s, err = fsys.c.StatFS(ctx); err != nil {
			fsys.statfsMu.Unlock()
			return n.fail("statfs", err)
		}
		fsys.statfs, fsys.statfsAt = s, time.Now()
	}
	fsys.statfsMu.Unlock()
	out.Blocks, out.Bfree, out.Bavail = s.Blocks, s.Bfree, s.Bavail
	out.Files, out.Ffree = s.Files, s.Ffree
	out.Bsize, out.Frsize, out.NameLen = s.Bsize, s.Bsize, s.NameLen
	return 0
}

func (n *node) Access(ctx context.Context, mask uint32) syscall.Errno {
	ctx = detach(ctx)
	return n.failIno("access", n.fsys.c.Access(ctx, n.cred(ctx), n.ino(), mask))
}

// noACL reports whether name is a POSIX ACL on a mount with ACLs off
// (Options.NoACL): it neither stores nor answers them, since a stored
// ACL that nothing enforces would mislead (cp -a and tar carry on
// without them).
func (n *node) noACL(name string) bool {
	return n.fsys.o.NoACL && isACLXattr(name)
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	ctx = detach(ctx)
	if n.noACL(attr) {
		return 0, syscall.ENODATA
	}
	v, e := n.fsys.acls.getxattr(n.ino(), attr, func() ([]byte, syscall.Errno) {
		v, err := n.fsys.c.GetXattr(ctx, n.cred(ctx), n.ino(), attr)
		if err != nil {
			return nil, n.fail("getxattr", err)
		}
		return v, 0
	})
	if e != 0 {
		return 0, e
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	if n.noACL(attr) {
		return syscall.EOPNOTSUPP
	}
	if isACLXattr(attr) {
		defer n.fsys.acls.drop(n.ino())
	}
	return n.fail("setxattr", n.fsys.c.SetXattr(ctx, n.cred(ctx), n.ino(), attr, data, int(flags)))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	ctx = detach(ctx)
	names, err := n.fsys.c.ListXattr(ctx, n.cred(ctx), n.ino())
	if err != nil {
		return 0, n.fail("listxattr", err)
	}
	size := 0
	for _, s := range names {
		size += len(s) + 1
	}
	if len(dest) < size {
		return uint32(size), syscall.ERANGE
	}
	off := 0
	for _, s := range names {
		off += copy(dest[off:], s)
		dest[off] = 0
		off++
	}
	return uint32(size), 0
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx = detach(ctx)
	if n.noACL(attr) {
		return syscall.ENODATA
	}
	if isACLXattr(attr) {
		defer n.fsys.acls.drop(n.ino())
	}
	return n.fail("removexattr", n.fsys.c.RemoveXattr(ctx, n.cred(ctx), n.ino(), attr))
}
