package metadata

import (
	"context"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma/rpc"
)

// HandleInline exposes the inline attempt (inline.go) to the tests.
func (s *Service) HandleInline(ctx context.Context, c *rpc.Call) ([]byte, error) {
	return s.handleInline(ctx, c)
}

// HoldPartition holds partition id's lock exclusively (loading it if need
// be) until the returned function is called.
func (s *Service) HoldPartition(ctx context.Context, id uint32) (release func(), ok bool) {
	p, st := s.partition(ctx, id)
	if st != wire.StatusOK {
		return nil, false
	}
	p.mu.Lock()
	return p.mu.Unlock, true
}

// Opens returns inode ino's open count, and whether the inode exists.
func (s *Service) Opens(ctx context.Context, ino uint64) (int, bool) {
	p, st := s.partition(ctx, cluster.PartitionOf(ino))
	if st != wire.StatusOK {
		return 0, false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	n := p.inodes[ino]
	if n == nil {
		return 0, false
	}
	return n.opens, true
}
