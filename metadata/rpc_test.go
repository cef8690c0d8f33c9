package metadata_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rpc"
	"github.com/octofs/octofs/rdma/soft"
)

// rpcNode is a namespace service behind rdma/rpc on a soft device.
type rpcNode struct {
	svc  *metadata.Service
	srv  *rpc.Server
	ln   *rdma.Listener
	pool *rpc.Pool
}

func softPool(t testing.TB) *rpc.Pool {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	p, err := rpc.NewPool(rpc.PoolConfig{PD: pd, Client: rpc.ClientConfig{Device: dev, PrivateData: []byte("md")}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// rpcCluster starts three namespace services behind rdma/rpc servers on
// soft devices, node-to-node calls over RPC too, and returns a client.
func rpcCluster(t testing.TB) (*mdclient.Client, *metatest.Maps) {
	const nodes = 3
	m := metatest.StaticMap(nodes, 16)
	rn := make([]*rpcNode, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		for _, n := range rn {
			n.ln.Close()
		}
		wg.Wait()
		for _, n := range rn {
			n.svc.Close()
			n.srv.Close()
		}
	})
	for i := range nodes {
		dev, err := soft.Open(rdma.DeviceConfig{})
		require.NoError(t, err)
		t.Cleanup(func() { dev.Close() })
		pd, err := dev.AllocPD()
		require.NoError(t, err)
		srv, err := rpc.NewServer(rpc.ServerConfig{Device: dev, PD: pd})
		require.NoError(t, err)
		ln, err := rdma.Listen(pd, "127.0.0.1:0")
		require.NoError(t, err)
		rn[i] = &rpcNode{srv: srv, ln: ln, pool: softPool(t)}
		m.Nodes[i].RDMAAddr = ln.Addr().String()
		wg.Go(func() {
			for {
				req, err := ln.Next(ctx)
				if err != nil {
					return
				}
				wg.Go(func() { _ = srv.Accept(ctx, req, nil) })
			}
		})
	}
	maps := metatest.NewMaps(m)
	for i := range nodes {
		r, err := pmem.Format(pmem.NewMemMedium(256<<20), pmem.FormatOptions{}, pmem.Options{})
		require.NoError(t, err)
		st, err := plog.Open(r, plog.Options{})
		require.NoError(t, err)
		svc, err := metadata.New(metadata.Config{Node: metatest.NodeName(i), Map: maps, Store: st,
			Peers: mdclient.PoolCaller{Pool: rn[i].pool}})
		require.NoError(t, err)
		svc.Register(rn[i].srv)
		rn[i].svc = svc
	}
	cl, err := mdclient.New(mdclient.Config{Maps: maps, Caller: mdclient.PoolCaller{Pool: softPool(t)}, OpTimeout: 20 * time.Second})
	require.NoError(t, err)
	return cl, maps
}

// TestOverRPC runs the namespace over the real RPC layer on the soft
// provider: three nodes, node-to-node calls over RPC too.
func TestOverRPC(t *testing.T) {
	const nodes = 3
	cl, _ := rpcCluster(t)
	// The first request of all is a read of a partition no node has
	// loaded: its inline attempt gives up, and the goroutine handler
	// loads the partition (inline.go).
	_, err := cl.GetAttr(bg, root, rootIno, 0)
	require.NoError(t, err)
	for i := range nodes {
		require.NoError(t, cl.Null(bg, metatest.NodeName(i)))
	}
	d, err := cl.Mkdir(bg, root, rootIno, "d", 0o755)
	require.NoError(t, err)
	for i := range 40 {
		_, err := cl.Create(bg, alice, rootIno, fmt.Sprintf("f%d", i), 0o644, 0, false, 0)
		require.Equal(t, syscall.EACCES, err, "alice may not write the root")
		_, err = cl.Create(bg, root, d.Ino, fmt.Sprintf("f%d", i), 0o644, 0, false, 0)
		require.NoError(t, err)
	}
	require.NoError(t, cl.Rename(bg, root, rr(d.Ino, "f1", rootIno, "moved", 0)))
	e, err := cl.Mkdir(bg, root, d.Ino, "e", 0o755)
	require.NoError(t, err)
	require.NoError(t, cl.Rename(bg, root, rr(d.Ino, "e", rootIno, "e2", 0)))
	sub, err := cl.Mkdir(bg, root, d.Ino, "sub", 0o755)
	require.NoError(t, err)
	require.Equal(t, syscall.EINVAL, cl.Rename(bg, root, rr(rootIno, "d", sub.Ino, "x", 0)), "loop check")
	require.NoError(t, cl.Rename(bg, root, rr(rootIno, "d", e.Ino, "x", 0)))
	require.NoError(t, cl.Rename(bg, root, rr(e.Ino, "x", rootIno, "d", 0)))
	require.NoError(t, cl.Rmdir(bg, root, d.Ino, "sub", 0))
	require.NoError(t, cl.SetXattr(bg, root, d.Ino, "user.big", make([]byte, 60000), 0))
	v, err := cl.GetXattr(bg, root, d.Ino, "user.big", 0)
	require.NoError(t, err)
	require.Len(t, v, 60000, "a large reply travels by RDMA READ")
	ents, eof, err := cl.ReadDir(bg, root, d.Ino, 0, 1<<20, 0)
	require.NoError(t, err)
	require.True(t, eof)
	require.Len(t, ents, 39)
	for _, x := range ents {
		require.NoError(t, cl.Unlink(bg, root, d.Ino, x.Name, 0))
	}
	tr, err := metatest.Walk(bg, cl)
	require.NoError(t, err)
	require.Empty(t, tr.Check())
	require.Equal(t, []string{"/d", "/e2", "/moved"}, tr.Paths())
	_ = wire.OpNull
}

// BenchmarkOverRPC measures ops over rdma/rpc on the soft provider at 1
// and 16 in flight, beside the null RPC at the same depth: go test
// -run XXX -bench OverRPC ./metadata.
func BenchmarkOverRPC(b *testing.B) {
	cl, maps := rpcCluster(b)
	m := maps.Current()
	d, err := cl.Mkdir(bg, root, rootIno, "bench", 0o777)
	require.NoError(b, err)
	f, err := cl.Create(bg, root, d.Ino, "stat-me", 0o644, 0, false, 0)
	require.NoError(b, err)
	var names atomic.Uint64
	// local: a name whose inode lands in the directory's partition.
	local := func() string {
		for {
			n := fmt.Sprintf("l%d", names.Add(1))
			if m.NewInodePartition(d.Ino, n, false) == cluster.PartitionOf(d.Ino) {
				return n
			}
		}
	}
	remote := func() string {
		for {
			n := fmt.Sprintf("r%d", names.Add(1))
			if m.Partitions[m.NewInodePartition(d.Ino, n, false)] != m.Partitions[cluster.PartitionOf(d.Ino)] {
				return n
			}
		}
	}
	list, err := cl.Mkdir(bg, root, d.Ino, "list", 0o777)
	require.NoError(b, err)
	for i := range 100 {
		_, err := cl.Create(bg, root, list.Ino, fmt.Sprintf("entry-%03d", i), 0o644, 0, false, 0)
		require.NoError(b, err)
	}
	ops := map[string]func() error{
		// A 100-entry listing in one request (octoctl bench meta's).
		"readdir": func() error {
			ents, _, err := cl.ReadDir(bg, root, list.Ino, 0, 0, 101)
			if err == nil && len(ents) != 100 {
				err = fmt.Errorf("listed %d entries of 100", len(ents))
			}
			return err
		},
		"null": func() error { return cl.Null(bg, m.Partitions[cluster.PartitionOf(d.Ino)]) },
		"stat": func() error { _, err := cl.GetAttr(bg, root, f.Ino, 0); return err },
		"create-one-partition": func() error {
			_, err := cl.Create(bg, root, d.Ino, local(), 0o644, 0, false, 0)
			return err
		},
		"create-across-nodes": func() error {
			_, err := cl.Create(bg, root, d.Ino, remote(), 0o644, 0, false, 0)
			return err
		},
	}
	for _, name := range []string{"null", "stat", "readdir", "create-one-partition", "create-across-nodes"} {
		for _, depth := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/depth=%d", name, depth), func(b *testing.B) {
				var next atomic.Int64
				var wg sync.WaitGroup
				b.ResetTimer()
				for range depth {
					wg.Go(func() {
						for next.Add(1) <= int64(b.N) {
							if err := ops[name](); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			})
		}
	}
}
