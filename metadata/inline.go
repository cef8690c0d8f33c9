package metadata

import (
	"context"

	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma/rpc"
)

// Inline service. A short read-only request (a lookup, a getattr) is
// served on the RPC worker that received it (rpc.Server.HandleInline),
// which saves the hand-off to a goroutine that dominates its cost. The
// worker must never wait, so the request runs as an inline attempt: the
// first point at which it would wait (a partition still loading, an inode
// with a change not yet durable, a newer map to catch up with, records
// to be made durable before the reply) gives up instead, and the RPC
// server runs the request again on a goroutine of its own, where it may
// wait. Only ops without side effects are served this way, so running one
// twice is harmless.

// inlineOps are the ops tried inline.
var inlineOps = []wire.Op{wire.OpNull, wire.OpLookup, wire.OpGetAttr, wire.OpReadlink,
	wire.OpStatFS, wire.OpGetXattr, wire.OpListXattr, wire.OpAccess, wire.OpKeepAlive, wire.OpGetParent}

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
