package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/pmem/plog"
	"github.com/octofs/octofs/rdma"
)

// services are what a bound node runs on its region.
type services struct {
	store *plog.Store
}

func startServices(ctx context.Context, s *Storage, n *cluster.Node, store *plog.Store) (*services, error) {
	return &services{store: store}, nil
}

func (svc *services) acceptRPC(ctx context.Context, req *rdma.ConnRequest, h dataplane.Hello) error {
	err := fmt.Errorf("node: RPC service not running")
	req.Reject(err.Error())
	return err
}

func (svc *services) close() error {
	return errors.Join()
}
