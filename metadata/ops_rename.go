package metadata

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// Rename is a collect-dispatch transaction coordinated by the owner of
// the source inode (see docs/metadata.md):
//
//  1. lock: persistent locks (LockRecords) at every partition involved,
//     on the source and target entries, the source inode, and for a
//     directory moving to another parent the cluster-wide rename lock;
//     then the replaced inode, once the target entry names it. Locks
//     are tried, never waited for: a conflict aborts and retries.
//  2. collect and check, as Linux's vfs_rename does, with the loop check
//     under the rename lock.
//  3. decide: one append of the DecisionRecord at the coordinator.
//  4. dispatch: each partition applies its updates and releases its
//     locks in one append (idempotent: a partition applies a transaction
//     only while it holds its locks).
//  5. done: one append (with the request's answer).
//
// A coordinator that restarts re-dispatches its decisions; a
// participant holding locks of a transaction asks its coordinator, which
// answers "aborted" for any transaction it neither decided nor is
// working on.

func (s *Service) rename(ctx context.Context, r *request, q *wire.RenameRequest) result {
	if q.Flags&^(wire.RenameNoReplace|wire.RenameExchange|wire.RenameWhiteout) != 0 ||
		q.Flags&wire.RenameWhiteout != 0 ||
		q.Flags&(wire.RenameNoReplace|wire.RenameExchange) == wire.RenameNoReplace|wire.RenameExchange {
		return fail(status(syscall.EINVAL))
	}
	if isDots(q.SrcName) {
		return fail(status(syscall.EBUSY))
	}
	if isDots(q.DstName) {
		if q.Flags&wire.RenameNoReplace != 0 {
			return fail(status(syscall.EEXIST))
		}
		return fail(status(syscall.EBUSY))
	}
	for _, name := range []string{q.SrcName, q.DstName} {
		if e := checkName(name); e != 0 {
			return fail(status(e))
		}
	}
	src := q.SrcIno
	if src == 0 {
		var st wire.Status
		if src, st = s.resolveEntry(ctx, r.cred, q.SrcParent, q.SrcName); st != wire.StatusOK {
			return fail(st)
		}
		if !s.owns(cluster.PartitionOf(src)) {
			return result{status: wire.StatusRedirect, ino: src}
		}
	}
	c, st := s.partition(ctx, cluster.PartitionOf(src))
	if st != wire.StatusOK {
		return fail(st)
	}
	return c.renameCoordinate(ctx, r, q, src)
}

// renameTxn is one rename attempt's state at its coordinator.
type renameTxn struct {
	c      *partition
	txn    wire.TxnID
	cred   wire.Cred
	locked map[uint32]bool // partitions sent a lock request
}

func (c *partition) renameCoordinate(ctx context.Context, r *request, q *wire.RenameRequest, src uint64) result {
	c.mu.Lock()
	n := c.inodes[src]
	if n == nil || n.gone() {
		c.mu.Unlock()
		return fail(status(syscall.ENOENT))
	}
	sType := n.rec.Mode & wire.ModeType
	txn, extra := c.newTxn()
	if extra != nil {
		if err := c.commit(extra); err != nil {
			c.mu.Unlock()
			return fail(wire.StatusInternal)
		}
	}
	c.active[txn] = true
	c.mu.Unlock()
	// The sequence reservation is durable before the id escapes.
	if err := c.sync(ctx); err != nil {
		c.mu.Lock()
		delete(c.active, txn)
		c.mu.Unlock()
		return fail(wire.StatusNotReady)
	}
	t := &renameTxn{c: c, txn: txn, cred: *r.cred, locked: map[uint32]bool{}}
	backoff := time.Millisecond
	for {
		res, retry := t.attempt(ctx, r, q, src, sType)
		if !retry {
			return res
		}
		t.abort()
		wait := backoff + time.Duration(rand.Int64N(int64(backoff)))
		backoff = min(2*backoff, 50*time.Millisecond)
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-ctx.Done():
			tm.Stop()
			t.finishAborted()
			return fail(wire.StatusNotReady)
		}
	}
}

func itemPartition(it wire.LockItem) uint32 {
	if it.Kind == wire.LockItemRename {
		return cluster.PartitionOf(cluster.RootInode)
	}
	return cluster.PartitionOf(it.Ino)
}

// lockAll locks items, grouped by partition, in parallel. It returns the
// results by item index and the first failure (StatusLocked first, then
// errnos in item order).
func (t *renameTxn) lockAll(ctx context.Context, items []wire.LockItem) ([]wire.LockResult, wire.Status) {
	groups := map[uint32][]int{}
	for i, it := range items {
		p := itemPartition(it)
		groups[p] = append(groups[p], i)
	}
	results := make([]wire.LockResult, len(items))
	statuses := make([]wire.Status, len(items))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, part := range slices.Sorted(maps.Keys(groups)) {
		idx := groups[part]
		var its []wire.LockItem
		for _, i := range idx {
			its = append(its, items[i])
		}
		t.locked[part] = true
		wg.Go(func() {
			var rep wire.TxLockReply
			rh, err := t.c.svc.peer(ctx, wire.OpTxLock, part, t.cred, &wire.TxLockRequest{Txn: t.txn, Items: its}, &rep)
			mu.Lock()
			defer mu.Unlock()
			for k, i := range idx {
				switch {
				case err != nil:
					statuses[i] = wire.StatusNotReady
				case rh.Status != wire.StatusOK:
					statuses[i] = rh.Status
				case len(rep.Results) != len(its):
					statuses[i] = wire.StatusBadRequest
				default:
					results[i] = rep.Results[k]
				}
			}
		})
	}
	wg.Wait()
	for _, st := range statuses {
		if st == wire.StatusLocked || st == wire.StatusNotReady {
			return results, st
		}
	}
	for _, st := range statuses {
		if st != wire.StatusOK {
			return results, st
		}
	}
	return results, wire.StatusOK
}

// attempt runs one try of the lock and check phases, and, if the checks
// pass, the decision and its dispatch. retry says the locks met another
// transaction's: abort and try again.
func (t *renameTxn) attempt(ctx context.Context, r *request, q *wire.RenameRequest, src uint64, sType uint32) (res result, retry bool) {
	s := t.c.svc
	exchange := q.Flags&wire.RenameExchange != 0
	sameDir := q.SrcParent == q.DstParent
	sIsDir := sType == wire.ModeDir
	items := []wire.LockItem{{Kind: wire.LockItemEntry, Ino: q.SrcParent, Name: q.SrcName}}
	dstIdx := 0
	if !(sameDir && q.SrcName == q.DstName) {
		items = append(items, wire.LockItem{Kind: wire.LockItemEntry, Ino: q.DstParent, Name: q.DstName})
		dstIdx = 1
	}
	srcIdx := len(items)
	items = append(items, wire.LockItem{Kind: wire.LockItemInode, Ino: src})
	if !sameDir && (sIsDir || exchange) {
		items = append(items, wire.LockItem{Kind: wire.LockItemRename})
	}
	got, st := t.lockAll(ctx, items)
	switch {
	case st == wire.StatusLocked || st == wire.StatusNotReady:
		if ctx.Err() != nil {
			return t.failed(wire.StatusNotReady), false
		}
		return result{}, true
	case st != wire.StatusOK:
		return t.failed(peerStatus(st)), false
	}
	sp, dp, sa := got[0], got[dstIdx], got[srcIdx]
	dpAttr := &dp.Attr
	c := &t.cred
	// Path walk: search permission on both directories.
	if !permitsLocked(&sp, c, wire.AccessExec) || !permitsLocked(&dp, c, wire.AccessExec) {
		return t.failed(status(syscall.EACCES)), false
	}
	switch {
	case sp.Ino == 0:
		return t.failed(status(syscall.ENOENT)), false
	case sp.Ino != src:
		// The client's inode hint is stale: start over at the owner of
		// the inode the entry names.
		return t.failedRedirect(sp.Ino), false
	}
	tIno := dp.Ino
	if exchange && tIno == 0 {
		return t.failed(status(syscall.ENOENT)), false
	}
	if q.Flags&wire.RenameNoReplace != 0 && tIno != 0 {
		return t.failed(status(syscall.EEXIST)), false
	}
	var ta wire.LockResult
	tIsDir := false
	if tIno != 0 && tIno != src {
		tItems := []wire.LockItem{{Kind: wire.LockItemInode, Ino: tIno}}
		got, st := t.lockAll(ctx, tItems)
		switch {
		case st == wire.StatusLocked || st == wire.StatusNotReady || st == status(syscall.ENOENT):
			if ctx.Err() != nil {
				return t.failed(wire.StatusNotReady), false
			}
			return result{}, true
		case st != wire.StatusOK:
			return t.failed(peerStatus(st)), false
		}
		ta = got[0]
		tIsDir = ta.Attr.Mode&wire.ModeType == wire.ModeDir
	}
	// A directory must not move into its own subtree (checked under the
	// cluster-wide rename lock, so the ancestry cannot change meanwhile).
	if !sameDir {
		if sIsDir {
			if e := t.loopCheck(ctx, q.DstParent, src); e != 0 {
				return t.failed(status(e)), false
			}
		}
		if exchange && tIsDir {
			if e := t.loopCheck(ctx, q.SrcParent, tIno); e != 0 {
				return t.failed(status(e)), false
			}
		}
	}
	if tIno == src {
		// Both names are links to one inode: nothing to do.
		return t.failed(wire.StatusOK), false
	}
	// may_delete(source), then may_delete(target) or may_create.
	if e := mayDelete(&sp, sa.Attr.UID, c); e != 0 {
		return t.failed(status(e)), false
	}
	if tIno != 0 {
		if e := mayDelete(&dp, ta.Attr.UID, c); e != 0 {
			return t.failed(status(e)), false
		}
		if !exchange {
			if sIsDir && !tIsDir {
				return t.failed(status(syscall.ENOTDIR)), false
			}
			if !sIsDir && tIsDir {
				return t.failed(status(syscall.EISDIR)), false
			}
		}
	} else if !permitsLocked(&dp, c, wire.AccessWrite) {
		return t.failed(status(syscall.EACCES)), false
	}
	// A directory moving to another parent rewrites its "..".
	if !sameDir {
		if sIsDir && !permitsLocked(&sa, c, wire.AccessWrite) {
			return t.failed(status(syscall.EACCES)), false
		}
		if exchange && tIsDir && !permitsLocked(&ta, c, wire.AccessWrite) {
			return t.failed(status(syscall.EACCES)), false
		}
	}
	if !exchange && tIsDir && !ta.Empty {
		return t.failed(status(syscall.ENOTEMPTY)), false
	}
	if !sameDir && sIsDir && !tIsDir && dpAttr.Nlink >= s.cfg.MaxLinks {
		return t.failed(status(syscall.EMLINK)), false
	}

	// Decide.
	parts := map[uint32][]wire.TxOp{}
	add := func(p uint32, op wire.TxOp) { parts[p] = append(parts[p], op) }
	spPart, dpPart := cluster.PartitionOf(q.SrcParent), cluster.PartitionOf(q.DstParent)
	b2i := func(b bool) int32 {
		if b {
			return 1
		}
		return 0
	}
	var spDelta, dpDelta int32
	if exchange {
		spDelta, dpDelta = b2i(tIsDir)-b2i(sIsDir), b2i(sIsDir)-b2i(tIsDir)
	} else {
		spDelta, dpDelta = -b2i(sIsDir), b2i(sIsDir)-b2i(tIsDir)
	}
	if exchange {
		add(spPart, wire.TxOp{Kind: wire.TxEntrySet, Ino: q.SrcParent, Name: q.SrcName, Target: tIno, Type: dp.Type})
	} else {
		add(spPart, wire.TxOp{Kind: wire.TxEntryDel, Ino: q.SrcParent, Name: q.SrcName})
	}
	add(dpPart, wire.TxOp{Kind: wire.TxEntrySet, Ino: q.DstParent, Name: q.DstName, Target: src, Type: sp.Type})
	if sameDir {
		add(spPart, wire.TxOp{Kind: wire.TxDirTouch, Ino: q.SrcParent, Delta: spDelta + dpDelta})
	} else {
		add(spPart, wire.TxOp{Kind: wire.TxDirTouch, Ino: q.SrcParent, Delta: spDelta})
		add(dpPart, wire.TxOp{Kind: wire.TxDirTouch, Ino: q.DstParent, Delta: dpDelta})
	}
	srcOp := wire.TxOp{Kind: wire.TxInodeTouch, Ino: src}
	if sIsDir && !sameDir {
		srcOp.Target = q.DstParent
	}
	add(cluster.PartitionOf(src), srcOp)
	if tIno != 0 {
		if exchange {
			op := wire.TxOp{Kind: wire.TxInodeTouch, Ino: tIno}
			if tIsDir && !sameDir {
				op.Target = q.SrcParent
			}
			add(cluster.PartitionOf(tIno), op)
		} else {
			add(cluster.PartitionOf(tIno), wire.TxOp{Kind: wire.TxInodeDrop, Ino: tIno})
		}
	}
	for p := range t.locked {
		if _, ok := parts[p]; !ok {
			parts[p] = nil
		}
	}
	dec := &wire.DecisionRecord{Txn: t.txn, ClientID: r.key.id, Incarnation: r.key.inc, Seq: r.h.Seq,
		Now: wire.TimespecOf(s.now())}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		dec.Parts = append(dec.Parts, wire.TxPart{Partition: p, Ops: parts[p]})
	}
	cp := t.c
	cp.mu.Lock()
	err := cp.commit(dec)
	delete(cp.active, t.txn)
	cp.mu.Unlock()
	if err != nil {
		// Not decided: abort.
		t.abort()
		return fail(wire.StatusInternal), false
	}
	return cp.finishDecision(dec), false
}

// permitsLocked is permits on what a lock collected: the attributes
// and the access ACL.
func permitsLocked(x *wire.LockResult, c *wire.Cred, mask uint32) bool {
	r := wire.InodeRecord{Mode: x.Attr.Mode, UID: x.Attr.UID, GID: x.Attr.GID}
	return permits(&r, x.ACL, c, mask)
}

// mayDelete is Linux's may_delete on what a lock collected of a
// directory: write and search permission, then the sticky bit.
func mayDelete(x *wire.LockResult, victimUID uint32, c *wire.Cred) syscall.Errno {
	if !permitsLocked(x, c, wire.AccessWrite|wire.AccessExec) {
		return syscall.EACCES
	}
	dir := &x.Attr
	r := wire.InodeRecord{Mode: dir.Mode, UID: dir.UID}
	if stickyBlocks(&r, victimUID, c) {
		return syscall.EPERM
	}
	return 0
}

// loopCheck walks from dir up to the root and reports EINVAL if it
// passes moved (a directory must not move into its own subtree). The
// caller holds the cluster-wide rename lock, so the ancestry is stable.
func (t *renameTxn) loopCheck(ctx context.Context, dir, moved uint64) syscall.Errno {
	for range 1 << 16 {
		if dir == moved {
			return syscall.EINVAL
		}
		if dir == cluster.RootInode {
			return 0
		}
		var rep wire.GetParentReply
		rh, err := t.c.svc.peer(ctx, wire.OpGetParent, cluster.PartitionOf(dir), t.cred, &wire.InoRequest{Ino: dir}, &rep)
		if err != nil || rh.Status != wire.StatusOK {
			return syscall.EIO
		}
		dir = rep.Parent
	}
	return syscall.ELOOP
}

// failed ends the transaction without a decision: it is no longer
// active (so every participant learns it aborted), its locks are
// released, and st is the answer.
func (t *renameTxn) failed(st wire.Status) result {
	t.finishAborted()
	t.abort()
	if st == wire.StatusOK {
		return ok(&wire.Empty{})
	}
	return fail(st)
}

func (t *renameTxn) failedRedirect(ino uint64) result {
	res := t.failed(wire.StatusRedirect)
	res.ino = ino
	return res
}

func (t *renameTxn) finishAborted() {
	t.c.mu.Lock()
	delete(t.c.active, t.txn)
	t.c.mu.Unlock()
}

// abort releases the locks at every partition sent a lock request, best
// effort: a participant that misses it asks the coordinator later.
func (t *renameTxn) abort() {
	s := t.c.svc
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for part := range t.locked {
		wg.Go(func() {
			_, _ = s.peer(ctx, wire.OpTxAbort, part, t.cred, &wire.TxRequest{Txn: t.txn, Partition: part}, &wire.Empty{})
		})
	}
	wg.Wait()
	clear(t.locked)
}

// finishDecision dispatches a decision to every participant until each
// applied it, then appends its end (also after a restart).
func (c *partition) finishDecision(dec *wire.DecisionRecord) result {
	s := c.svc
	c.mu.RLock()
	wm := c.watermark()
	c.mu.RUnlock()
	// The decision is durable before any participant applies it.
	if err := c.sync(s.ctx); err != nil {
		return fail(wire.StatusNotReady)
	}
	var wg sync.WaitGroup
	for _, part := range dec.Parts {
		wg.Go(func() {
			req := &wire.TxApplyRequest{Txn: dec.Txn, Watermark: wm, Partition: part.Partition, Now: dec.Now, Ops: part.Ops}
			_ = retry(s.ctx, func() error {
				rh, err := s.peer(s.ctx, wire.OpTxApply, part.Partition, wire.Cred{}, req, &wire.Empty{})
				if err == nil && rh.Status != wire.StatusOK {
					err = fmt.Errorf("partition %d answered %v", part.Partition, rh.Status)
				}
				return err
			}, s.log, "dispatch a decided rename")
		})
	}
	wg.Wait()
	if s.ctx.Err() != nil {
		return fail(wire.StatusNotReady)
	}
	res := ok(&wire.Empty{})
	recs := []wire.Record{&wire.TxDoneRecord{Txn: dec.Txn}}
	if dec.Seq != 0 {
		recs = append(recs, &wire.RequestRecord{ClientID: dec.ClientID, Incarnation: dec.Incarnation, Seq: dec.Seq, Status: res.status, Reply: res.bytes()})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	return res
}

// txLock takes a transaction's locks at this partition and collects
// their state. It never waits: a conflict answers StatusLocked.
func (s *Service) txLock(ctx context.Context, r *request, q *wire.TxLockRequest) result {
	if len(q.Items) == 0 {
		return fail(wire.StatusBadRequest)
	}
	part := itemPartition(q.Items[0])
	for _, it := range q.Items {
		if itemPartition(it) != part {
			return fail(wire.StatusBadRequest)
		}
	}
	p, st := s.partition(ctx, part)
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rep := &wire.TxLockReply{Results: make([]wire.LockResult, len(q.Items))}
	var errSt wire.Status
	var fresh []wire.LockItem
	for i, it := range q.Items {
		var res wire.LockResult
		var ist wire.Status
		switch it.Kind {
		case wire.LockItemEntry:
			res, ist = p.lockEntry(q.Txn, it.Ino, it.Name)
		case wire.LockItemInode:
			res, ist = p.lockInode(q.Txn, it.Ino)
		case wire.LockItemRename:
			if t := p.renameLock; !t.IsZero() && t != q.Txn {
				ist = wire.StatusLocked
			}
		}
		if ist == wire.StatusLocked {
			return fail(ist)
		}
		if ist != wire.StatusOK && errSt == wire.StatusOK {
			errSt = ist
		}
		rep.Results[i] = res
		if tl := p.locks[q.Txn]; tl == nil || !slices.Contains(tl.items, it) {
			fresh = append(fresh, it)
		}
	}
	if errSt != wire.StatusOK {
		return fail(errSt)
	}
	if len(fresh) > 0 {
		if err := p.commit(&wire.LockRecord{Txn: q.Txn, Items: fresh}); err != nil {
			return fail(wire.StatusInternal)
		}
	}
	return ok(rep)
}

func (p *partition) lockEntry(txn wire.TxnID, dir uint64, name string) (wire.LockResult, wire.Status) {
	d := p.inodes[dir]
	switch {
	case d == nil:
		return wire.LockResult{}, status(syscall.ENOENT)
	case d.pending() || d.busy || p.entryLocked(dir, name, txn):
		return wire.LockResult{}, wire.StatusLocked
	case !d.isDir():
		return wire.LockResult{}, status(syscall.ENOTDIR)
	case d.dead():
		return wire.LockResult{}, status(syscall.ENOENT)
	}
	res := wire.LockResult{Attr: d.attr(), Parent: d.rec.Parent, ACL: d.xattrs[acl.XattrAccess]}
	if e := d.dir.get(name); e != nil {
		res.Ino, res.Type = e.ino, e.typ
	}
	return res, wire.StatusOK
}

func (p *partition) lockInode(txn wire.TxnID, ino uint64) (wire.LockResult, wire.Status) {
	n := p.inodes[ino]
	switch {
	case n == nil || n.gone():
		return wire.LockResult{}, status(syscall.ENOENT)
	case n.pending() || n.busy || p.inodeLocked(ino, txn):
		return wire.LockResult{}, wire.StatusLocked
	}
	if n.isDir() {
		for k, t := range p.entryLocks {
			if k.dir == ino && t != txn {
				return wire.LockResult{}, wire.StatusLocked
			}
		}
	}
	res := wire.LockResult{Attr: n.attr(), Parent: n.rec.Parent, ACL: n.xattrs[acl.XattrAccess]}
	if n.isDir() {
		res.Empty = n.dir.len() == 0
	}
	return res, wire.StatusOK
}

// txApply applies a decided transaction's updates here and releases its
// locks, in one append.
func (s *Service) txApply(ctx context.Context, q *wire.TxApplyRequest) result {
	p, st := s.partition(ctx, q.Partition)
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pruneResults(q.Txn.Partition, q.Watermark)
	if p.locks[q.Txn] == nil {
		return ok(&wire.Empty{}) // applied already
	}
	work := map[uint64]*wire.InodeRecord{}
	var order []uint64
	get := func(ino uint64) *wire.InodeRecord {
		if r := work[ino]; r != nil {
			return r
		}
		n := p.inodes[ino]
		if n == nil {
			return nil
		}
		r := n.rec
		work[ino] = &r
		order = append(order, ino)
		return &r
	}
	var entries, tail []wire.Record
	var frees []uint64
	dropped := map[uint64]bool{}
	for _, op := range q.Ops {
		switch op.Kind {
		case wire.TxEntrySet:
			d := get(op.Ino)
			if d == nil {
				continue
			}
			entries = append(entries, &wire.EntryAddRecord{Dir: op.Ino, Name: op.Name, Ino: op.Target, Type: op.Type, Cookie: d.NextCookie})
			d.NextCookie++
		case wire.TxEntryDel:
			if d := p.inodes[op.Ino]; d != nil && d.dir != nil && d.dir.get(op.Name) != nil {
				entries = append(entries, &wire.EntryRemoveRecord{Dir: op.Ino, Name: op.Name})
			}
		case wire.TxDirTouch:
			if d := get(op.Ino); d != nil {
				d.Mtime, d.Ctime = q.Now, q.Now
				d.Nlink = uint32(max(int64(d.Nlink)+int64(op.Delta), 2))
			}
		case wire.TxInodeTouch:
			if r := get(op.Ino); r != nil {
				r.Ctime = q.Now
				if op.Target != 0 {
					r.Parent = op.Target
				}
			}
		case wire.TxInodeDrop:
			if r := get(op.Ino); r != nil {
				dropped[op.Ino] = true
			}
		}
	}
	var async []uint64
	for _, ino := range order {
		r := work[ino]
		if !dropped[ino] {
			tail = append(tail, r)
			continue
		}
		n := p.inodes[ino]
		shadow := &inode{rec: *r, dir: n.dir, opens: n.opens}
		recs, a := p.dropLinkRecords(shadow, q.Now)
		tail = append(tail, recs...)
		if a {
			async = append(async, ino)
		}
		frees = append(frees, ino)
	}
	recs := append(entries, tail...)
	recs = append(recs, &wire.UnlockRecord{Txn: q.Txn})
	if err := p.commit(recs...); err != nil {
		return fail(wire.StatusInternal)
	}
	for _, ino := range frees {
		if p.inodes[ino] == nil {
			p.adv.dropInode(ino)
		}
	}
	for _, ino := range async {
		s.goBackground(func(ctx context.Context) { p.finishFree(ctx, ino) })
	}
	return ok(&wire.Empty{})
}

func (s *Service) txAbort(ctx context.Context, q *wire.TxRequest) result {
	p, st := s.partition(ctx, q.Partition)
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.locks[q.Txn] == nil {
		return ok(&wire.Empty{})
	}
	if p.hasDecision(q.Txn) {
		// Never abort a decided transaction (a stray abort).
		return ok(&wire.Empty{})
	}
	if err := p.commit(&wire.UnlockRecord{Txn: q.Txn}); err != nil {
		return fail(wire.StatusInternal)
	}
	return ok(&wire.Empty{})
}

// hasDecision reports whether txn is decided, when this partition is its
// coordinator. The caller holds p.mu.
func (p *partition) hasDecision(txn wire.TxnID) bool {
	return txn.Partition == p.id && p.decisions[txn] != nil
}

func (s *Service) txStatus(ctx context.Context, q *wire.TxRequest) result {
	p, st := s.partition(ctx, q.Txn.Partition)
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	state := wire.TxAborted
	switch {
	case p.decisions[q.Txn] != nil:
		state = wire.TxDecided
	case p.active[q.Txn]:
		state = wire.TxPending
	}
	return ok(&wire.TxStatusReply{State: state})
}

// resolveLocks asks the coordinators of the transactions whose locks this
// partition has held for a while what became of them, and releases the
// locks of those that were aborted. Locks of a dead coordinator go when
// its successor answers, never on a timeout alone.
func (p *partition) resolveLocks(ctx context.Context) {
	s := p.svc
	now := s.now()
	p.mu.RLock()
	var old []wire.TxnID
	for id, tl := range p.locks {
		if now.Sub(tl.since) >= s.cfg.ResolveInterval {
			old = append(old, id)
		}
	}
	p.mu.RUnlock()
	for _, id := range old {
		qctx, cancel := context.WithTimeout(ctx, s.cfg.ResolveInterval)
		var rep wire.TxStatusReply
		rh, err := s.peer(qctx, wire.OpTxStatus, id.Partition, wire.Cred{}, &wire.TxRequest{Txn: id, Partition: p.id}, &rep)
		cancel()
		if err != nil || rh.Status != wire.StatusOK || rep.State != wire.TxAborted {
			continue
		}
		p.mu.Lock()
		if p.locks[id] != nil {
			s.log.Info("released the locks of an aborted rename", "txn", id, "partition", p.id)
			if err := p.commit(&wire.UnlockRecord{Txn: id}); err != nil {
				s.log.Error("releasing locks failed", "txn", id, "err", err)
			}
		}
		p.mu.Unlock()
	}
}
