package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
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

// pmemStorage is a node's storage side: its pmem region, exported over
// RDMA to clients that hold the cluster token.
type pmemStorage struct {
	region *pmem.Region
	dev    rdma.Device
	export *dataplane.Export
	log    *slog.Logger
}

var _ storageSide = (*pmemStorage)(nil)

// openPmemStorage opens (or creates) the region file, opens the RDMA
// device and exports the region. token returns the cluster token once the
// node knows it.
func openPmemStorage(o *serveOptions, token func() string, log *slog.Logger) (storageSide, error) {
	so := &o.storage
	if so.pmemPath == "" {
		return noStorage{}, nil
	}
	require, err := parseRequirement(so.pmemRequire)
	if err != nil {
		return nil, err
	}
	popts := pmem.Options{Logger: log, Require: require}
	var region *pmem.Region
	if _, statErr := os.Stat(so.pmemPath); errors.Is(statErr, os.ErrNotExist) {
		region, err = pmem.Create(so.pmemPath, so.pmemSize, pmem.FormatOptions{}, popts)
		if err == nil {
			log.Info("created pmem region", "path", so.pmemPath, "bytes", so.pmemSize)
		}
	} else {
		region, err = pmem.Open(so.pmemPath, popts)
	}
	if err != nil {
		return nil, fmt.Errorf("pmem region %s: %w", so.pmemPath, err)
	}
	info := region.Info()
	log.Info("pmem region open", "path", so.pmemPath, "mode", info.Mode, "domain", info.Domain,
		"flush", info.Instruction, "replayed", region.Recovery().Replayed)

	softAddr := so.softAddr
	if softAddr == "" {
		host, _, err := net.SplitHostPort(so.rdmaAddr)
		if err != nil {
			region.Close()
			return nil, fmt.Errorf("--rdma-addr %q: %w", so.rdmaAddr, err)
		}
		softAddr = net.JoinHostPort(host, "0")
	}
	dev, err := provider.Open(so.rdmaProvider, rdma.DeviceConfig{Device: so.rdmaDevice, GIDIndex: rdma.AutoGID, Addr: softAddr, Logger: log})
	if err != nil {
		region.Close()
		return nil, fmt.Errorf("RDMA provider %q: %w", so.rdmaProvider, err)
	}
	export, err := dataplane.StartExport(dataplane.ExportConfig{
		Region: region, Device: dev, ListenAddr: so.rdmaAddr, Token: token, Logger: log,
	})
	if err != nil {
		dev.Close()
		region.Close()
		return nil, fmt.Errorf("%w (is another node using --rdma-addr %s?)", err, so.rdmaAddr)
	}
	return &pmemStorage{region: region, dev: dev, export: export, log: log}, nil
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

func (s *pmemStorage) RDMAAddr() string { return s.export.Addr() }

func (s *pmemStorage) Region() cluster.RegionDescriptor {
	d := s.export.Descriptor()
	return cluster.RegionDescriptor{UUID: d.RegionUUID.String(), Base: d.Base, Length: d.Length, RKey: d.RKey}
}

// Bind records the cluster and node in the region's superblock the first
// time, and refuses a region that belongs to another cluster or node.
func (s *pmemStorage) Bind(clusterID string, node cluster.NodeID) error {
	wantCluster, wantNode := regionIdentity(clusterID, node)
	sb := s.region.Superblock()
	switch {
	case sb.ClusterUUID.IsZero() && sb.NodeID == 0:
		if err := s.region.SetIdentity(wantCluster, wantNode); err != nil {
			return fmt.Errorf("pmem region: record identity: %w", err)
		}
		s.log.Info("pmem region bound to this node", "cluster", clusterID, "node", node)
		return nil
	case sb.ClusterUUID != wantCluster || sb.NodeID != wantNode:
		return fmt.Errorf("%w: the pmem region belongs to another cluster or node (cluster %s, node %#x; this is cluster %s node %s): point --pmem at this node's own region, or at a new path to create one",
			pmem.ErrWrongCluster, sb.ClusterUUID, sb.NodeID, clusterID, node)
	}
	return nil
}

// regionIdentity maps the cluster's and node's names to the identity a
// pmem superblock records: a hash of each, fixed forever since regions
// store it.
func regionIdentity(clusterID string, node cluster.NodeID) (pmem.UUID, uint64) {
	sum := sha256.Sum256([]byte(clusterID))
	var u pmem.UUID
	copy(u[:], sum[:16])
	h := fnv.New64a()
	h.Write([]byte(node))
	return u, h.Sum64()
}

func (s *pmemStorage) Close() error {
	return errors.Join(s.export.Close(), s.dev.Close(), s.region.Close())
}

// bindStorage waits until the node knows its cluster, then binds the
// region to it. It returns an error only for a region of another cluster
// or node, which the node must not serve.
func bindStorage(ctx context.Context, n *cluster.Node, s storageSide) error {
	b, ok := s.(interface {
		Bind(string, cluster.NodeID) error
	})
	if !ok {
		return nil
	}
	var epoch uint64
	for {
		m := n.Map()
		if m != nil && m.ClusterID != "" {
			return b.Bind(m.ClusterID, n.ID())
		}
		if m != nil {
			epoch = m.Epoch
		}
		if _, err := n.Watch(ctx, epoch); err != nil {
			return nil // shutting down
		}
	}
}
