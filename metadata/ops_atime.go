package metadata

import (
	"context"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
)

// atime under relatime. Reads of file data reach the data nodes by
// one-sided RDMA and never the namespace service, so the client that read
// asks for the update (OpTouchAtime) when its copy of the times says
// relatime's rule is due; a listing is served here and updates the
// directory's atime itself. Either way the owner applies the rule again
// with its own clock and times, so a client can only move atime to the
// owner's now, and only when Linux would: at most once per modification,
// or once a day.

// touchAtime records a read of q.Ino's data by the caller: atime becomes
// now if relatime's rule is due. The caller must be allowed to read the
// file or hold it open (a descriptor keeps working after a chmod); the
// owner rule of utimensat does not apply, and ctime does not change, as
// when the kernel updates atime on a read.
func (s *Service) touchAtime(ctx context.Context, r *request, q *wire.GetAttrRequest) result {
	p, st := s.partition(ctx, cluster.PartitionOf(q.Ino))
	if st != wire.StatusOK {
		return fail(st)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.inodes[q.Ino]
	if n == nil || (q.Gen != 0 && n.rec.Gen != q.Gen) {
		return fail(status(syscall.ESTALE))
	}
	if !s.sessions.hasOpen(r.key, q.Ino) && !n.permits(r.cred, wire.AccessRead) {
		return fail(status(syscall.EACCES))
	}
	if err := p.touchAtimeLocked(n); err != nil {
		return fail(wire.StatusInternal)
	}
	return ok(&wire.AttrReply{Attr: n.attr()})
}

// touchAtimeLocked sets n's atime to now when relatime's rule is due.
// The caller holds p.mu exclusively. The update never waits: an inode
// that another protocol holds (pending, busy, locked by a rename) or that
// is being freed keeps its atime, and so does one on a region short of
// space. atime is not worth a stalled read or an ENOSPC.
func (p *partition) touchAtimeLocked(n *inode) error {
	now := wire.TimespecOf(p.svc.now())
	if !wire.RelatimeDue(n.rec.Atime, n.rec.Mtime, n.rec.Ctime, now) || n.rec.Flags&wire.InodeFreeing != 0 ||
		n.pending() || n.busy || p.inodeLocked(n.rec.Ino, wire.TxnID{}) {
		return nil
	}
	if p.svc.roomFor(spaceChange) != wire.StatusOK {
		return nil
	}
	rec := n.rec
	rec.Atime = now
	return p.commit(&rec)
}

// listedDir updates directory ino's atime after a listing, when
// relatime's rule is due (the caller saw it due under p.mu shared and
// released it). Errors are logged, not answered: the listing stands.
func (p *partition) listedDir(ino uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.inodes[ino]
	if n == nil {
		return
	}
	if err := p.touchAtimeLocked(n); err != nil {
		p.svc.log.Warn("updating a directory's atime failed", "ino", ino, "err", err)
	}
}
