package mdclient

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/internal/sat"
	"github.com/octofs/octofs/metadata/wire"
)

// Null sends a null request to node and waits for its answer: a round
// trip through the RPC layer and the service's dispatch, nothing else.
func (c *Client) Null(ctx context.Context, node cluster.NodeID) error {
	return c.call(ctx, wire.OpNull, wire.Cred{}, target{node: node}, &wire.Empty{}, &wire.Empty{}, nil)
}

// Lookup returns the attributes of name in directory parent ("." and
// ".." included). It asks the directory's owner, then, if the inode lives
// on another node, the inode's owner: one or two round trips.
func (c *Client) Lookup(ctx context.Context, cred wire.Cred, parent uint64, name string) (wire.Attr, error) {
	ino, _, attr, ok, err := c.LookupEntry(ctx, cred, parent, name)
	if err != nil {
		return wire.Attr{}, err
	}
	if ok {
		return attr, nil
	}
	return c.GetAttr(ctx, cred, ino, 0)
}

// LookupEntry asks only the directory's owner: the entry's inode and
// type, and its attributes when that node owns the inode too (hasAttr).
func (c *Client) LookupEntry(ctx context.Context, cred wire.Cred, parent uint64, name string) (ino uint64, typ uint32, attr wire.Attr, hasAttr bool, err error) {
	var r wire.LookupReply
	err = c.call(ctx, wire.OpLookup, cred, partitionOf(parent), &wire.LookupRequest{Parent: parent, Name: name}, &r, nil)
	return r.Ino, r.Type, r.Attr, r.HasAttr, err
}

// GetAttr returns inode ino's attributes; gen 0 matches any generation,
// another mismatch is ESTALE.
func (c *Client) GetAttr(ctx context.Context, cred wire.Cred, ino, gen uint64) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpGetAttr, cred, partitionOf(ino), &wire.GetAttrRequest{Ino: ino, Gen: gen}, &r, nil)
	return r.Attr, err
}

// SetAttr applies req (chmod, chown, truncate, utimens) and returns the
// new attributes. A size change frees or zeroes the data beyond it
// before the size is published.
func (c *Client) SetAttr(ctx context.Context, cred wire.Cred, req wire.SetAttrRequest) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpSetAttr, cred, partitionOf(req.Ino), &req, &r, nil)
	return r.Attr, err
}

func (c *Client) make(ctx context.Context, op wire.Op, cred wire.Cred, req wire.MakeRequest) (wire.Attr, error) {
	a, _, err := c.Make(ctx, op, cred, req)
	return a, err
}

// Make sends a creation (op is OpCreate, OpMkdir or OpSymlink) to the
// new inode's owner and returns the new inode's attributes and, when the
// reply has them, the directory's as the entry left them (nil if not).
func (c *Client) Make(ctx context.Context, op wire.Op, cred wire.Cred, req wire.MakeRequest) (wire.Attr, *wire.Attr, error) {
	var r wire.MakeReply
	to := c.newInodeTarget(req.Parent, req.Name, op == wire.OpMkdir)
	if err := c.call(ctx, op, cred, to, &req, &r, nil); err != nil {
		return wire.Attr{}, nil, err
	}
	if !r.HasDir || r.Dir.Ino != req.Parent {
		return r.Attr, nil, nil
	}
	return r.Attr, &r.Dir, nil
}

// newInodeTarget is the partition a new inode named name in parent gets
// (dir: a directory).
func (c *Client) newInodeTarget(parent uint64, name string, dir bool) target {
	m := c.cfg.Maps.Current()
	if !m.Initialized() || m.NumPartitions() == 0 {
		return partitionOf(parent)
	}
	return target{partition: m.NewInodePartition(parent, name, dir)}
}

// Create makes a regular file, fifo, socket or device (by mode's type;
// rdev for devices) named name in parent with final mode (umask applied
// by the caller). With open, the new file is also registered as opened
// with flags, so its creator may write it whatever its mode. An existing
// name is EEXIST (the caller opens it when O_EXCL was not given).
func (c *Client) Create(ctx context.Context, cred wire.Cred, parent uint64, name string, mode uint32, rdev uint64, open bool, flags uint32) (wire.Attr, error) {
	if mode&wire.ModeType == 0 {
		mode |= wire.ModeRegular
	}
	return c.make(ctx, wire.OpCreate, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: mode, Rdev: rdev, Open: open, OpenFlags: flags})
}

// Tmpfile makes a regular file with no name in directory parent, open
// with flags (which must allow writing), as open(2) with O_TMPFILE does:
// it ends with its last open unless Link names it first (not with
// O_EXCL). One request, to parent's owner.
func (c *Client) Tmpfile(ctx context.Context, cred wire.Cred, parent uint64, mode, flags uint32) (wire.Attr, error) {
	return c.TmpfileMasked(ctx, cred, parent, mode, 0, flags)
}

// TmpfileMasked is Tmpfile with the caller's umask for the owner to
// apply (or the directory's default ACL; see wire.MakeRequest).
func (c *Client) TmpfileMasked(ctx context.Context, cred wire.Cred, parent uint64, mode, umask, flags uint32) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpTmpfile, cred, partitionOf(parent),
		&wire.MakeRequest{Parent: parent, Mode: wire.ModeRegular | mode&wire.ModePerm, Open: true, OpenFlags: flags, Umask: umask}, &r, nil)
	return r.Attr, err
}

// Mkdir makes directory name in parent with permission bits mode.
func (c *Client) Mkdir(ctx context.Context, cred wire.Cred, parent uint64, name string, mode uint32) (wire.Attr, error) {
	return c.make(ctx, wire.OpMkdir, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: wire.ModeDir | mode&wire.ModePerm})
}

// Symlink makes name in parent a symbolic link to target.
func (c *Client) Symlink(ctx context.Context, cred wire.Cred, parent uint64, name, target string) (wire.Attr, error) {
	return c.make(ctx, wire.OpSymlink, cred, wire.MakeRequest{Parent: parent, Name: name, Mode: wire.ModeSymlink | 0o777, Target: target})
}

// Link makes newName in newParent a hard link to ino and returns ino's
// attributes.
func (c *Client) Link(ctx context.Context, cred wire.Cred, ino, newParent uint64, newName string) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpLink, cred, partitionOf(ino), &wire.LinkRequest{Ino: ino, NewParent: newParent, NewName: newName}, &r, nil)
	return r.Attr, err
}

// Unlink removes name from parent. ino is the entry's inode if the caller
// knows it (one round trip fewer), else 0.
func (c *Client) Unlink(ctx context.Context, cred wire.Cred, parent uint64, name string, ino uint64) error {
	return c.remove(ctx, wire.OpUnlink, cred, parent, name, ino)
}

// Rmdir removes the empty directory name from parent; ino as in Unlink.
func (c *Client) Rmdir(ctx context.Context, cred wire.Cred, parent uint64, name string, ino uint64) error {
	return c.remove(ctx, wire.OpRmdir, cred, parent, name, ino)
}

func (c *Client) remove(ctx context.Context, op wire.Op, cred wire.Cred, parent uint64, name string, ino uint64) error {
	_, err := c.Remove(ctx, op, cred, parent, name, ino)
	return err
}

// Remove is Unlink (op OpUnlink) or Rmdir (OpRmdir) that also returns
// the directory's attributes as the removal left them, when the reply
// carries them (else nil).
func (c *Client) Remove(ctx context.Context, op wire.Op, cred wire.Cred, parent uint64, name string, ino uint64) (*wire.Attr, error) {
	req := wire.UnlinkRequest{Parent: parent, Name: name, Ino: ino}
	to := partitionOf(parent)
	if ino != 0 {
		to = partitionOf(ino)
	}
	var r wire.DirReply
	err := c.call(ctx, op, cred, to, &req, &r, func(ino uint64) target {
		req.Ino = ino
		return partitionOf(ino)
	})
	if err != nil || !r.HasDir || r.Dir.Ino != parent {
		return nil, err
	}
	return &r.Dir, nil
}

// Rename is renameat2(srcParent/srcName, dstParent/dstName, flags).
// req.SrcIno is the source's inode if known, else 0.
func (c *Client) Rename(ctx context.Context, cred wire.Cred, req wire.RenameRequest) error {
	to := partitionOf(req.SrcParent)
	if req.SrcIno != 0 {
		to = partitionOf(req.SrcIno)
	}
	return c.call(ctx, wire.OpRename, cred, to, &req, &wire.Empty{}, func(ino uint64) target {
		req.SrcIno = ino
		return partitionOf(ino)
	})
}

// Readlink returns a symlink's target.
func (c *Client) Readlink(ctx context.Context, cred wire.Cred, ino uint64) (string, error) {
	var r wire.ReadlinkReply
	err := c.call(ctx, wire.OpReadlink, cred, partitionOf(ino), &wire.InoRequest{Ino: ino}, &r, nil)
	return r.Target, err
}

// ReadDir returns directory ino's entries after cookie (0: from the
// start) in cookie order, at most maxEntries (0: any number) in about
// maxBytes of reply (0: the server's default), and whether the listing
// is complete. "." and ".." are not included (cookies 1 and 2 are
// reserved for them).
func (c *Client) ReadDir(ctx context.Context, cred wire.Cred, ino, cookie uint64, maxBytes, maxEntries uint32) ([]wire.DirEntry, bool, error) {
	return c.ReadDirFlags(ctx, cred, ino, cookie, maxBytes, maxEntries, 0)
}

// ReadDirFlags is ReadDir with the request's flags (wire.ReadDirNoAtime:
// the listing leaves the directory's atime alone).
func (c *Client) ReadDirFlags(ctx context.Context, cred wire.Cred, ino, cookie uint64, maxBytes, maxEntries, flags uint32) ([]wire.DirEntry, bool, error) {
	var r wire.ReadDirReply
	err := c.call(ctx, wire.OpReadDir, cred, partitionOf(ino),
		&wire.ReadDirRequest{Ino: ino, Cookie: cookie, MaxBytes: maxBytes, MaxEntries: maxEntries, Flags: flags}, &r, nil)
	return r.Entries, r.EOF, err
}

// OpenDir opens directory ino for a listing: the owner checks read
// permission, registers the open (end it with Release and flags
// O_RDONLY|O_DIRECTORY) and answers the attributes and the first page
// of entries (bounded as ReadDir's). flags may hold O_NOATIME.
func (c *Client) OpenDir(ctx context.Context, cred wire.Cred, ino, gen uint64, flags, maxBytes, maxEntries uint32) (wire.Attr, []wire.DirEntry, bool, error) {
	var r wire.OpenDirReply
	err := c.call(ctx, wire.OpOpenDir, cred, partitionOf(ino),
		&wire.OpenDirRequest{Ino: ino, Gen: gen, Flags: flags, MaxBytes: maxBytes, MaxEntries: maxEntries}, &r, nil)
	return r.Attr, r.Page.Entries, r.Page.EOF, err
}

// TouchAtime tells ino's owner that the caller read the file's data: the
// owner updates atime if relatime's rule is due, and answers the
// attributes.
func (c *Client) TouchAtime(ctx context.Context, cred wire.Cred, ino, gen uint64) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpTouchAtime, cred, partitionOf(ino), &wire.GetAttrRequest{Ino: ino, Gen: gen}, &r, nil)
	return r.Attr, err
}

// StatFSNode returns one node's namespace capacity.
func (c *Client) StatFSNode(ctx context.Context, node cluster.NodeID) (wire.StatFSReply, error) {
	var r wire.StatFSReply
	err := c.call(ctx, wire.OpStatFS, wire.Cred{}, target{node: node}, &wire.Empty{}, &r, nil)
	return r, err
}

// StatFS sums StatFSNode over every node that owns partitions. A node
// that does not answer fails the call.
func (c *Client) StatFS(ctx context.Context) (wire.StatFSReply, error) {
	m := c.cfg.Maps.Current()
	if !m.Initialized() {
		return wire.StatFSReply{}, fmt.Errorf("%w: no cluster map", ErrUnavailable)
	}
	var nodes []cluster.NodeID
	for _, id := range m.Partitions {
		if !slices.Contains(nodes, id) {
			nodes = append(nodes, id)
		}
	}
	var (
		mu    sync.Mutex
		sum   = wire.StatFSReply{NameLen: wire.MaxNameLen}
		first error
		wg    sync.WaitGroup
	)
	for _, id := range nodes {
		wg.Go(func() {
			r, err := c.StatFSNode(ctx, id)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				first = cmpErr(first, err)
				return
			}
			if sum.Bsize == 0 {
				sum.Bsize = r.Bsize
			}
			scale := uint64(1)
			if sum.Bsize != 0 && r.Bsize > sum.Bsize {
				scale = uint64(r.Bsize / sum.Bsize)
			}
			// Saturating: a node claiming near 2^64 must not wrap the
			// sums to a plausible figure.
			sum.Blocks = sat.Add(sum.Blocks, sat.Mul(r.Blocks, scale))
			sum.Bfree = sat.Add(sum.Bfree, sat.Mul(r.Bfree, scale))
			sum.Bavail = sat.Add(sum.Bavail, sat.Mul(r.Bavail, scale))
			sum.Files = sat.Add(sum.Files, r.Files)
			sum.Ffree = sat.Add(sum.Ffree, r.Ffree)
		})
	}
	wg.Wait()
	return sum, first
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// GetXattr returns xattr name of ino. size is the caller's buffer (0:
// any size); a value larger than a non-zero size is ERANGE.
func (c *Client) GetXattr(ctx context.Context, cred wire.Cred, ino uint64, name string, size uint32) ([]byte, error) {
	var r wire.GetXattrReply
	err := c.call(ctx, wire.OpGetXattr, cred, partitionOf(ino), &wire.GetXattrRequest{Ino: ino, Name: name, Size: size}, &r, nil)
	return r.Value, err
}

// SetXattr sets xattr name of ino; flags are wire.XattrCreate or
// wire.XattrReplace.
func (c *Client) SetXattr(ctx context.Context, cred wire.Cred, ino uint64, name string, value []byte, flags uint32) error {
	return c.call(ctx, wire.OpSetXattr, cred, partitionOf(ino),
		&wire.SetXattrRequest{Ino: ino, Name: name, Value: value, Flags: flags}, &wire.Empty{}, nil)
}

// ListXattr returns the xattr names of ino the caller may see; size as in
// GetXattr, against the NUL-separated list's length.
func (c *Client) ListXattr(ctx context.Context, cred wire.Cred, ino uint64, size uint32) ([]string, error) {
	var r wire.ListXattrReply
	err := c.call(ctx, wire.OpListXattr, cred, partitionOf(ino), &wire.ListXattrRequest{Ino: ino, Size: size}, &r, nil)
	return r.Names, err
}

// RemoveXattr removes xattr name of ino.
func (c *Client) RemoveXattr(ctx context.Context, cred wire.Cred, ino uint64, name string) error {
	return c.call(ctx, wire.OpRemoveXattr, cred, partitionOf(ino),
		&wire.RemoveXattrRequest{Ino: ino, Name: name}, &wire.Empty{}, nil)
}

// Access is access(2) with mask of wire.AccessRead/Write/Exec.
func (c *Client) Access(ctx context.Context, cred wire.Cred, ino uint64, mask uint32) error {
	return c.call(ctx, wire.OpAccess, cred, partitionOf(ino), &wire.AccessRequest{Ino: ino, Mask: mask}, &wire.Empty{}, nil)
}

// Open checks that cred may open ino with flags, truncates for O_TRUNC,
// and registers the open with the inode's owner (an unlinked file lives
// until its last open is released). reclaim re-registers an open held
// before the owner restarted.
func (c *Client) Open(ctx context.Context, cred wire.Cred, ino, gen uint64, flags uint32, reclaim bool) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpOpen, cred, partitionOf(ino),
		&wire.OpenRequest{Ino: ino, Gen: gen, Flags: flags, Reclaim: reclaim}, &r, nil)
	return r.Attr, err
}

// Release ends one registered open of ino made with flags.
func (c *Client) Release(ctx context.Context, ino uint64, flags uint32) error {
	return c.call(ctx, wire.OpRelease, wire.Cred{}, partitionOf(ino), &wire.ReleaseRequest{Ino: ino, Flags: flags}, &wire.Empty{}, nil)
}

// WriteCommit records durable writes to ino: the size becomes at least
// size, mtime and ctime become mtime (the server's clock if zero), and
// setuid/setgid are cleared as a write by cred clears them.
func (c *Client) WriteCommit(ctx context.Context, cred wire.Cred, ino, size uint64, mtime wire.Timespec) (wire.Attr, error) {
	var r wire.AttrReply
	err := c.call(ctx, wire.OpWriteCommit, cred, partitionOf(ino),
		&wire.WriteCommitRequest{Ino: ino, Size: size, Mtime: mtime}, &r, nil)
	return r.Attr, err
}

// Append returns the offset an O_APPEND write of n bytes to ino goes to
// (wire.OpAppend); known is the end of the file as the caller knows it,
// its uncommitted writes included. The caller writes there and commits
// as for any write.
func (c *Client) Append(ctx context.Context, cred wire.Cred, ino, n, known uint64) (uint64, error) {
	var r wire.AppendReply
	err := c.call(ctx, wire.OpAppend, cred, partitionOf(ino),
		&wire.AppendRequest{Ino: ino, Len: n, Known: known}, &r, nil)
	return r.Offset, err
}

// GetLk returns the first lock that conflicts with lk, or lk with Type
// wire.LockUnlock if none does.
func (c *Client) GetLk(ctx context.Context, ino uint64, lk wire.Lock) (wire.Lock, error) {
	var r wire.LockReply
	err := c.call(ctx, wire.OpGetLk, wire.Cred{}, partitionOf(ino), &wire.LockRequest{Ino: ino, Lock: lk}, &r, nil)
	return r.Lock, err
}

// SetLk takes or releases lk without waiting: a conflict is EAGAIN. The
// caller loops (with its own wait) for F_SETLKW and blocking flock.
func (c *Client) SetLk(ctx context.Context, ino uint64, lk wire.Lock) error {
	return c.call(ctx, wire.OpSetLk, wire.Cred{}, partitionOf(ino), &wire.LockRequest{Ino: ino, Lock: lk}, &wire.Empty{}, nil)
}

// KeepAlive renews this client's session at node (its opens and locks
// there) and returns the session's lease in milliseconds: renew well
// within it.
func (c *Client) KeepAlive(ctx context.Context, node cluster.NodeID) (uint32, error) {
	var r wire.KeepAliveReply
	err := c.call(ctx, wire.OpKeepAlive, wire.Cred{}, target{node: node}, &wire.Empty{}, &r, nil)
	return r.LeaseMillis, err
}
