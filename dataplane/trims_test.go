package dataplane_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rpc"
	"github.com/octofs/octofs/rdma/soft"
)

// stripedFile writes a persisted file of n chunks at inode ino and
// returns its bytes.
func stripedFile(t *testing.T, ctx context.Context, c *dptest.Cluster, ino uint64, chunks int) []byte {
	t.Helper()
	e := c.NewEngine()
	data := bytes.Repeat([]byte("old data"), chunks*wire.ChunkSize/8)
	require.NoError(t, e.WriteAt(ctx, ino, data, 0))
	require.NoError(t, e.Persist(ctx, ino))
	return data
}

// nodeIndex returns the index of node id in c.Nodes.
func nodeIndex(c *dptest.Cluster, id cluster.NodeID) int {
	for i, n := range c.Nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}

// TestTruncateWithNodeDown truncates a file striped over three nodes while
// one of them is down. The truncate succeeds (the trim is deferred at the
// inode's owner) once the map says the node is down, and fails (for the
// namespace to retry) while the node is merely silent. When the node comes
// back, the first request for the file's chunks there makes it collect and
// apply the deferred trim first: the truncated bytes read as zeros. With
// that step removed (mutation), the node serves the truncated bytes.
func TestTruncateWithNodeDown(t *testing.T) {
	for _, mutate := range []bool{false, true} {
		name := map[bool]string{false: "gated", true: "gate removed (mutation)"}[mutate]
		t.Run(name, func(t *testing.T) {
			c := dptest.New(t, dptest.Options{Nodes: 3, Partitions: 3, RegionSize: 64 << 20})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const ino = 0<<48 | 42 // partition 0: owned by n1
			const chunks = 6
			data := stripedFile(t, ctx, c, ino, chunks)
			m := c.Maps().Current()
			owner, err := m.OwnerOfInode(ino)
			require.NoError(t, err)
			// The node to take down holds some of the file's last chunks.
			var down cluster.NodeID
			for ch := uint64(chunks - 1); ch > 0 && down == ""; ch-- {
				if n, _ := m.ChunkOwner(ino, ch); n.ID != owner.ID {
					down = n.ID
				}
			}
			require.NotEmpty(t, down)
			dn := c.Nodes[nodeIndex(c, down)]

			dn.Stop()
			err = c.Truncate(ctx, ino, uint64(len(data)), wire.ChunkSize/2)
			require.Error(t, err, "a node that is silent but not down in the map makes the truncate fail, for the namespace to retry")
			require.Empty(t, dataplane.PendingTrims(c.Nodes[nodeIndex(c, owner.ID)].Proc().Service, string(down)))

			c.SetState(down, cluster.StateDown)
			require.NoError(t, c.Truncate(ctx, ino, uint64(len(data)), wire.ChunkSize/2), "a node that is down does not make the truncate fail")
			ownerSvc := c.Nodes[nodeIndex(c, owner.ID)].Proc().Service
			require.Equal(t, map[uint64]uint64{ino: wire.ChunkSize / 2}, dataplane.PendingTrims(ownerSvc, string(down)), "the owner keeps the trim for the node")

			dn.Start()
			usedBefore := dn.Proc().Service.Capacity().Used // what the restart kept: the logged blocks
			if mutate {
				dataplane.SetMutations(dn.Proc().Service, dataplane.Mutations{SkipGate: true})
			}
			c.SetState(down, cluster.StateUp)
			got := make([]byte, len(data))
			require.NoError(t, c.NewEngine().ReadAt(ctx, ino, got, 0))
			stale := !bytes.Equal(got[wire.ChunkSize/2:], make([]byte, len(data)-wire.ChunkSize/2))
			if mutate {
				require.True(t, stale, "without the gate the node serves bytes of the truncated range")
				return
			}
			require.False(t, stale, "the truncated range reads as zeros on the node that was down")
			require.Equal(t, data[:wire.ChunkSize/2], got[:wire.ChunkSize/2])
			require.Empty(t, dataplane.PendingTrims(ownerSvc, string(down)), "the node acknowledged the trim")
			require.Less(t, dn.Proc().Service.Capacity().Used, usedBefore, "the node freed the blocks")
		})
	}
}

// TestFreeWithNodeDownReclaimedBySweep frees a file while a node holding
// some of its chunks is down; when the node is back its periodic sweep
// collects the deferred free and releases the blocks, though nobody
// touches the file again.
func TestFreeWithNodeDownReclaimedBySweep(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 3, Partitions: 3, RegionSize: 64 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ino = 0<<48 | 43
	stripedFile(t, ctx, c, ino, 6)
	dn := c.Nodes[2]
	dn.Stop()
	c.SetState(dn.ID, cluster.StateDown)
	require.NoError(t, c.Free(ctx, ino))
	dn.Start()
	c.SetState(dn.ID, cluster.StateUp)
	require.NotZero(t, dn.Proc().Service.Capacity().Used, "the file's blocks on the node outlive the free while it was down")
	dn.Proc().Service.Sweep()
	require.Zero(t, dn.Proc().Service.Capacity().Used, "the sweep applied the deferred free")
}

// TestNodeDownInItsMapServesNoExtents: a node that its own map shows down
// refuses to hand out extents (it cannot know what was truncated
// meanwhile) with a retryable status.
func TestNodeDownInItsMapServesNoExtents(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, RegionSize: 16 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e := c.NewEngine()
	require.NoError(t, e.WriteAt(ctx, 5, []byte("x"), 0))
	c.SetState(c.Nodes[0].ID, cluster.StateDown)
	e.Forget(5)
	err := e.ReadAt(ctx, 5, make([]byte, 1), 0)
	require.Error(t, err)
	require.Contains(t, err.Error(), "not ready")
	c.SetState(c.Nodes[0].ID, cluster.StateUp)
	require.NoError(t, e.ReadAt(ctx, 5, make([]byte, 1), 0))
}

// TestTrimReportsDamagedPartition: a trim cannot reach a partition whose
// log is damaged, and says so instead of reporting success.
func TestTrimReportsDamagedPartition(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 2, RegionSize: 32 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ino = 0<<48 | 7
	stripedFile(t, ctx, c, ino, 3)
	svc := c.Nodes[0].Proc().Service
	dataplane.BreakPartition(svc, 1, errors.New("checksum mismatch (test)"))
	err := c.Truncate(ctx, ino, 3*wire.ChunkSize, 0)
	require.Error(t, err)
	require.Contains(t, err.Error(), "damaged partition 1")
	require.Contains(t, err.Error(), "checksum mismatch (test)")
}

// TestRequestsMustMatchTheirConnection sends chunk-service requests over a
// connection opened as one client: requests naming another client (for
// instance to use that one's data session) and trims (which only nodes
// send) are refused with EPERM; the connection's own requests are served.
func TestRequestsMustMatchTheirConnection(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, RegionSize: 16 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	const me, inc, other = 0x1111, 0x2222, 0x3333
	hello, err := dataplane.EncodeHello(dataplane.Hello{Purpose: dataplane.PurposeRPC, Token: dptest.Token, ClientID: me, Incarnation: inc})
	require.NoError(t, err)
	pool, err := rpc.NewPool(rpc.PoolConfig{PD: pd, Client: rpc.ClientConfig{Device: dev, PrivateData: hello}})
	require.NoError(t, err)
	defer pool.Close()
	addr := c.Maps().Current().Nodes[0].RDMAAddr
	call := func(req wire.Request) wire.Reply {
		b, err := pool.Call(ctx, addr, uint16(req.Op), dataplane.RandomID(), req.Encode())
		require.NoError(t, err)
		rep, err := wire.DecodeReply(b)
		require.NoError(t, err)
		return rep
	}
	for name, tc := range map[string]struct {
		req  wire.Request
		want wire.Status
	}{
		"own statfs":           {wire.Request{Op: wire.OpStatfs, Header: wire.Header{Epoch: 1, ClientID: me, Incarnation: inc}}, wire.StatusOK},
		"another client's id":  {wire.Request{Op: wire.OpStatfs, Header: wire.Header{Epoch: 1, ClientID: other, Incarnation: inc}}, wire.Status(syscall.EPERM)},
		"another incarnation":  {wire.Request{Op: wire.OpStatfs, Header: wire.Header{Epoch: 1, ClientID: me, Incarnation: inc + 1}}, wire.Status(syscall.EPERM)},
		"map as another":       {wire.Request{Op: wire.OpMap, Header: wire.Header{Epoch: 1, ClientID: other, Incarnation: inc}, Session: 1, Ino: 1}, wire.Status(syscall.EPERM)},
		"trim from a client":   {wire.Request{Op: wire.OpTrim, Header: wire.Header{Epoch: 1, ClientID: me, Incarnation: inc}, Ino: 1}, wire.Status(syscall.EPERM)},
		"free from a client":   {wire.Request{Op: wire.OpFree, Header: wire.Header{Epoch: 1, ClientID: me, Incarnation: inc}, Ino: 1}, wire.Status(syscall.EPERM)},
		"collect from client":  {wire.Request{Op: wire.OpTrimCollect, Header: wire.Header{Epoch: 1, ClientID: me, Incarnation: inc}, Node: "n1"}, wire.Status(syscall.EPERM)},
		"unknown data session": {wire.Request{Op: wire.OpMap, Header: wire.Header{Epoch: 1, ClientID: me, Incarnation: inc}, Session: 999, Ino: 1}, wire.StatusNoSession},
	} {
		t.Run(name, func(t *testing.T) {
			rep := call(tc.req)
			require.Equal(t, tc.want, rep.Status, rep.Message)
		})
	}
}

// TestCapacityLeavesLogReserve: the free space a node reports (statfs's)
// leaves out the region's LogReserve, which data pools never take, so
// that it runs out when writes start to answer ENOSPC.
func TestCapacityLeavesLogReserve(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 4, RegionSize: 16 << 20})
	p := c.Nodes[0].Proc()
	st := p.Region.Stats()
	regionFree := (st.Blocks - st.BlocksUsed) * uint64(st.BlockSize)
	reserve := max(dataplane.DefaultLogReserve, uint64(len(p.Region.Bytes()))/32)
	cp := p.Service.Capacity()
	require.Zero(t, cp.Used, "nothing written yet")
	require.Equal(t, regionFree-reserve, cp.Free)
}
