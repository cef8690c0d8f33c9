package client

import (
	"context"
	"testing"
	"time"

	dpwire "github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/metatest"
)

// The client over the real namespace service, in process: metatest's
// services behind mdclient, Memory's data store for the bytes. Tests that
// run on both backends (forBackends) show that the client's logic holds
// over the real namespace's answers, not only over Memory's.

// memCapacity is a fixed capacity for StatFS over metatest.
type memCapacity struct{}

func (memCapacity) StatFS(context.Context) (dpwire.Capacity, error) {
	return dpwire.Capacity{Total: 64 << 20, Free: 32 << 20}, nil
}

// metaCluster is a metatest cluster and a data store its clients share.
type metaCluster struct {
	mc   *metatest.Cluster
	data *memData
	log  eventLog
}

func newMetaCluster(t *testing.T) *metaCluster {
	m := &metaCluster{mc: metatest.Start(t, metatest.Config{})}
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

// forBackends runs test once per backend: Memory, and the real namespace
// service (metatest). newClient returns another client of the same
// cluster.
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
}
