package metadata

import (
	"context"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// The directory side of create, link, unlink and rmdir: conditional,
// idempotent entry operations a coordinator (the owner of the inode
// whose link count changes) dispatches to the directory's owner. Each is
// one append, recording its answer under the transaction id so that a
// re-dispatch after a crash gets the same answer.

// txAnswer returns the recorded answer of txn, if any. The caller holds
// p.mu exclusively.
func (p *partition) txAnswer(txn wire.TxnID, watermark uint64) (result, bool) {
	p.pruneResults(txn.Partition, watermark)
	if m := p.txResults[txn.Partition]; m != nil {
		if a, ok := m[txn.Seq]; ok {
			return result{status: a.status, raw: orEmpty(a.reply, a.status)}, true
		}
	}
	return result{}, false
}

func orEmpty(b []byte, st wire.Status) []byte {
	if b == nil && st == wire.StatusOK {
		return []byte{}
	}
	return b
}

func (s *Service) entryAdd(ctx context.Context, r *request, q *wire.EntryAddRequest) result {
	if e := checkName(q.Name); e != 0 {
		return fail(status(e))
	}
	p, st := s.partition(ctx, cluster.PartitionOf(q.Dir))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	nameOnly := q.Flags&wire.EntryAddCheckName != 0
	if !nameOnly {
		if a, found := p.txAnswer(q.Txn, q.Watermark); found {
			return a
		}
		// The coordinator frees the new inode on an errno.
		if st := s.roomToGrow(); st != wire.StatusOK {
			return fail(st)
		}
	}
	var d *inode
	for {
		d = p.inodes[q.Dir]
		st = p.addEntryChecks(d, q.Name, r.cred, addCheck{newIsDir: q.Type == wire.ModeDir, nameOnly: nameOnly})
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
	if nameOnly {
		return ok(&wire.EntryAddReply{DirMode: d.rec.Mode, DirUID: d.rec.UID, DirGID: d.rec.GID})
	}
	now := wire.TimespecOf(s.now())
	recs := addEntryRecords(d, q.Name, q.Ino, q.Type, now)
	rep := &wire.EntryAddReply{DirMode: d.rec.Mode, DirUID: d.rec.UID, DirGID: d.rec.GID,
		Cookie: recs[0].(*wire.EntryAddRecord).Cookie, Dir: attrOf(recs[1].(*wire.InodeRecord)),
		DirDefaultACL: d.xattrs[acl.XattrDefault]}
	res := ok(rep)
	recs = append(recs, &wire.TxResultRecord{Txn: q.Txn, Status: wire.StatusOK, Reply: res.bytes()})
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}

// removeEntryChecks is what removing name (naming ino, of victimUID) from
// directory d requires. It returns StatusOK, StatusLocked (wait),
// StatusRedirect with the inode the entry names, or the errno.
func (p *partition) removeEntryChecks(d *inode, name string, ino uint64, victimUID uint32, isDir bool, c *wire.Cred) (wire.Status, uint64) {
	switch {
	case d == nil:
		return status(syscall.ENOENT), 0
	case d.pending():
		return wire.StatusLocked, 0
	case !d.isDir():
		return status(syscall.ENOTDIR), 0
	case !d.permits(c, wire.AccessExec):
		return status(syscall.EACCES), 0
	}
	e := d.dir.get(name)
	switch {
	case e == nil:
		return status(syscall.ENOENT), 0
	case e.ino != ino:
		return wire.StatusRedirect, e.ino
	case p.entryLocked(d.rec.Ino, name, wire.TxnID{}):
		return wire.StatusLocked, 0
	case !d.permits(c, wire.AccessWrite):
		return status(syscall.EACCES), 0
	case stickyBlocks(&d.rec, victimUID, c):
		return status(syscall.EPERM), 0
	case isDir && e.typ != wire.ModeDir:
		return status(syscall.ENOTDIR), 0
	case !isDir && e.typ == wire.ModeDir:
		return status(syscall.EISDIR), 0
	}
	return wire.StatusOK, 0
}

// removeEntryRecords returns the records that remove name from d at now.
func removeEntryRecords(d *inode, name string, isDir bool, now wire.Timespec) []wire.Record {
	drec := d.rec
	drec.Mtime, drec.Ctime = now, now
	if isDir && drec.Nlink > 2 {
		drec.Nlink--
	}
	return []wire.Record{&wire.EntryRemoveRecord{Dir: drec.Ino, Name: name}, &drec}
}

func (s *Service) entryRemove(ctx context.Context, r *request, q *wire.EntryRemoveRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Dir))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !q.CheckOnly {
		if a, found := p.txAnswer(q.Txn, q.Watermark); found {
			return a
		}
	}
	var d *inode
	for {
		d = p.inodes[q.Dir]
		var other uint64
		st, other = p.removeEntryChecks(d, q.Name, q.Ino, q.VictimUID, q.IsDir, r.cred)
		if st == wire.StatusRedirect {
			return result{status: st, ino: other}
		}
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
	if q.CheckOnly {
		return ok(&wire.Empty{})
	}
	recs := removeEntryRecords(d, q.Name, q.IsDir, wire.TimespecOf(s.now()))
	res := ok(&wire.DirReply{HasDir: true, Dir: attrOf(recs[1].(*wire.InodeRecord))})
	recs = append(recs, &wire.TxResultRecord{Txn: q.Txn, Status: wire.StatusOK, Reply: res.bytes()})
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}
