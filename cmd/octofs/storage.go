package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node"
	"github.com/octofs/octofs/pmem"
)

// storageOptions are the flags of a node's storage side.
type storageOptions struct {
	pmemPath     string
	pmemSize     int64
	pmemRequire  string
	rdmaProvider string
	rdmaAddr     string
	rdmaDevice   string
	softAddr     string
}

// Default size of a new region file and the RDMA export's port.
const (
	defaultPmemSize = 256 << 20
	defaultRDMAAddr = "127.0.0.1:7402"
)

// openPmemStorage opens the node's storage side (package node): the
// region, the RDMA device and the listener. Serving starts in bindStorage,
// once the node knows its cluster.
func openPmemStorage(o *serveOptions, _ func() string, log *slog.Logger) (storageSide, error) {
	so := &o.storage
	if so.pmemPath == "" {
		return noStorage{}, nil
	}
	require, err := parseRequirement(so.pmemRequire)
	if err != nil {
		return nil, err
	}
	st, err := node.OpenStorage(node.StorageConfig{
		PmemPath: so.pmemPath, PmemSize: so.pmemSize, Require: require,
		Provider: so.rdmaProvider, Device: so.rdmaDevice, Addr: so.rdmaAddr, SoftAddr: so.softAddr,
		Logger: log,
	})
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w (is another node using --rdma-addr %s? give this one another)", err, so.rdmaAddr)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

func parseRequirement(s string) (pmem.Requirement, error) {
	switch s {
	case "", "none":
		return pmem.RequireNothing, nil
	case "durable":
		return pmem.RequireDurable, nil
	case "pmem":
		return pmem.RequirePmem, nil
	}
	return 0, fmt.Errorf("--pmem-require %q: use none, durable or pmem", s)
}

// bindStorage waits until the node knows its cluster, binds the region to
// it and starts the services. It returns an error only for what the node
// must not serve (a region of another cluster or node, damaged logs).
func bindStorage(ctx context.Context, n *cluster.Node, s storageSide) error {
	st, ok := s.(*node.Storage)
	if !ok {
		return nil
	}
	if err := st.Serve(ctx, n); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}
