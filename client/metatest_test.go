package client

import (
	"context"
	"testing"
	"time"

	"github.com/octofs/octofs/dataplane/dpclient"
	dpwire "github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/node/nodetest"
)

// The client over the real namespace service, in process: metatest's
// services behind mdclient, Memory's data store for the bytes. Tests that
// run on both backends (forBackends) show that the client's logic holds
// over the real namespace's answers, not only over Memory's.

// memCapacity is a fixed capacity for StatFS over metatest.
type memCapacity struct{}

func (memCapacity) Space(context.Context) (dpclient.Space, error) {
	return dpclient.Space{Capacity: dpwire.Capacity{Total: 64 << 20, Free: 32 << 20}, Writable: 32 << 20}, nil
}

// metaCluster is a metatest cluster and a data store its clients share.
type metaCluster struct {
	mc   *metatest.Cluster
	data *memData
	log  eventLog
}

func newMetaCluster(t *testing.T) *metaCluster {
	return newMetaClusterSized(t, 3, 0, false)
}

// newMetaClusterSized starts nodes namespace services with regions of
// regionSize bytes (0: metatest's default). production keeps the
// services' own timing defaults (session lease, janitor interval) instead
// of metatest's short test ones.
func newMetaClusterSized(t *testing.T, nodes, regionSize int, production bool) *metaCluster {
	cfg := metatest.Config{Nodes: nodes, RegionSize: regionSize}
	if production {
		cfg.Service = func(_ int, c *metadata.Config) { c.ResolveInterval, c.SessionLease = 0, 0 }
	}
	m := &metaCluster{mc: metatest.Start(t, cfg)}
	m.data = newMemData(&m.log)
	return m
}

func (m *metaCluster) client(t *testing.T, mod ...func(*Config)) *Client {
	t.Helper()
	cfg := Config{Admin: []string{"metatest"}, Token: "t", OpTimeout: 20 * time.Second}
	for _, f := range mod {
		f(&cfg)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(cfg)
	md, err := mdclient.New(mdclient.Config{Maps: m.mc.Maps, Caller: m.mc.Transport, ClientID: c.id, Incarnation: c.incarnation,
		OpTimeout: cfg.OpTimeout, AttemptTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c.ns, c.data, c.maps = mdNamespace{md: md, data: memCapacity{}}, m.data, m.mc.Maps
	t.Cleanup(func() { c.Close() })
	return c
}

// forBackends runs test once per backend: Memory; the real namespace
// service in process (metatest, Memory's data store); and a whole 3-node
// cluster (node/nodetest) reached over RDMA as in production. newClient
// returns another client of the same cluster.
func forBackends(t *testing.T, test func(t *testing.T, newClient func() *Client)) {
	t.Run("memory", func(t *testing.T) {
		fc := newFakeCluster()
		test(t, func() *Client { return fc.client(t, func(c *Config) { c.Now = time.Now }) })
	})
	t.Run("metatest", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts namespace services; skipped with -short")
		}
		mc := newMetaCluster(t)
		test(t, func() *Client { return mc.client(t) })
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("starts a 3-node cluster; skipped with -short")
		}
		tc := nodetest.Start(t, nodetest.Options{})
		test(t, func() *Client { return clusterClient(t, tc) })
	})
}

// clusterClient connects a client to a nodetest cluster over RDMA (the
// soft provider), as octoctl and FUSE connect.
func clusterClient(t *testing.T, tc *nodetest.Cluster) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A generous timeout: CI machines are shared, and these tests are not
	// about timeouts.
	c, err := New(ctx, Config{Admin: tc.AdminAddrs(), Token: tc.Token, Name: t.Name(), OpTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
