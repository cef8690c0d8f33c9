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
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// regionInMap waits until the node's entry in the map carries its region
// and RDMA address, and returns it.
func regionInMap(t *testing.T, admin, token string) cluster.NodeInfo {
	t.Helper()
	c := cluster.NewAdminClient([]string{admin}, token, nil)
	defer c.CloseIdleConnections()
	var info cluster.NodeInfo
	waitFor(t, "the node's region in the map", 30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		m, err := c.Map(ctx)
		if err != nil || len(m.Nodes) != 1 || m.Nodes[0].Region.UUID == "" || m.Nodes[0].RDMAAddr == "" {
			return false
		}
		info = m.Nodes[0]
		return true
	})
	return info
}

// dialData opens a data connection to the node as a client would and
// returns what the node granted.
func dialData(t *testing.T, info cluster.NodeInfo, token string) (dataplane.Grant, error) {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(4)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, g, err := dataplane.DialData(ctx, pd, cq, info.RDMAAddr, 1, dataplane.Hello{
		Token: token, ClientID: dataplane.RandomID(), Incarnation: dataplane.RandomID(), Client: "test"})
	if err != nil {
		return g, err
	}
	conn.Close()
	return g, nil
}

// TestServeExportsRegion starts `octofs serve --pmem` as a process: the
// region file is created and published in the map without any key, data
// connections are granted with the token and refused without it, a restart
// is a new incarnation, and a node refuses to serve a region that belongs
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

	info := regionInMap(t, admin, token)
	require.Equal(t, uint64(8<<20), info.Region.Length)
	require.Zero(t, info.Region.RKey, "the map publishes no key: nothing of the region is remotely accessible through it")
	waitFor(t, "the node serving data connections", 30*time.Second, func() bool {
		_, err := dialData(t, info, token)
		return err == nil
	})
	g, err := dialData(t, info, token)
	require.NoError(t, err)
	require.NotZero(t, g.Incarnation)
	_, err = dialData(t, info, "wrong")
	require.ErrorIs(t, err, rdma.ErrRejected, "no token, no access")

	// Restart: the same region, served by a new incarnation, so clients
	// drop what they learnt from the old process.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	<-p.done
	require.NoError(t, p.err, "clean exit on SIGTERM")
	p = startServe(t, "n1-again.log", first...)
	var again dataplane.Grant
	waitFor(t, "the restarted node serving data connections", 30*time.Second, func() bool {
		again, err = dialData(t, regionInMap(t, admin, token), token)
		return err == nil
	})
	require.NotEqual(t, g.Incarnation, again.Incarnation, "a restarted node is a new incarnation")
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
