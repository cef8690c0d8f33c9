package mdclient

import (
	"context"
	"fmt"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/rdma/rpc"
)

// PoolCaller is a Caller over rdma/rpc: each node at its RDMAAddr through
// one shared connection of pool.
type PoolCaller struct{ Pool *rpc.Pool }

var _ Caller = PoolCaller{}

// Call implements Caller.
func (c PoolCaller) Call(ctx context.Context, to cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	if to.RDMAAddr == "" {
		return nil, fmt.Errorf("%w: node %s has no RDMA address in the map", ErrUnavailable, to.ID)
	}
	return c.Pool.Call(ctx, to.RDMAAddr, op, reqID, payload)
}
