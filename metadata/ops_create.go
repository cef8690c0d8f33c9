package metadata

import (
	"context"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// DefaultMaxLinks is the largest link count (EMLINK past it) unless
// Config.MaxLinks says otherwise: ext4's.
const DefaultMaxLinks = 65000

// inherit applies what a new inode takes from its directory: the group
// of a setgid directory (and, for a directory, the setgid bit), and
// Linux's mode_strip_sgid rule.
func inherit(rec *wire.InodeRecord, dirMode, dirGID uint32, c *wire.Cred) {
	isDir := rec.Mode&wire.ModeType == wire.ModeDir
	if dirMode&wire.ModeSetgid == 0 {
		return
	}
	rec.GID = dirGID
	if isDir {
		rec.Mode |= wire.ModeSetgid
		return
	}
	if rec.Mode&(wire.ModeSetgid|0o010) == wire.ModeSetgid|0o010 && !c.IsRoot() && !c.InGroup(dirGID) {
		rec.Mode &^= wire.ModeSetgid
	}
}

// inheritACL applies the rest of what a new inode takes from its
// directory (after inherit), as posix_acl_create does: with a default
// ACL def, the ACL masks the requested permission bits, the umask does
// not apply, and the inode gets an access ACL (unless the bits say it
// all) and, if a directory, the default ACL; without one, the umask
// applies. A symbolic link takes neither. It returns the xattr records
// of the new ACLs (rec.Ino must be set).
func inheritACL(rec *wire.InodeRecord, def acl.ACL, umask uint32) []wire.Record {
	typ := rec.Mode & wire.ModeType
	switch {
	case typ == wire.ModeSymlink:
		return nil
	case def == nil:
		rec.Mode &^= umask & 0o777
		return nil
	}
	perm, access, dflt := def.Inherit(rec.Mode&wire.ModePerm, typ == wire.ModeDir)
	rec.Mode = typ | perm
	var recs []wire.Record
	if access != nil {
		recs = append(recs, &wire.XattrSetRecord{Ino: rec.Ino, Name: acl.XattrAccess, Value: access.Encode()})
	}
	if dflt != nil {
		recs = append(recs, &wire.XattrSetRecord{Ino: rec.Ino, Name: acl.XattrDefault, Value: dflt.Encode()})
	}
	return recs
}

// addCheck says what addEntryChecks checks beyond the basics.
type addCheck struct {
	// newIsDir: the entry is a directory, so d gains a link (EMLINK).
	newIsDir bool
	// linkDenied: protected_hardlinks refuses the link (EPERM), which
	// Linux answers after the directory and name checks (may_linkat
	// comes after filename_create).
	linkDenied bool
	// nameOnly: stop after the checks that precede may_linkat
	// (wire.EntryAddCheckName).
	nameOnly bool
}

// addEntryChecks is what adding name to directory d requires (create,
// link, and the directory side of both), in Linux's order. It returns
// StatusOK when the entry can be added now, StatusLocked to wait, or the
// errno.
func (p *partition) addEntryChecks(d *inode, name string, c *wire.Cred, chk addCheck) wire.Status {
	switch {
	case d == nil:
		return status(syscall.ENOENT)
	case d.pending():
		return wire.StatusLocked
	case !d.isDir():
		return status(syscall.ENOTDIR)
	case !d.permits(c, wire.AccessExec):
		return status(syscall.EACCES)
	case p.entryLocked(d.rec.Ino, name, wire.TxnID{}):
		return wire.StatusLocked
	case d.dir.get(name) != nil:
		return status(syscall.EEXIST)
	case chk.nameOnly:
		return wire.StatusOK
	case chk.linkDenied:
		return status(syscall.EPERM)
	case d.dead():
		return status(syscall.ENOENT)
	case !d.permits(c, wire.AccessWrite):
		return status(syscall.EACCES)
	case chk.newIsDir && d.rec.Nlink >= p.svc.cfg.MaxLinks:
		return status(syscall.EMLINK)
	}
	return wire.StatusOK
}

// addEntryRecords returns the records that add name -> ino to d at now.
func addEntryRecords(d *inode, name string, ino uint64, typ uint32, now wire.Timespec) []wire.Record {
	drec := d.rec
	cookie := drec.NextCookie
	drec.NextCookie++
	drec.Mtime, drec.Ctime = now, now
	if typ == wire.ModeDir {
		drec.Nlink++
	}
	return []wire.Record{&wire.EntryAddRecord{Dir: drec.Ino, Name: name, Ino: ino, Type: typ, Cookie: cookie}, &drec}
}

func (s *Service) make(ctx context.Context, r *request, q *wire.MakeRequest) result {
	if r.op == wire.OpTmpfile {
		return s.tmpfile(ctx, r, q)
	}
	typ := q.Mode & wire.ModeType
	perm := q.Mode & wire.ModePerm
	switch r.op {
	case wire.OpMkdir:
		typ = wire.ModeDir
	case wire.OpSymlink:
		typ, perm = wire.ModeSymlink, 0o777
	default:
		switch typ {
		case 0:
			typ = wire.ModeRegular
		case wire.ModeRegular, wire.ModeFIFO, wire.ModeSocket:
		case wire.ModeChar, wire.ModeBlock:
			if !r.cred.IsRoot() {
				return fail(status(syscall.EPERM))
			}
		default:
			return fail(status(syscall.EINVAL))
		}
	}
	if e := checkName(q.Name); e != 0 {
		return fail(status(e))
	}
	if isDots(q.Name) {
		return fail(status(syscall.EEXIST))
	}
	if r.op == wire.OpSymlink {
		switch {
		case q.Target == "":
			return fail(status(syscall.ENOENT))
		case len(q.Target) > wire.MaxSymlinkLen:
			return fail(status(syscall.ENAMETOOLONG))
		}
	}
	m := s.cfg.Map.Current()
	if !m.Initialized() {
		return fail(wire.StatusNotReady)
	}
	p, st := s.partitionForNew(ctx, m.NewInodePartition(q.Parent, q.Name, typ == wire.ModeDir))
	if st != wire.StatusOK {
		return fail(st)
	}
	if stayLocal(ctx, p, cluster.PartitionOf(q.Parent) != p.id) {
		return fail(wire.StatusNotReady)
	}
	if st := s.roomToGrow(); st != wire.StatusOK {
		return fail(st)
	}
	now := wire.TimespecOf(s.now())
	rec := wire.InodeRecord{Gen: s.newGen(), Mode: typ | perm, UID: r.cred.UID, GID: r.cred.GID, Nlink: 1,
		Atime: now, Mtime: now, Ctime: now, Btime: now}
	switch typ {
	case wire.ModeDir:
		rec.Nlink, rec.Parent, rec.NextCookie = 2, q.Parent, firstCookie
	case wire.ModeSymlink:
		rec.Target = q.Target
	case wire.ModeChar, wire.ModeBlock:
		rec.Rdev = q.Rdev
	}
	if !lockPartition(ctx, p) {
		return fail(wire.StatusNotReady)
	}
	defer p.mu.Unlock()
	var res result
	if cluster.PartitionOf(q.Parent) == p.id {
		res = p.makeLocal(ctx, r, q.Parent, q.Name, rec, q.Umask, now)
	} else {
		rec.Ino = cluster.InodeNumber(p.id, p.nextIno)
		rec.Flags = wire.InodePending
		txn, extra := p.newTxn()
		in := &wire.IntentRecord{Txn: txn, Op: wire.IntentCreate, Parent: q.Parent, Name: q.Name, Ino: rec.Ino, Type: typ,
			ClientID: r.key.id, Incarnation: r.key.inc, Seq: r.h.Seq, ReqOp: r.op, Cred: *r.cred, Umask: q.Umask}
		if err := p.commit(nonNil(extra, &rec, in)...); err != nil {
			return fail(wire.StatusInternal)
		}
		res = p.finishCreate(in)
	}
	if res.status == wire.StatusOK && q.Open && typ == wire.ModeRegular {
		if n := p.inodes[res.body.(*wire.MakeReply).Attr.Ino]; n != nil {
			p.addOpen(r.key, n, q.OpenFlags&wire.OpenAccessMode != wire.OpenReadOnly)
		}
	}
	return res
}

// tmpfile makes an open regular file with no name in q.Parent's
// partition, as open(2) with O_TMPFILE does: an orphan of the caller's
// open, freed when its last open ends, unless link gives it a name first
// (InodeLinkable, which O_EXCL leaves unset). The directory needs search
// and write permission, and lends a setgid group, as for a create.
func (s *Service) tmpfile(ctx context.Context, r *request, q *wire.MakeRequest) result {
	switch q.Mode & wire.ModeType {
	case 0, wire.ModeRegular:
	default:
		return fail(status(syscall.EINVAL))
	}
	if q.OpenFlags&wire.OpenAccessMode == wire.OpenReadOnly {
		return fail(status(syscall.EINVAL))
	}
	p, st := s.partitionToGrow(ctx, cluster.PartitionOf(q.Parent))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var d *inode
	for {
		d = p.inodes[q.Parent]
		switch {
		case d == nil:
			return fail(status(syscall.ENOENT))
		case d.pending():
			if err := p.wait(ctx); err != nil {
				return waitFailed()
			}
			continue
		case !d.isDir():
			return fail(status(syscall.ENOTDIR))
		case !d.permits(r.cred, wire.AccessExec|wire.AccessWrite):
			return fail(status(syscall.EACCES))
		case d.dead():
			return fail(status(syscall.ENOENT))
		}
		break
	}
	now := wire.TimespecOf(s.now())
	rec := wire.InodeRecord{Ino: cluster.InodeNumber(p.id, p.nextIno), Gen: s.newGen(),
		Mode: wire.ModeRegular | q.Mode&wire.ModePerm, UID: r.cred.UID, GID: r.cred.GID,
		Atime: now, Mtime: now, Ctime: now, Btime: now, Flags: wire.InodeOrphan}
	if q.OpenFlags&wire.OpenExcl == 0 {
		rec.Flags |= wire.InodeLinkable
	}
	inherit(&rec, d.rec.Mode, d.rec.GID, r.cred)
	xrecs := inheritACL(&rec, d.defaultACL(), q.Umask)
	res := ok(&wire.AttrReply{Attr: attrOf(&rec)})
	if err := p.commit(nonNil(append(append([]wire.Record{&rec}, xrecs...), r.record(res))...)...); err != nil {
		return fail(wire.StatusInternal)
	}
	p.addOpen(r.key, p.inodes[rec.Ino], true)
	return res
}

// makeLocal creates rec as name in parent, both in p: one append. The
// caller holds p.mu exclusively.
func (p *partition) makeLocal(ctx context.Context, r *request, parent uint64, name string, rec wire.InodeRecord, umask uint32, now wire.Timespec) result {
	typ := rec.Mode & wire.ModeType
	var d *inode
	for {
		d = p.inodes[parent]
		st := p.addEntryChecks(d, name, r.cred, addCheck{newIsDir: typ == wire.ModeDir})
		if st == wire.StatusOK {
			break
		}
		if st != wire.StatusLocked {
			return fail(st)
		}
		if err := p.wait(ctx); err != nil {
			return waitFailed()
		}
	}
	rec.Ino = cluster.InodeNumber(p.id, p.nextIno)
	inherit(&rec, d.rec.Mode, d.rec.GID, r.cred)
	xrecs := inheritACL(&rec, d.defaultACL(), umask)
	added := addEntryRecords(d, name, rec.Ino, typ, now)
	res := ok(&wire.MakeReply{Attr: attrOf(&rec), HasDir: true, Dir: attrOf(added[1].(*wire.InodeRecord))})
	recs := append(append([]wire.Record{&rec}, xrecs...), added...)
	if err := p.commit(nonNil(append(recs, r.record(res))...)...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}

// finishCreate runs a creation intent to its end (also after a restart):
// it has the directory's owner add the entry, then commits the inode or
// frees it. The caller holds p.mu exclusively; it is released while the
// peer works.
func (p *partition) finishCreate(in *wire.IntentRecord) result {
	req := &wire.EntryAddRequest{Txn: in.Txn, Watermark: p.watermark(), Dir: in.Parent, Name: in.Name, Ino: in.Ino, Type: in.Type}
	p.mu.Unlock()
	var rep wire.EntryAddReply
	rh, err := p.syncThenPeer(wire.OpEntryAdd, cluster.PartitionOf(in.Parent), in.Cred, req, &rep)
	p.mu.Lock()
	if err != nil {
		return fail(wire.StatusNotReady)
	}
	n := p.inodes[in.Ino]
	var res result
	var recs []wire.Record
	if rh.Status == wire.StatusOK {
		rec := n.rec
		rec.Flags &^= wire.InodePending
		inherit(&rec, rep.DirMode, rep.DirGID, &in.Cred)
		xrecs := inheritACL(&rec, decodeACL(rep.DirDefaultACL), in.Umask)
		res = ok(&wire.MakeReply{Attr: attrOf(&rec), HasDir: rep.Dir.Ino == in.Parent, Dir: rep.Dir})
		recs = append([]wire.Record{&rec}, xrecs...)
	} else {
		res = fail(peerStatus(rh.Status))
		recs = []wire.Record{&wire.InodeFreeRecord{Ino: in.Ino}}
	}
	recs = append(recs, &wire.IntentDoneRecord{Txn: in.Txn})
	if rr := intentRecord(in, res); rr != nil {
		recs = append(recs, rr)
	}
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}

// peerStatus is what a client is told when a peer's answer ends a
// protocol: its errno, or EIO for anything else.
func peerStatus(st wire.Status) wire.Status {
	if st.IsErrno() || st == wire.StatusOK || st == wire.StatusRedirect {
		return st
	}
	return status(syscall.EIO)
}

// intentRecord is the RequestRecord of the request an intent serves.
func intentRecord(in *wire.IntentRecord, res result) wire.Record {
	if in.Seq == 0 || !final(res.status) {
		return nil
	}
	return &wire.RequestRecord{ClientID: in.ClientID, Incarnation: in.Incarnation, Seq: in.Seq, Status: res.status, Reply: res.bytes()}
}

// mayLink is may_linkat with fs.protected_hardlinks = 1 (Debian's
// default, and what every client gets, since a client that does not go
// through a kernel, such as the native API, would otherwise skip it): a
// caller may hard-link an inode it owns, or as root, or a regular file
// that is neither setuid nor a setgid executable and that it may read
// and write (safe_hardlink_source).
func mayLink(n *inode, c *wire.Cred) bool {
	r := &n.rec
	if ownerOrRoot(r, c) {
		return true
	}
	switch {
	case r.Mode&wire.ModeType != wire.ModeRegular,
		r.Mode&wire.ModeSetuid != 0,
		r.Mode&(wire.ModeSetgid|0o010) == wire.ModeSetgid|0o010:
		return false
	}
	return n.permits(c, wire.AccessRead|wire.AccessWrite)
}

func (s *Service) link(ctx context.Context, r *request, q *wire.LinkRequest) result {
	if e := checkName(q.NewName); e != 0 {
		return fail(status(e))
	}
	if isDots(q.NewName) {
		return fail(status(syscall.EEXIST))
	}
	p, st := s.partitionToGrow(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var n *inode
	for {
		n, st = p.inodeExclusive(ctx, q.Ino, 0, wire.TxnID{})
		if st != wire.StatusOK {
			return fail(st)
		}
		switch {
		case n.isDir():
			return fail(status(syscall.EPERM))
		case (n.gone() || n.rec.Nlink == 0) && !n.linkable():
			return fail(status(syscall.ENOENT))
		case n.rec.Nlink >= s.cfg.MaxLinks:
			return fail(status(syscall.EMLINK))
		}
		denied := !mayLink(n, r.cred)
		if cluster.PartitionOf(q.NewParent) != p.id {
			if denied {
				// Linux checks the directory and the name first: ask
				// its owner, changing nothing.
				return p.linkDenied(ctx, r, q)
			}
			break
		}
		d := p.inodes[q.NewParent]
		st = p.addEntryChecks(d, q.NewName, r.cred, addCheck{linkDenied: denied})
		if st == wire.StatusLocked {
			if err := p.wait(ctx); err != nil {
				return waitFailed()
			}
			continue
		}
		if st != wire.StatusOK {
			return fail(st)
		}
		now := wire.TimespecOf(s.now())
		rec := linkedRecord(n.rec, now)
		res := ok(&wire.AttrReply{Attr: attrOf(&rec)})
		recs := append(addEntryRecords(d, q.NewName, q.Ino, rec.Mode&wire.ModeType, now), &rec)
		if err := p.commit(nonNil(append(recs, r.record(res))...)...); err != nil {
			return fail(wire.StatusInternal)
		}
		return res
	}
	rec := linkedRecord(n.rec, wire.TimespecOf(s.now()))
	txn, extra := p.newTxn()
	in := &wire.IntentRecord{Txn: txn, Op: wire.IntentLink, Parent: q.NewParent, Name: q.NewName, Ino: q.Ino,
		Type: rec.Mode & wire.ModeType, ClientID: r.key.id, Incarnation: r.key.inc, Seq: r.h.Seq, ReqOp: r.op, Cred: *r.cred}
	if err := p.commit(nonNil(extra, &rec, in)...); err != nil {
		return fail(wire.StatusInternal)
	}
	return p.finishLink(in)
}

// linkedRecord is rec with one more link at now; a linkable orphan
// (O_TMPFILE) gets its first name and is neither any more.
func linkedRecord(rec wire.InodeRecord, now wire.Timespec) wire.InodeRecord {
	rec.Nlink++
	rec.Ctime = now
	rec.Flags &^= wire.InodeOrphan | wire.InodeLinkable
	return rec
}

// linkDenied answers a link that protected_hardlinks refuses, when the
// directory lives elsewhere: its owner's answer to the checks Linux makes
// first (ENOENT, ENOTDIR, EACCES, EEXIST), else EPERM. The caller holds
// p.mu exclusively; it is released while the peer answers.
func (p *partition) linkDenied(ctx context.Context, r *request, q *wire.LinkRequest) result {
	req := &wire.EntryAddRequest{Dir: q.NewParent, Name: q.NewName, Ino: q.Ino, Flags: wire.EntryAddCheckName}
	p.mu.Unlock()
	rh, err := p.svc.peer(ctx, wire.OpEntryAdd, cluster.PartitionOf(q.NewParent), *r.cred, req, &wire.EntryAddReply{})
	p.mu.Lock()
	switch {
	case err != nil:
		return waitFailed()
	case rh.Status != wire.StatusOK:
		return fail(peerStatus(rh.Status))
	}
	return fail(status(syscall.EPERM))
}

// finishLink runs a link intent to its end (also after a restart). The
// caller holds p.mu exclusively.
func (p *partition) finishLink(in *wire.IntentRecord) result {
	req := &wire.EntryAddRequest{Txn: in.Txn, Watermark: p.watermark(), Dir: in.Parent, Name: in.Name, Ino: in.Ino, Type: in.Type}
	p.mu.Unlock()
	var rep wire.EntryAddReply
	rh, err := p.syncThenPeer(wire.OpEntryAdd, cluster.PartitionOf(in.Parent), in.Cred, req, &rep)
	p.mu.Lock()
	if err != nil {
		return fail(wire.StatusNotReady)
	}
	n := p.inodes[in.Ino]
	var res result
	var recs []wire.Record
	if rh.Status == wire.StatusOK {
		res = ok(&wire.AttrReply{Attr: n.attr()})
	} else {
		res = fail(peerStatus(rh.Status))
		rec := n.rec
		rec.Nlink--
		if rec.Nlink == 0 {
			// The first name of an O_TMPFILE file failed: an orphan
			// again.
			rec.Flags |= wire.InodeOrphan | wire.InodeLinkable
		}
		recs = append(recs, &rec)
	}
	recs = append(recs, &wire.IntentDoneRecord{Txn: in.Txn})
	if rr := intentRecord(in, res); rr != nil {
		recs = append(recs, rr)
	}
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}
