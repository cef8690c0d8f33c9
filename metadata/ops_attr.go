package metadata

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// maxFileSize is the largest size a file may have (EFBIG past it).
const maxFileSize = 1 << 60

// noChange is chown's "leave this id alone" (-1).
const noChange = ^uint32(0)

func (s *Service) setattr(ctx context.Context, r *request, q *wire.SetAttrRequest) result {
	p, n, st := s.lockInode(ctx, q.Ino, q.Gen)
	if st != wire.StatusOK {
		return fail(st)
	}
	defer p.mu.Unlock()
	c := r.cred
	v := q.Valid
	if v&wire.SetUID != 0 && q.UID == noChange {
		v &^= wire.SetUID
	}
	if v&wire.SetGID != 0 && q.GID == noChange {
		v &^= wire.SetGID
	}
	rec := n.rec
	// Checks, in the order Linux makes them.
	if v&wire.SetSize != 0 {
		switch {
		case n.isDir():
			return fail(status(syscall.EISDIR))
		case !n.isRegular():
			return fail(status(syscall.EINVAL))
		case q.Size > maxFileSize:
			return fail(status(syscall.EFBIG))
		case v&wire.SetHandle != 0 && s.sessions.hasWriter(r.key, q.Ino):
		case !n.permits(c, wire.AccessWrite):
			return fail(status(syscall.EACCES))
		}
	}
	if v&wire.SetUID != 0 && !c.IsRoot() && !(c.UID == rec.UID && q.UID == rec.UID) {
		return fail(status(syscall.EPERM))
	}
	if v&wire.SetGID != 0 && !c.IsRoot() && !(c.UID == rec.UID && (c.InGroup(q.GID) || q.GID == rec.GID)) {
		return fail(status(syscall.EPERM))
	}
	if v&wire.SetKillSuidGid != 0 && v&(wire.SetSize|wire.SetUID|wire.SetGID) == 0 && !s.sessions.hasWriter(r.key, q.Ino) && !n.permits(c, wire.AccessWrite) {
		// What a write does: only a writer may ask for it alone (a
		// chown, checked above, asks for it too).
		return fail(status(syscall.EACCES))
	}
	if v&wire.SetMode != 0 && !ownerOrRoot(&rec, c) {
		return fail(status(syscall.EPERM))
	}
	if v&(wire.SetAtime|wire.SetMtime) != 0 {
		if !ownerOrRoot(&rec, c) {
			return fail(status(syscall.EPERM))
		}
	} else if v&(wire.SetAtimeNow|wire.SetMtimeNow) != 0 && !ownerOrRoot(&rec, c) && !n.permits(c, wire.AccessWrite) {
		return fail(status(syscall.EACCES))
	}

	now := wire.TimespecOf(s.now())
	changed := false
	if v&wire.SetUID != 0 {
		rec.UID, changed = q.UID, true
	}
	if v&wire.SetGID != 0 {
		rec.GID, changed = q.GID, true
	}
	if v&(wire.SetUID|wire.SetGID) != 0 && !n.isDir() {
		// chown: the group tested is the file's before the change.
		rec.Mode = killPrivs(rec.Mode, n.rec.GID, c)
	}
	if v&wire.SetMode != 0 {
		m := q.Mode & wire.ModePerm
		if !c.IsRoot() && !c.InGroup(rec.GID) {
			m &^= wire.ModeSetgid
		}
		rec.Mode = rec.Mode&wire.ModeType | m
		changed = true
	}
	if v&wire.SetKillSuidGid != 0 {
		rec.Mode, changed = writeKillPrivs(&rec, c), true
	}
	switch {
	case v&wire.SetAtime != 0:
		rec.Atime, changed = q.Atime, true
	case v&wire.SetAtimeNow != 0:
		rec.Atime, changed = now, true
	}
	switch {
	case v&wire.SetMtime != 0:
		rec.Mtime, changed = q.Mtime, true
	case v&wire.SetMtimeNow != 0:
		rec.Mtime, changed = now, true
	}
	if v&wire.SetSize != 0 {
		changed = true
		rec.Mode = writeKillPrivs(&rec, c)
		if v&(wire.SetMtime|wire.SetMtimeNow) == 0 {
			rec.Mtime = now
		}
	}
	if !changed {
		return ok(&wire.AttrReply{Attr: n.attr()})
	}
	rec.Ctime = now
	if v&wire.SetCtime != 0 {
		rec.Ctime = q.Ctime
	}
	// posix_acl_chmod: an access ACL follows the new permission bits.
	var aclRec wire.Record
	if a := n.accessACL(); a != nil && v&wire.SetMode != 0 {
		aclRec = &wire.XattrSetRecord{Ino: rec.Ino, Name: acl.XattrAccess, Value: a.Chmod(rec.Mode).Encode()}
	}
	if v&wire.SetSize != 0 && n.isRegular() && hasBlocksPast(&n.rec, q.Size) {
		// Shrink (or blocks past the size): the other changes now,
		// with the intent; the data beyond the size is freed before
		// the size is published.
		return p.truncate(r, n, rec, aclRec, q.Size)
	}
	attr, keep := n.attrWith(&rec), func() {}
	if v&wire.SetSize != 0 {
		rec.Size = q.Size
		attr, keep = p.resized(n, &rec)
	}
	res := ok(&wire.AttrReply{Attr: attr})
	if err := p.commit(nonNil(&rec, aclRec, r.record(res))...); err != nil {
		return fail(wire.StatusInternal)
	}
	keep()
	return res
}

// nonNil drops nil records.
func nonNil(recs ...wire.Record) []wire.Record {
	out := recs[:0]
	for _, r := range recs {
		if r != nil {
			if ir, ok := r.(*wire.RequestRecord); ok && ir == nil {
				continue
			}
			out = append(out, r)
		}
	}
	return out
}

// truncate shrinks regular file n to size: it appends rec (the request's
// other changes) with a truncate intent, has the chunk service free the
// data beyond size, then publishes the size. The caller holds p.mu
// exclusively; truncate releases it while the data is freed (the intent
// keeps the inode busy).
func (p *partition) truncate(r *request, n *inode, rec wire.InodeRecord, aclRec wire.Record, size uint64) result {
	return p.startTruncate(&wire.IntentRecord{Op: wire.IntentTruncate, Ino: rec.Ino, Size: size,
		ClientID: r.key.id, Incarnation: r.key.inc, Seq: r.h.Seq, ReqOp: r.op, Cred: *r.cred}, &rec, aclRec)
}

// startTruncate gives in a transaction id, appends it after recs, and
// runs it (finishTruncate). The caller holds p.mu exclusively.
func (p *partition) startTruncate(in *wire.IntentRecord, recs ...wire.Record) result {
	txn, extra := p.newTxn()
	in.Txn = txn
	if err := p.commit(nonNil(append(append([]wire.Record{extra}, recs...), in)...)...); err != nil {
		return fail(wire.StatusInternal)
	}
	return p.finishTruncate(in)
}

// finishTruncate runs a truncate intent to its end (also after a
// restart). The caller holds p.mu exclusively.
func (p *partition) finishTruncate(in *wire.IntentRecord) result {
	s := p.svc
	n := p.inodes[in.Ino]
	old := n.rec.Size
	p.mu.Unlock()
	err := p.sync(s.ctx)
	if err == nil {
		err = retry(s.ctx, func() error { return s.cfg.Data.Truncate(s.ctx, in.Ino, old, in.Size) }, s.log, "truncate data")
	}
	p.mu.Lock()
	if err != nil {
		return fail(wire.StatusNotReady)
	}
	rec := n.rec
	if in.Size < rec.Size {
		// A shrink; a trim to the file's own size (trimAhead) changes
		// no time.
		now := wire.TimespecOf(s.now())
		rec.Mtime, rec.Ctime = now, now
	}
	rec.Size = in.Size
	// Nothing lies past the size now; a writer that allocates again
	// marks the inode again (release, endSession).
	rec.Flags &^= wire.InodeHasBlocks
	moved := usageMoves(&n.rec, &rec)
	attr, keep := p.resized(n, &rec)
	res := ok(&wire.AttrReply{Attr: attr})
	recs := []wire.Record{&rec, &wire.IntentDoneRecord{Txn: in.Txn}}
	if in.Seq != 0 {
		recs = append(recs, &wire.RequestRecord{ClientID: in.ClientID, Incarnation: in.Incarnation, Seq: in.Seq, Status: res.status, Reply: res.bytes()})
	}
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	if !moved {
		// The trim freed blocks although the record says nothing
		// moved (the blocks a writer allocated ahead, trimmed at its
		// last close); otherwise the commit counts them again.
		p.noteUsage(in.Ino, usageMoved)
	}
	keep()
	return res
}

// retry calls fn until it succeeds or ctx ends, backing off.
func retry(ctx context.Context, fn func() error, log interface {
	Warn(msg string, args ...any)
}, what string) error {
	backoff := 5 * time.Millisecond
	for {
		err := fn()
		if err == nil {
			return nil
		}
		log.Warn("retrying", "what", what, "err", err)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		backoff = min(2*backoff, time.Second)
	}
}

// lockWrite locks the partition of regular file ino for a write of r's
// caller (a writable open of the caller, or write permission): the
// partition is locked when the status is StatusOK.
func (s *Service) lockWrite(ctx context.Context, r *request, ino uint64) (*partition, *inode, wire.Status) {
	p, st := s.partition(ctx, cluster.PartitionOf(ino))
	if st != wire.StatusOK {
		return nil, nil, st
	}
	p.mu.Lock()
	n, st := p.inodeExclusive(ctx, ino, 0, wire.TxnID{})
	switch {
	case st != wire.StatusOK:
	case n.isDir():
		st = status(syscall.EISDIR)
	case !n.isRegular():
		st = status(syscall.EINVAL)
	case !s.sessions.hasWriter(r.key, ino) && !n.permits(r.cred, wire.AccessWrite):
		st = status(syscall.EACCES)
	}
	if st != wire.StatusOK {
		p.mu.Unlock()
		return nil, nil, st
	}
	return p, n, st
}

func (s *Service) writeCommit(ctx context.Context, r *request, q *wire.WriteCommitRequest) result {
	p, n, st := s.lockWrite(ctx, r, q.Ino)
	if st != wire.StatusOK {
		return fail(st)
	}
	defer p.mu.Unlock()
	if q.Size > maxFileSize {
		return fail(status(syscall.EFBIG))
	}
	rec := n.rec
	rec.Size = max(rec.Size, q.Size)
	mt := q.Mtime
	if mt == (wire.Timespec{}) {
		mt = wire.TimespecOf(s.now())
	}
	rec.Mtime, rec.Ctime = mt, mt
	rec.Mode = writeKillPrivs(&rec, r.cred)
	res := ok(&wire.AttrReply{Attr: n.attrWith(&rec)})
	if err := p.commit(nonNil(&rec, r.record(res))...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}

// appendPlace answers where an O_APPEND write goes: at the end of the
// file as the owner knows it, appends placed and not yet committed
// included, so that concurrent appends of several clients each get a
// range of their own, as appends of several processes do on a local
// file system. It changes memory only: the writer commits the size with
// its data (OpWriteCommit). The permission is the write's: a writable
// open of the caller, or write permission.
func (s *Service) appendPlace(ctx context.Context, r *request, q *wire.AppendRequest) result {
	p, n, st := s.lockWrite(ctx, r, q.Ino)
	if st != wire.StatusOK {
		return fail(st)
	}
	defer p.mu.Unlock()
	off := max(n.rec.Size, n.placed, q.Known)
	if off > maxFileSize || q.Len > maxFileSize-off {
		return fail(status(syscall.EFBIG))
	}
	n.placed = off + q.Len
	return ok(&wire.AppendReply{Offset: off})
}

func (s *Service) open(ctx context.Context, r *request, q *wire.OpenRequest) result {
	p, n, st := s.lockInode(ctx, q.Ino, q.Gen)
	if st != wire.StatusOK {
		return fail(st)
	}
	defer p.mu.Unlock()
	if n.rec.Flags&wire.InodeFreeing != 0 {
		return fail(status(syscall.ENOENT))
	}
	f := q.Flags
	acc := f & wire.OpenAccessMode
	trunc := f&wire.OpenTrunc != 0
	var mask uint32
	switch acc {
	case wire.OpenReadOnly:
		mask = wire.AccessRead
	case wire.OpenWriteOnly:
		mask = wire.AccessWrite
	default:
		mask = wire.AccessRead | wire.AccessWrite
	}
	if trunc {
		mask |= wire.AccessWrite
	}
	switch {
	case n.isSymlink():
		return fail(status(syscall.ELOOP))
	case n.isDir() && (acc != wire.OpenReadOnly || trunc):
		return fail(status(syscall.EISDIR))
	case f&wire.OpenDirectory != 0 && !n.isDir():
		return fail(status(syscall.ENOTDIR))
	case !q.Reclaim && !n.permits(r.cred, mask):
		return fail(status(syscall.EACCES))
	case f&wire.OpenNoAtime != 0 && !ownerOrRoot(&n.rec, r.cred):
		return fail(status(syscall.EPERM))
	}
	p.usageWanted(n)
	res := ok(&wire.AttrReply{Attr: n.attr()})
	if trunc && n.isRegular() && !q.Reclaim {
		rec := n.rec
		rec.Mode = writeKillPrivs(&rec, r.cred)
		if hasBlocksPast(&rec, 0) && stayLocal(ctx, p, true) {
			return fail(wire.StatusNotReady) // the data service frees the blocks
		}
		if hasBlocksPast(&rec, 0) {
			res = p.truncate(r, n, rec, nil, 0)
		} else {
			now := wire.TimespecOf(s.now())
			rec.Mtime, rec.Ctime = now, now
			res = ok(&wire.AttrReply{Attr: n.attrWith(&rec)})
			if err := p.commit(nonNil(&rec, r.record(res))...); err != nil {
				return fail(wire.StatusInternal)
			}
		}
		if res.status != wire.StatusOK {
			return res
		}
	}
	p.addOpen(r.key, n, acc != wire.OpenReadOnly)
	return res
}

// openDir is opendir: the checks of open(O_RDONLY|O_DIRECTORY), the
// open's registration, and the first page of the listing, in one
// request. atime is left to the client (OpTouchAtime when the program
// reads the page and relatime's rule is due), since opening a directory
// does not update it.
func (s *Service) openDir(ctx context.Context, r *request, q *wire.OpenDirRequest) result {
	p, n, st := s.lockInode(ctx, q.Ino, q.Gen)
	if st != wire.StatusOK {
		return fail(st)
	}
	defer p.mu.Unlock()
	switch {
	case n.rec.Flags&wire.InodeFreeing != 0:
		return fail(status(syscall.ENOENT))
	case !n.isDir():
		return fail(status(syscall.ENOTDIR))
	case !n.permits(r.cred, wire.AccessRead):
		return fail(status(syscall.EACCES))
	case q.Flags&wire.OpenNoAtime != 0 && !ownerOrRoot(&n.rec, r.cred):
		return fail(status(syscall.EPERM))
	}
	rep := &wire.OpenDirReply{Attr: n.attr(), Page: *s.listPage(p, n, r.cred, 0, q.MaxBytes, q.MaxEntries)}
	p.addOpen(r.key, n, false)
	return ok(rep)
}

// addOpen registers an open of n by k. The caller holds p.mu exclusively.
func (p *partition) addOpen(k clientKey, n *inode, write bool) {
	n.opens++
	p.svc.sessions.addOpen(k, n.rec.Ino, write, p.svc.now(), p.svc.cfg.SessionLease)
}

func (s *Service) release(ctx context.Context, r *request, q *wire.ReleaseRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	write := q.Flags&wire.OpenAccessMode != wire.OpenReadOnly
	mark := write && q.Flags&wire.ReleaseAllocated != 0
	trim := write && q.Flags&wire.ReleaseTrimAhead != 0
	// On the RPC worker (inline.go) a release only ends the open, in
	// memory: it gives up before changing anything when it would commit
	// (a writer that allocated blocks marks the inode), trim blocks
	// written ahead, or free an orphan with its last open.
	if (mark || trim) && mustNotWait(ctx) {
		return fail(wire.StatusNotReady)
	}
	if !lockPartition(ctx, p) {
		return fail(wire.StatusNotReady)
	}
	defer p.mu.Unlock()
	if n := p.inodes[q.Ino]; n != nil && n.opens <= 1 && n.rec.Flags&wire.InodeOrphan != 0 && mustNotWait(ctx) {
		return fail(wire.StatusNotReady)
	}
	// p.mu before the session table's lock, as open takes them.
	if s.sessions.dropOpen(r.key, q.Ino, write) {
		p.endOpensLocked(q.Ino, 1, mark)
		if trim {
			// Only the end of a write open the client held asks: no
			// one else can make the owner trim a file.
			p.trimAhead(q.Ino)
		}
	}
	return ok(&wire.Empty{})
}

// trimAhead frees, in the background, the blocks past the end of regular
// file ino that a writer had allocated ahead of its writes and never
// wrote, once no open of the file remains (a later open waits for it).
// It is a truncate to the file's own size: an intent that keeps the inode
// busy, the chunk service's trim on every node, then the intent's end;
// the times do not change, since the size does not (finishTruncate; a
// restart finishes it).
func (p *partition) trimAhead(ino uint64) {
	p.svc.goBackground(func(context.Context) {
		p.mu.Lock()
		defer p.mu.Unlock()
		n := p.inodes[ino]
		if n == nil || n.opens > 0 || n.busy || n.pending() || n.gone() || !n.isRegular() {
			return
		}
		p.startTruncate(&wire.IntentRecord{Op: wire.IntentTruncate, Ino: ino, Size: n.rec.Size, ReqOp: wire.OpRelease})
	})
}

// endOpens ends k opens of ino: mark says they were a writer's that may
// have allocated blocks past the size that no commit covers, so the inode
// is marked InodeHasBlocks first (they are freed with it); an orphan left
// without opens is freed.
func (p *partition) endOpens(ino uint64, k int, mark bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.endOpensLocked(ino, k, mark)
}

// endOpensLocked is endOpens with p.mu held.
func (p *partition) endOpensLocked(ino uint64, k int, mark bool) {
	n := p.inodes[ino]
	if n == nil {
		return
	}
	if mark && n.isRegular() && n.rec.Flags&(wire.InodeHasBlocks|wire.InodeFreeing) == 0 {
		rec := n.rec
		rec.Flags |= wire.InodeHasBlocks
		if err := p.commit(&rec); err != nil {
			p.svc.log.Error("marking an inode as holding blocks past its size failed; they may leak", "ino", ino, "err", err)
		}
	}
	n.opens = max(0, n.opens-k)
	if n.opens == 0 && n.rec.Flags&wire.InodeOrphan != 0 && !n.busy {
		p.startFree(n)
	}
}

// hasBlocksPast reports whether regular file rec may hold blocks past
// size: a shrink, or a file marked InodeHasBlocks.
func hasBlocksPast(rec *wire.InodeRecord, size uint64) bool {
	return size < rec.Size || (size == rec.Size && rec.Flags&wire.InodeHasBlocks != 0)
}

// freeOrphans frees the orphans nobody reclaimed (after a restart's
// grace period).
func (p *partition) freeOrphans(ctx context.Context) {
	p.mu.RLock()
	none := len(p.orphans) == 0
	p.mu.RUnlock()
	if none {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for ino := range p.orphans {
		if n := p.inodes[ino]; n != nil && n.opens == 0 && !n.busy {
			p.startFree(n)
		}
	}
}

// freeRecords returns the records that end inode n, which has no links
// and no opens: a regular file with data is marked freeing (its data is
// freed by finishFree, then the inode); anything else goes at once.
func (p *partition) freeRecords(rec *wire.InodeRecord) (recs []wire.Record, async bool) {
	if rec.Mode&wire.ModeType == wire.ModeRegular && (rec.Size > 0 || rec.Flags&wire.InodeHasBlocks != 0) {
		r := *rec
		r.Flags = r.Flags&^wire.InodeOrphan | wire.InodeFreeing
		return []wire.Record{&r}, true
	}
	return []wire.Record{&wire.InodeFreeRecord{Ino: rec.Ino}}, false
}

// startFree frees orphan n. The caller holds p.mu exclusively.
func (p *partition) startFree(n *inode) {
	ino := n.rec.Ino
	recs, async := p.freeRecords(&n.rec)
	if err := p.commit(recs...); err != nil {
		p.svc.log.Error("freeing an orphan failed; it is retried at the next start", "ino", ino, "err", err)
		return
	}
	p.adv.dropInode(ino)
	if async {
		p.svc.goBackground(func(ctx context.Context) { p.finishFree(ctx, ino) })
	}
}

// finishFree frees a freeing inode's data, then the inode (also after a
// restart).
func (p *partition) finishFree(ctx context.Context, ino uint64) {
	p.mu.RLock()
	n := p.inodes[ino]
	var size uint64
	if n != nil {
		size = n.rec.Size
	}
	p.mu.RUnlock()
	if n == nil {
		return
	}
	// The freeing mark is durable before any data goes.
	if err := p.sync(ctx); err != nil {
		return
	}
	if err := retry(ctx, func() error { return p.svc.cfg.Data.Free(ctx, ino, size) }, p.svc.log, "free data"); err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.inodes[ino]; n != nil && n.rec.Flags&wire.InodeFreeing != 0 {
		if err := p.commit(&wire.InodeFreeRecord{Ino: ino}); err != nil {
			p.svc.log.Error("freeing an inode failed; it is retried at the next start", "ino", ino, "err", err)
		}
	}
}

// dropLinkRecords returns the records that remove one link of n (all
// links of a directory) at time now, and whether its data must then be
// freed in the background.
func (p *partition) dropLinkRecords(n *inode, now wire.Timespec) (recs []wire.Record, async bool) {
	rec := n.rec
	rec.Ctime = now
	if n.isDir() {
		rec.Nlink = 0
		rec.Flags |= wire.InodeDead
	} else if rec.Nlink > 0 {
		rec.Nlink--
	}
	if rec.Nlink > 0 {
		return []wire.Record{&rec}, false
	}
	if n.opens > 0 {
		rec.Flags |= wire.InodeOrphan
		return []wire.Record{&rec}, false
	}
	return p.freeRecords(&rec)
}

func (s *Service) setxattr(ctx context.Context, r *request, q *wire.SetXattrRequest) result {
	if q.Flags&^(wire.XattrCreate|wire.XattrReplace) != 0 {
		return fail(status(syscall.EINVAL))
	}
	if e := checkXattrName(q.Name); e != 0 {
		return fail(status(e))
	}
	if len(q.Value) > wire.MaxXattrValueLen {
		return fail(status(syscall.E2BIG))
	}
	if isACLName(q.Name) {
		if len(q.Value) == 0 {
			// setxattr(2) with no value: the VFS removes the ACL.
			return s.setACL(ctx, r, q.Ino, q.Name, nil)
		}
		a, err := acl.Decode(q.Value)
		switch {
		case errors.Is(err, acl.ErrVersion):
			return fail(status(syscall.EOPNOTSUPP))
		case err != nil:
			return fail(status(syscall.EINVAL))
		}
		return s.setACL(ctx, r, q.Ino, q.Name, a)
	}
	return s.xattrChange(ctx, r, q.Ino, q.Name, func(n *inode) ([]wire.Record, syscall.Errno) {
		_, exists := n.xattrs[q.Name]
		switch {
		case q.Flags&wire.XattrCreate != 0 && exists:
			return nil, syscall.EEXIST
		case q.Flags&wire.XattrReplace != 0 && !exists:
			return nil, syscall.ENODATA
		}
		return s.xattrSet(n, q.Name, bytes.Clone(q.Value))
	})
}

// xattrSet is the record that sets xattr name of n to v, or ENOSPC when
// the inode's xattrs would pass MaxXattrTotal or the region has no room
// for more (a value no longer than the one it replaces always fits).
func (s *Service) xattrSet(n *inode, name string, v []byte) ([]wire.Record, syscall.Errno) {
	old, exists := n.xattrs[name]
	switch {
	case n.xbytes-len(old)-boolLen(exists, name)+len(name)+len(v) > wire.MaxXattrTotal:
		return nil, syscall.ENOSPC
	case (!exists || len(v) > len(old)) && s.roomToGrow() != wire.StatusOK:
		return nil, syscall.ENOSPC
	}
	return []wire.Record{&wire.XattrSetRecord{Ino: n.rec.Ino, Name: name, Value: v}}, 0
}

func boolLen(b bool, s string) int {
	if b {
		return len(s)
	}
	return 0
}

func (s *Service) removexattr(ctx context.Context, r *request, q *wire.RemoveXattrRequest) result {
	if e := checkXattrName(q.Name); e != 0 {
		return fail(status(e))
	}
	if isACLName(q.Name) {
		return s.setACL(ctx, r, q.Ino, q.Name, nil)
	}
	return s.xattrChange(ctx, r, q.Ino, q.Name, func(n *inode) ([]wire.Record, syscall.Errno) {
		if _, exists := n.xattrs[q.Name]; !exists {
			return nil, syscall.ENODATA
		}
		return []wire.Record{&wire.XattrRemoveRecord{Ino: q.Ino, Name: q.Name}}, 0
	})
}

// setACL sets (a nil: removes) the POSIX ACL xattr name of ino, as
// Linux's set_posix_acl does: flags do not apply, a default ACL belongs
// to directories only, and an access ACL sets the mode's permission
// bits (posix_acl_update_mode): one the bits can say alone is not kept,
// and the setgid bit goes if the caller is neither in the file's group
// nor root.
func (s *Service) setACL(ctx context.Context, r *request, ino uint64, name string, a acl.ACL) result {
	return s.xattrUpdate(ctx, r, ino, name, func(n *inode, rec *wire.InodeRecord) ([]wire.Record, syscall.Errno) {
		if name == acl.XattrAccess && a != nil {
			perm, equiv := a.EquivMode()
			rec.Mode = rec.Mode&^0o777 | perm
			if !r.cred.IsRoot() && !r.cred.InGroup(rec.GID) {
				rec.Mode &^= wire.ModeSetgid
			}
			if equiv {
				a = nil // the bits say it all: keep no ACL
			}
		}
		_, exists := n.xattrs[name]
		switch {
		case name == acl.XattrDefault && a != nil && !n.isDir():
			return nil, syscall.EACCES
		case a == nil && exists:
			return []wire.Record{&wire.XattrRemoveRecord{Ino: ino, Name: name}}, 0
		case a == nil:
			return nil, 0
		}
		return s.xattrSet(n, name, a.Encode())
	})
}

// isACLName reports whether name is one of the POSIX ACL xattrs.
func isACLName(name string) bool { return name == acl.XattrAccess || name == acl.XattrDefault }

// xattrChange checks the caller may write xattr name of ino and appends
// what change returns with the inode's new ctime.
func (s *Service) xattrChange(ctx context.Context, r *request, ino uint64, name string,
	change func(n *inode) ([]wire.Record, syscall.Errno)) result {
	return s.xattrUpdate(ctx, r, ino, name, func(n *inode, _ *wire.InodeRecord) ([]wire.Record, syscall.Errno) {
		return change(n)
	})
}

// xattrUpdate is xattrChange whose change may also edit the inode's
// record (rec, a copy of n's).
func (s *Service) xattrUpdate(ctx context.Context, r *request, ino uint64, name string,
	change func(n *inode, rec *wire.InodeRecord) ([]wire.Record, syscall.Errno)) result {
	p, st := s.partition(ctx, cluster.PartitionOf(ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n, st := p.inodeExclusive(ctx, ino, 0, wire.TxnID{})
	if st != wire.StatusOK {
		return fail(st)
	}
	if e := xattrPermission(n, name, r.cred, true); e != 0 {
		return fail(status(e))
	}
	rec := n.rec
	recs, e := change(n, &rec)
	if e != 0 {
		return fail(status(e))
	}
	rec.Ctime = wire.TimespecOf(s.now())
	res := ok(&wire.Empty{})
	recs = append(recs, &rec)
	if err := p.commit(nonNil(append(recs, r.record(res))...)...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}

func (s *Service) advisoryLock(ctx context.Context, r *request, q *wire.LockRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	_, st = p.inodeShared(ctx, q.Ino, 0)
	p.mu.RUnlock()
	if st != wire.StatusOK {
		return fail(st)
	}
	want := heldLock{client: r.key.id, Lock: q.Lock}
	if r.op == wire.OpGetLk {
		return ok(&wire.LockReply{Lock: p.adv.test(q.Ino, want)})
	}
	if q.Lock.Type != wire.LockUnlock {
		s.sessions.touch(r.key, s.now(), s.cfg.SessionLease)
	}
	if e := p.adv.set(q.Ino, want); e != 0 {
		return fail(status(e))
	}
	return ok(&wire.Empty{})
}
