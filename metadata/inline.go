package metadata

import (
	"context"

	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma/rpc"
)

// Inline service. A short request is served on the RPC worker that
// received it (rpc.Server.HandleInline), which saves the hand-off to a
// goroutine that dominates a short request's cost. The worker must never
// wait for another node or for a lock held across a wait, so the request
// runs as an inline attempt: the first point at which it would wait (a
// partition still loading, an inode with a change not yet durable, a
// newer map to catch up with, a partition lock someone holds, another
// node to ask) gives up instead, and the RPC server runs the request
// again on a goroutine of its own, where it may wait.
//
// Read-only ops (inlineOps) may give up anywhere, since running one twice
// is harmless; so they also give up rather than wait for the records
// they read to be durable. Ops that change the namespace
// (inlineChanges) give up only before their first change: they are tried
// inline when all they change lies in one partition of this node, and
// their handlers check that (make, remove, open) before they take the
// partition's lock, with TryLock. Once they have changed it they go on to
// the end and append their records to the log themselves: a local
// append, not a wait for another node. Where appends are slow (a
// file-backed region on a disk, slowAppends) they run on goroutines as
// before, so that a worker never sits in msync.

// inlineOps are the read-only ops tried inline.
// OpReadDir is one of them: a listing that is due to update the
// directory's atime gives up before it does.
var inlineOps = []wire.Op{wire.OpNull, wire.OpLookup, wire.OpGetAttr, wire.OpReadlink,
	wire.OpStatFS, wire.OpGetXattr, wire.OpListXattr, wire.OpAccess, wire.OpKeepAlive, wire.OpGetParent,
	wire.OpReadDir}

// inlineChanges are the ops that change the namespace tried inline.
var inlineChanges = []wire.Op{wire.OpCreate, wire.OpMkdir, wire.OpSymlink, wire.OpUnlink, wire.OpRmdir, wire.OpOpen,
	wire.OpRelease}

// inlineAttempt marks a request's context as an inline attempt;
// gaveUp records that it reached a wait.
type inlineAttempt struct{ gaveUp bool }

type inlineKey struct{}

// inlineOf returns the inline attempt ctx belongs to, or nil.
func inlineOf(ctx context.Context) *inlineAttempt {
	a, _ := ctx.Value(inlineKey{}).(*inlineAttempt)
	return a
}

// mustNotWait is for a caller about to wait: it reports whether ctx is an
// inline attempt, which then gives up, and the caller returns
// StatusNotReady at once instead of waiting.
func mustNotWait(ctx context.Context) bool {
	a := inlineOf(ctx)
	if a != nil {
		a.gaveUp = true
	}
	return a != nil
}

// stayLocal is for a handler of an inlineChanges op before its first
// change: it reports whether an inline attempt must give up (and marks it
// given up) because the change reaches beyond partition p (cross) or p's
// appends are slow. Outside inline attempts it reports false.
func stayLocal(ctx context.Context, p *partition, cross bool) bool {
	a := inlineOf(ctx)
	if a == nil || (!cross && !p.slowAppends()) {
		return false
	}
	a.gaveUp = true
	return true
}

// lockPartition takes p.mu exclusively for a request in ctx. An inline
// attempt takes it only if it is free, and otherwise gives up (false).
func lockPartition(ctx context.Context, p *partition) bool {
	if inlineOf(ctx) == nil {
		p.mu.Lock()
		return true
	}
	if p.mu.TryLock() {
		return true
	}
	return !mustNotWait(ctx)
}

// rlockPartition is lockPartition for the shared lock.
func rlockPartition(ctx context.Context, p *partition) bool {
	if inlineOf(ctx) == nil {
		p.mu.RLock()
		return true
	}
	if p.mu.TryRLock() {
		return true
	}
	return !mustNotWait(ctx)
}

// handleInline is Handle as an inline attempt: it returns rpc.ErrNotInline
// if the request would wait.
func (s *Service) handleInline(ctx context.Context, c *rpc.Call) ([]byte, error) {
	a := &inlineAttempt{}
	out := s.Handle(context.WithValue(ctx, inlineKey{}, a), c.Op, c.RequestID, c.Payload)
	if a.gaveUp {
		return nil, rpc.ErrNotInline
	}
	return out, nil
}
