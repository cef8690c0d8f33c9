package main

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// regionInMap waits until the node's entry in the map carries a region
// with an rkey other than stale's, and returns it.
func regionInMap(t *testing.T, admin, token string, stale cluster.RegionDescriptor) cluster.NodeInfo {
	t.Helper()
	c := cluster.NewAdminClient([]string{admin}, token, nil)
	defer c.CloseIdleConnections()
	var info cluster.NodeInfo
	waitFor(t, "the node's region in the map", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		m, err := c.Map(ctx)
		if err != nil || len(m.Nodes) != 1 || m.Nodes[0].Region.RKey == 0 || m.Nodes[0].Region == stale {
			return false
		}
		info = m.Nodes[0]
		return true
	})
	return info
}

// readSuperblock reads the first 4 KiB of a node's region with a one-sided
// RDMA READ, as a client would.
func readSuperblock(t *testing.T, info cluster.NodeInfo, token string) (pmem.Superblock, error) {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(4)
	require.NoError(t, err)
	buf := make([]byte, 4096)
	mr, err := pd.RegMR(buf, rdma.AccessLocalWrite)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := dataplane.DialExport(ctx, pd, cq, info.RDMAAddr, token, "test")
	if err != nil {
		return pmem.Superblock{}, err
	}
	defer conn.Close()
	require.NoError(t, conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}, RemoteAddr: info.Region.Base, RKey: info.Region.RKey}}))
	var wc [1]rdma.WorkCompletion
	_, err = cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.NoError(t, wc[0].Err())
	return pmem.DecodeSuperblock(buf)
}

// TestServeExportsRegion starts `octofs serve --pmem` as a process: the
// region file is created, published in the map, readable over RDMA with
// the token and refused without it; after a restart the same region comes
// back under a new key; and a node refuses to serve a region that belongs
// to another cluster.
func TestServeExportsRegion(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	dir := t.TempDir()
	region := filepath.Join(dir, "pmem")
	args := func(data string) []string {
		return []string{"--bootstrap", "--node-id", "n1", "--data-dir", filepath.Join(dir, data),
			"--admin-addr", freeAddr(t), "--raft-addr", freeAddr(t), "--rdma-addr", freeAddr(t),
			"--pmem", region, "--pmem-size", "8388608"}
	}
	first := args("data")
	p := startServe(t, "n1.log", first...)
	admin := first[6]
	tokenFile := filepath.Join(dir, "data", cluster.TokenFile)
	waitFor(t, "the cluster token", 30*time.Second, func() bool {
		_, err := cluster.ReadTokenFile(tokenFile)
		return err == nil
	})
	token, err := cluster.ReadTokenFile(tokenFile)
	require.NoError(t, err)

	info := regionInMap(t, admin, token, cluster.RegionDescriptor{})
	require.Equal(t, uint64(8<<20), info.Region.Length)
	sb, err := readSuperblock(t, info, token)
	require.NoError(t, err)
	require.Equal(t, info.Region.UUID, sb.RegionUUID.String(), "the region read over RDMA is the one the map names")
	waitFor(t, "the region bound to the cluster", 30*time.Second, func() bool {
		sb, err := readSuperblock(t, info, token)
		return err == nil && !sb.ClusterUUID.IsZero() && sb.NodeID != 0
	})
	_, err = readSuperblock(t, info, "wrong")
	require.ErrorIs(t, err, rdma.ErrRejected, "no token, no access")

	// Restart: the same region under a new registration, which the node
	// publishes with its heartbeats; until then clients holding the old
	// key are refused by the responder (a client refreshes its map then).
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	<-p.done
	require.NoError(t, p.err, "clean exit on SIGTERM")
	p = startServe(t, "n1-again.log", first...)
	again := regionInMap(t, admin, token, info.Region)
	require.Equal(t, info.Region.UUID, again.Region.UUID)
	_, err = readSuperblock(t, again, token)
	require.NoError(t, err)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	<-p.done

	// A new cluster on the same region file: refused.
	other := args("other-data")
	p = startServe(t, "other.log", other...)
	select {
	case <-p.done:
	case <-time.After(60 * time.Second):
		t.Fatal("a node with another cluster's region kept running")
	}
	require.Error(t, p.err, "the node exits with an error")
	log, err := os.ReadFile(p.log)
	require.NoError(t, err)
	require.Contains(t, string(log), "belongs to another cluster or node", "and says why")
}
