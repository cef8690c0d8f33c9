package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// TestProbe runs `octoctl probe` against a node whose region is exported
// over the soft provider, and against one whose map entry names a region
// that is not there.
func TestProbe(t *testing.T) {
	region, err := pmem.Format(pmem.NewMemMedium(4<<20), pmem.FormatOptions{Now: time.Unix(1, 0)}, pmem.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { region.Close() })
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	var n1 *cluster.Node
	e, err := dataplane.StartExport(dataplane.ExportConfig{Region: region, Device: dev, ListenAddr: "127.0.0.1:0",
		Token: func() string { return n1.Token() }})
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	d := e.Descriptor()
	n1 = ctlNode(t, "n1", func(c *cluster.Config) {
		c.Bootstrap = true
		c.RDMAAddr = e.Addr()
		c.Region = cluster.RegionDescriptor{UUID: d.RegionUUID.String(), Base: d.Base, Length: d.Length, RKey: d.RKey}
	})
	require.Eventually(t, func() bool { return n1.Status().NodeStates[cluster.StateUp] == 1 }, 20*time.Second, 20*time.Millisecond)
	srv := "--server=" + n1.AdminAddr()

	out, err := runCtl(t, "probe", srv, "--token", n1.Token(), "--reads", "10")
	require.NoError(t, err, out)
	require.Regexp(t, `n1 +`+e.Addr()+` +`+d.RegionUUID.String()+` +4194304 .* ok\n`, out)

	_, err = runCtl(t, "probe", srv)
	require.ErrorContains(t, err, "needs the cluster token")

	// A node whose region is not what the map says fails, and the
	// command exits non-zero.
	n2 := ctlNode(t, "n2", func(c *cluster.Config) {
		c.Join = []string{n1.AdminAddr()}
		c.Token = n1.Token()
		c.RDMAAddr = e.Addr()
		c.Region = cluster.RegionDescriptor{UUID: "not-this-one", Base: d.Base, Length: d.Length, RKey: d.RKey}
	})
	require.Eventually(t, func() bool { return n2.Status().NodeStates[cluster.StateUp] == 2 }, 20*time.Second, 20*time.Millisecond)
	out, err = runCtl(t, "probe", srv, "--token", n1.Token(), "--json")
	require.ErrorContains(t, err, "1 of 2 nodes failed the probe")
	require.Contains(t, out, `"error": "region `+d.RegionUUID.String()+` found where the map says not-this-one"`)
}
