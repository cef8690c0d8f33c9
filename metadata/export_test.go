package metadata

import (
	"context"

	"github.com/octofs/octofs/rdma/rpc"
)

// HandleInline exposes the inline attempt (inline.go) to the tests.
func (s *Service) HandleInline(ctx context.Context, c *rpc.Call) ([]byte, error) {
	return s.handleInline(ctx, c)
}
