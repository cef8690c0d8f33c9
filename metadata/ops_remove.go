package metadata

import (
	"context"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
)

// resolveEntry finds the inode name names in parent, at parent's owner
// (this node): for requests that arrive without the inode, it checks
// what Linux's path walk checks and returns the inode.
func (s *Service) resolveEntry(ctx context.Context, c *wire.Cred, parent uint64, name string) (uint64, wire.Status) {
	p, st := s.partition(ctx, cluster.PartitionOf(parent))
	if st != wire.StatusOK {
		return 0, st
	}
	if !rlockPartition(ctx, p) {
		return 0, wire.StatusNotReady
	}
	defer p.mu.RUnlock()
	d, st := p.inodeShared(ctx, parent, 0)
	switch {
	case st != wire.StatusOK:
		return 0, st
	case !d.isDir():
		return 0, status(syscall.ENOTDIR)
	case !d.permits(c, wire.AccessExec):
		return 0, status(syscall.EACCES)
	}
	e := d.dir.get(name)
	if e == nil {
		return 0, status(syscall.ENOENT)
	}
	return e.ino, wire.StatusOK
}

func (s *Service) remove(ctx context.Context, r *request, q *wire.UnlinkRequest) result {
	isDir := r.op == wire.OpRmdir
	switch q.Name {
	case ".":
		if isDir {
			return fail(status(syscall.EINVAL))
		}
		return fail(status(syscall.EISDIR))
	case "..":
		if isDir {
			return fail(status(syscall.ENOTEMPTY))
		}
		return fail(status(syscall.EISDIR))
	}
	if e := checkName(q.Name); e != 0 {
		return fail(status(e))
	}
	ino := q.Ino
	if ino == 0 {
		var st wire.Status
		if ino, st = s.resolveEntry(ctx, r.cred, q.Parent, q.Name); st != wire.StatusOK {
			return fail(st)
		}
		if !s.owns(cluster.PartitionOf(ino)) {
			return result{status: wire.StatusRedirect, ino: ino}
		}
	}
	b, st := s.partition(ctx, cluster.PartitionOf(ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	if stayLocal(ctx, b, cluster.PartitionOf(q.Parent) != b.id) || !lockPartition(ctx, b) {
		return fail(wire.StatusNotReady)
	}
	defer b.mu.Unlock()
	var n *inode
	for {
		n = b.inodes[ino]
		if n == nil || n.gone() {
			return fail(status(syscall.ENOENT))
		}
		if !n.pending() && !n.busy && !b.inodeLocked(ino, wire.TxnID{}) && !(n.isDir() && b.dirLocks[ino] > 0) {
			break
		}
		if err := b.wait(ctx); err != nil {
			return waitFailed()
		}
	}
	now := wire.TimespecOf(s.now())
	if cluster.PartitionOf(q.Parent) == b.id {
		// Directory and inode in one partition: one append.
		for {
			d := b.inodes[q.Parent]
			st, other := b.removeEntryChecks(d, q.Name, ino, n.rec.UID, isDir, r.cred)
			if st == wire.StatusLocked {
				if err := b.wait(ctx); err != nil {
					return waitFailed()
				}
				if n = b.inodes[ino]; n == nil || n.busy || n.gone() {
					return fail(wire.StatusNotReady)
				}
				continue
			}
			if st == wire.StatusRedirect {
				return result{status: st, ino: other}
			}
			if st != wire.StatusOK {
				return fail(st)
			}
			if isDir && n.dir.len() > 0 {
				return fail(status(syscall.ENOTEMPTY))
			}
			recs := removeEntryRecords(d, q.Name, isDir, now)
			res := ok(&wire.DirReply{HasDir: true, Dir: attrOf(recs[1].(*wire.InodeRecord))})
			drop, async := b.dropLinkRecords(n, now)
			recs = append(recs, drop...)
			if err := b.commit(nonNil(append(recs, r.record(res))...)...); err != nil {
				return fail(wire.StatusInternal)
			}
			if async {
				s.goBackground(func(ctx context.Context) { b.finishFree(ctx, ino) })
			}
			return res
		}
	}
	// The directory lives elsewhere: an intent here, the entry removal
	// there, the link count here.
	var mine syscall.Errno
	switch {
	case isDir && !n.isDir():
		mine = syscall.ENOTDIR
	case !isDir && n.isDir():
		mine = syscall.EISDIR
	case isDir && n.dir.len() > 0:
		mine = syscall.ENOTEMPTY
	}
	if mine != 0 {
		// Linux checks the directory first: ask it, changing nothing.
		req := &wire.EntryRemoveRequest{Dir: q.Parent, Name: q.Name, Ino: ino, VictimUID: n.rec.UID, IsDir: n.isDir(), CheckOnly: true}
		b.mu.Unlock()
		rh, err := s.peer(ctx, wire.OpEntryRemove, cluster.PartitionOf(q.Parent), *r.cred, req, &wire.DirReply{})
		b.mu.Lock()
		switch {
		case err != nil:
			return waitFailed()
		case rh.Status == wire.StatusRedirect:
			return result{status: rh.Status, ino: rh.Ino}
		case rh.Status != wire.StatusOK:
			return fail(peerStatus(rh.Status))
		}
		return fail(status(mine))
	}
	txn, extra := b.newTxn()
	op := wire.IntentUnlink
	if isDir {
		op = wire.IntentRmdir
	}
	in := &wire.IntentRecord{Txn: txn, Op: op, Parent: q.Parent, Name: q.Name, Ino: ino, Type: n.rec.Mode & wire.ModeType,
		ClientID: r.key.id, Incarnation: r.key.inc, Seq: r.h.Seq, ReqOp: r.op, Cred: *r.cred}
	recs := []wire.Record{extra, in}
	if isDir {
		// Dead from now on: no entry can be added while the removal is
		// decided elsewhere.
		rec := n.rec
		rec.Flags |= wire.InodeDead
		recs = append(recs, &rec)
	}
	if err := b.commit(nonNil(recs...)...); err != nil {
		return fail(wire.StatusInternal)
	}
	return b.finishRemove(in)
}

// finishRemove runs an unlink or rmdir intent to its end (also after a
// restart). The caller holds p.mu exclusively.
func (p *partition) finishRemove(in *wire.IntentRecord) result {
	s := p.svc
	n := p.inodes[in.Ino]
	isDir := in.Op == wire.IntentRmdir
	req := &wire.EntryRemoveRequest{Txn: in.Txn, Watermark: p.watermark(), Dir: in.Parent, Name: in.Name, Ino: in.Ino,
		VictimUID: n.rec.UID, IsDir: n.isDir()}
	p.mu.Unlock()
	var rep wire.DirReply
	rh, err := p.syncThenPeer(wire.OpEntryRemove, cluster.PartitionOf(in.Parent), in.Cred, req, &rep)
	p.mu.Lock()
	if err != nil {
		return fail(wire.StatusNotReady)
	}
	n = p.inodes[in.Ino]
	now := wire.TimespecOf(s.now())
	var (
		res   result
		recs  []wire.Record
		async bool
	)
	if rh.Status == wire.StatusOK {
		res = ok(&wire.DirReply{HasDir: rep.HasDir && rep.Dir.Ino == in.Parent, Dir: rep.Dir})
		recs, async = p.dropLinkRecords(n, now)
	} else {
		res = fail(peerStatus(rh.Status))
		if rh.Status == wire.StatusRedirect {
			res.ino = rh.Ino
		}
		if isDir {
			rec := n.rec
			rec.Flags &^= wire.InodeDead
			recs = append(recs, &rec)
		}
	}
	recs = append(recs, &wire.IntentDoneRecord{Txn: in.Txn})
	if rr := intentRecord(in, res); rr != nil {
		recs = append(recs, rr)
	}
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	if async {
		ino := in.Ino
		s.goBackground(func(ctx context.Context) { p.finishFree(ctx, ino) })
	}
	return res
}
