package metadata

import (
	"context"
	"slices"
	"strings"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
)

// inodeShared returns inode ino for a holder of p.mu shared, waiting while
// it is pending (a creation not yet confirmed by its directory). A
// missing inode is ESTALE when the caller named a generation, else
// ENOENT; so is a generation mismatch.
func (p *partition) inodeShared(ctx context.Context, ino, gen uint64) (*inode, wire.Status) {
	for {
		n := p.inodes[ino]
		if n == nil || (gen != 0 && n.rec.Gen != gen) {
			if gen != 0 {
				return nil, status(syscall.ESTALE)
			}
			return nil, status(syscall.ENOENT)
		}
		if !n.pending() {
			return n, wire.StatusOK
		}
		if mustNotWait(ctx) {
			return nil, wire.StatusNotReady
		}
		if err := p.rwait(ctx); err != nil {
			return nil, wire.StatusNotReady
		}
	}
}

// lockInode finds ino (of generation gen, 0 for any) for a change by a
// client's request: its partition's lock held exclusively and the inode
// free of other protocols (inodeExclusive). On a status other than OK no
// lock is held; otherwise the caller unlocks p.mu.
func (s *Service) lockInode(ctx context.Context, ino, gen uint64) (*partition, *inode, wire.Status) {
	p, st := s.partition(ctx, cluster.PartitionOf(ino))
	if st != wire.StatusOK {
		return nil, nil, st
	}
	if stayLocal(ctx, p, false) || !lockPartition(ctx, p) {
		return nil, nil, wire.StatusNotReady
	}
	n, st := p.inodeExclusive(ctx, ino, gen, wire.TxnID{})
	if st != wire.StatusOK {
		p.mu.Unlock()
		return nil, nil, st
	}
	return p, n, wire.StatusOK
}

// inodeExclusive is inodeShared for a holder of p.mu exclusively, which
// also waits while the inode is busy with another protocol or locked by
// a rename (unless by txn).
func (p *partition) inodeExclusive(ctx context.Context, ino, gen uint64, txn wire.TxnID) (*inode, wire.Status) {
	for {
		n := p.inodes[ino]
		if n == nil || (gen != 0 && n.rec.Gen != gen) {
			if gen != 0 {
				return nil, status(syscall.ESTALE)
			}
			return nil, status(syscall.ENOENT)
		}
		if !n.pending() && !n.busy && !p.inodeLocked(ino, txn) {
			return n, wire.StatusOK
		}
		if err := p.wait(ctx); err != nil {
			return nil, wire.StatusNotReady
		}
	}
}

func (s *Service) lookup(ctx context.Context, r *request, q *wire.LookupRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Parent))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	d, st := p.inodeShared(ctx, q.Parent, 0)
	if st != wire.StatusOK {
		p.mu.RUnlock()
		return fail(st)
	}
	var rep wire.LookupReply
	switch {
	case !d.isDir():
		st = status(syscall.ENOTDIR)
	case !d.permits(r.cred, wire.AccessExec):
		st = status(syscall.EACCES)
	case q.Name == ".":
		rep.Ino, rep.Type = q.Parent, wire.ModeDir
	case q.Name == "..":
		rep.Ino, rep.Type = d.rec.Parent, wire.ModeDir
	default:
		if e := checkName(q.Name); e != 0 {
			st = status(e)
			break
		}
		e := d.dir.get(q.Name)
		if e == nil {
			st = status(syscall.ENOENT)
			break
		}
		rep.Ino, rep.Type = e.ino, e.typ
	}
	p.mu.RUnlock()
	if st != wire.StatusOK {
		return fail(st)
	}
	// Bring the attributes along when this node has the inode.
	cp := p
	if pid := cluster.PartitionOf(rep.Ino); pid != p.id {
		cp = nil
		if s.owns(pid) {
			cp = s.localPartition(ctx, pid)
		}
	}
	if cp != nil {
		cp.mu.RLock()
		if n := cp.inodes[rep.Ino]; n != nil && !n.pending() {
			cp.usageWanted(n)
			rep.Attr, rep.HasAttr = n.attr(), true
		}
		cp.mu.RUnlock()
	}
	return ok(&rep)
}

func (s *Service) getattr(ctx context.Context, q *wire.GetAttrRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, st := p.inodeShared(ctx, q.Ino, q.Gen)
	if st != wire.StatusOK {
		return fail(st)
	}
	p.usageWanted(n)
	return ok(&wire.AttrReply{Attr: n.attr()})
}

func (s *Service) readlink(ctx context.Context, q *wire.InoRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, st := p.inodeShared(ctx, q.Ino, 0)
	if st != wire.StatusOK {
		return fail(st)
	}
	if !n.isSymlink() {
		return fail(status(syscall.EINVAL))
	}
	return ok(&wire.ReadlinkReply{Target: n.rec.Target})
}

func (s *Service) getParent(ctx context.Context, q *wire.InoRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, st := p.inodeShared(ctx, q.Ino, 0)
	if st != wire.StatusOK {
		return fail(st)
	}
	if !n.isDir() {
		return fail(status(syscall.ENOTDIR))
	}
	return ok(&wire.GetParentReply{Parent: n.rec.Parent})
}

// maxReadDirBytes caps a readdir reply whatever the caller asks.
const maxReadDirBytes = 1 << 20

func (s *Service) readdir(ctx context.Context, r *request, q *wire.ReadDirRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	if !rlockPartition(ctx, p) {
		return fail(wire.StatusNotReady)
	}
	rep, due, st := s.readdirShared(ctx, p, r, q)
	p.mu.RUnlock()
	if st != wire.StatusOK {
		return fail(st)
	}
	if due {
		if mustNotWait(ctx) {
			// The atime update changes the directory: not
			// inline (inline.go).
			return fail(wire.StatusNotReady)
		}
		p.listedDir(q.Ino)
	}
	return ok(rep)
}

// readdirShared lists a page for readdir under p.mu shared, and says
// whether the listing is due to update the directory's atime.
func (s *Service) readdirShared(ctx context.Context, p *partition, r *request, q *wire.ReadDirRequest) (*wire.ReadDirReply, bool, wire.Status) {
	n, st := p.inodeShared(ctx, q.Ino, 0)
	if st != wire.StatusOK {
		return nil, false, st
	}
	if !n.isDir() {
		return nil, false, status(syscall.ENOTDIR)
	}
	if !n.permits(r.cred, wire.AccessRead) {
		return nil, false, status(syscall.EACCES)
	}
	rep := s.listPage(p, n, r.cred, q.Cookie, q.MaxBytes, q.MaxEntries)
	due := q.Flags&wire.ReadDirNoAtime == 0 &&
		wire.RelatimeDue(n.rec.Atime, n.rec.Mtime, n.rec.Ctime, wire.TimespecOf(s.now()))
	return rep, due, wire.StatusOK
}

// listPage lists directory n of partition p after cookie, at most
// maxEntries entries (0: no count limit) in about maxBytes of reply (0:
// the service's default). An entry whose inode p holds comes with its
// attributes when c may search the directory (what a stat of it would
// need), so that READDIRPLUS (ls -l) costs no lookup per entry. The
// caller holds p.mu.
func (s *Service) listPage(p *partition, n *inode, c *wire.Cred, cookie uint64, maxBytes, maxEntries uint32) *wire.ReadDirReply {
	budget := int(maxBytes)
	if budget == 0 {
		budget = int(s.cfg.ReadDirBytes)
	}
	budget = min(budget, maxReadDirBytes)
	withAttrs := n.permits(c, wire.AccessExec)
	rep := &wire.ReadDirReply{EOF: true}
	// Room for a page at once (up to 1,024 entries; a longer one grows):
	// growing a slice of 176-byte entries by doubling was most of a
	// 100-entry listing's CPU.
	room := min(n.dir.len(), budget/wire.DirEntrySize("x", false)+1, 1024)
	if maxEntries != 0 {
		room = min(room, int(maxEntries))
	}
	if room > 0 {
		rep.Entries = make([]wire.DirEntry, 0, room)
	}
	used := 8
	n.dir.after(cookie, func(e *dentry) bool {
		ent := wire.DirEntry{Name: e.name, Ino: e.ino, Type: e.typ, Cookie: e.cookie}
		if withAttrs && cluster.PartitionOf(e.ino) == p.id {
			if child := p.inodes[e.ino]; child != nil && !child.gone() && child.rec.Flags&wire.InodePending == 0 {
				ent.HasAttr, ent.Attr = true, child.attr()
			}
		}
		size := wire.DirEntrySize(e.name, ent.HasAttr)
		if (maxEntries != 0 && len(rep.Entries) >= int(maxEntries)) || (used+size > budget && len(rep.Entries) > 0) {
			rep.EOF = false
			return false
		}
		used += size
		rep.Entries = append(rep.Entries, ent)
		return true
	})
	return rep
}

func (s *Service) access(ctx context.Context, r *request, q *wire.AccessRequest) result {
	if q.Mask&^7 != 0 {
		return fail(status(syscall.EINVAL))
	}
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, st := p.inodeShared(ctx, q.Ino, 0)
	if st != wire.StatusOK {
		return fail(st)
	}
	if !n.permits(r.cred, q.Mask) {
		return fail(status(syscall.EACCES))
	}
	return ok(&wire.Empty{})
}

func (s *Service) statfs() result {
	st := s.cfg.Store.Region().Stats()
	files := uint64(0)
	for _, p := range s.loaded() {
		p.mu.RLock()
		files += uint64(len(p.inodes))
		p.mu.RUnlock()
	}
	free := st.Blocks - st.BlocksUsed
	// An inode with its entry takes about 256 bytes of log.
	ffree := free * uint64(st.BlockSize) / 256
	return ok(&wire.StatFSReply{Bsize: st.BlockSize, Blocks: st.Blocks, Bfree: free, Bavail: free,
		Files: files + ffree, Ffree: ffree, NameLen: wire.MaxNameLen})
}

// Xattr namespaces, as Linux's xattr_permission treats them.
const (
	xattrUser     = "user."
	xattrTrusted  = "trusted."
	xattrSecurity = "security."
	xattrSystem   = "system."
)

// checkXattrName applies the name rules in the VFS's order: ERANGE for an
// empty or too long name; EINVAL for a namespace prefix with nothing
// after it ("user.": xattr_resolve_name); EOPNOTSUPP for a namespace
// octofs does not keep (system.* other than the two POSIX ACLs) or an
// unknown one.
func checkXattrName(name string) syscall.Errno {
	switch {
	case name == "" || len(name) > wire.MaxXattrNameLen:
		return syscall.ERANGE
	case name == xattrUser || name == xattrTrusted || name == xattrSecurity:
		return syscall.EINVAL
	case strings.HasPrefix(name, xattrUser),
		strings.HasPrefix(name, xattrTrusted),
		strings.HasPrefix(name, xattrSecurity),
		isACLName(name):
		return 0
	}
	return syscall.EOPNOTSUPP
}

// xattrPermission is Linux's xattr_permission plus the security
// module's default rule for security.* (writes need CAP_SYS_ADMIN).
func xattrPermission(n *inode, name string, c *wire.Cred, write bool) syscall.Errno {
	mask := wire.AccessRead
	if write {
		mask = wire.AccessWrite
	}
	switch {
	case isACLName(name):
		// set_posix_acl: the owner (or root) sets; anyone reads. A
		// symbolic link has none.
		switch {
		case n.isSymlink():
			return syscall.EOPNOTSUPP
		case write && !ownerOrRoot(&n.rec, c):
			return syscall.EPERM
		}
		return 0
	case strings.HasPrefix(name, xattrSecurity):
		if write && !c.IsRoot() {
			return syscall.EPERM
		}
		return 0
	case strings.HasPrefix(name, xattrTrusted):
		if !c.IsRoot() {
			if write {
				return syscall.EPERM
			}
			return syscall.ENODATA
		}
		return 0
	case strings.HasPrefix(name, xattrUser):
		if !n.isRegular() && !n.isDir() {
			if write {
				return syscall.EPERM
			}
			return syscall.ENODATA
		}
		if n.isDir() && n.rec.Mode&wire.ModeSticky != 0 && write && !ownerOrRoot(&n.rec, c) {
			return syscall.EPERM
		}
	}
	if !n.permits(c, mask) {
		return syscall.EACCES
	}
	return 0
}

func (s *Service) getxattr(ctx context.Context, r *request, q *wire.GetXattrRequest) result {
	if e := checkXattrName(q.Name); e != 0 {
		return fail(status(e))
	}
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, st := p.inodeShared(ctx, q.Ino, 0)
	if st != wire.StatusOK {
		return fail(st)
	}
	if e := xattrPermission(n, q.Name, r.cred, false); e != 0 {
		return fail(status(e))
	}
	v, found := n.xattrs[q.Name]
	if !found {
		return fail(status(syscall.ENODATA))
	}
	if q.Size != 0 && uint64(len(v)) > uint64(q.Size) {
		return fail(status(syscall.ERANGE))
	}
	return ok(&wire.GetXattrReply{Value: slices.Clone(v)})
}

func (s *Service) listxattr(ctx context.Context, r *request, q *wire.ListXattrRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n, st := p.inodeShared(ctx, q.Ino, 0)
	if st != wire.StatusOK {
		return fail(st)
	}
	var names []string
	size := 0
	for name := range n.xattrs {
		if strings.HasPrefix(name, xattrTrusted) && !r.cred.IsRoot() {
			continue
		}
		names = append(names, name)
		size += len(name) + 1
	}
	if q.Size != 0 && size > int(q.Size) {
		return fail(status(syscall.ERANGE))
	}
	slices.Sort(names)
	return ok(&wire.ListXattrReply{Names: names})
}
