package metadata

import (
	"context"

	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma/rpc"
)

// Register serves every namespace op (client and node-to-node) on srv.
// Handlers run on goroutines of their own (rdma/rpc's rule), so one that
// waits for another node never blocks the server's workers; short
// ops are first tried on the worker (inline.go).
func (s *Service) Register(srv *rpc.Server) {
	h := func(ctx context.Context, c *rpc.Call) ([]byte, error) {
		return s.Handle(ctx, c.Op, c.RequestID, c.Payload), nil
	}
	for _, op := range wire.ClientOps {
		srv.Handle(uint16(op), h)
	}
	for _, op := range wire.PeerOps {
		srv.Handle(uint16(op), h)
	}
	for _, op := range append(inlineOps, inlineChanges...) {
		srv.HandleInline(uint16(op), s.handleInline, h)
	}
}
