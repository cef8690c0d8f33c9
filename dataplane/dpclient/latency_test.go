package dpclient_test

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// TestWarmReadLatency times 4 KiB random reads of a file whose extents are
// cached, through the engine (registered buffer, and plain memory with a
// copy), beside raw 4 KiB RDMA READs of the same blocks on a connection of
// its own, in the same run. It logs the medians; it asserts only what does
// not depend on the machine: one RDMA READ and no RPC per read.
func TestWarmReadLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test; not in -short")
	}
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino, size, n = 1<<48 | 71, wire.ChunkSize, 2000
	require.NoError(t, e.WriteAt(ctx, ino, pattern(71, size), 0))
	require.NoError(t, e.Persist(ctx, ino))

	// Raw: a data connection of its own and the chunk's extents for it.
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	buf, err := rdma.AllocBuffer(4096)
	require.NoError(t, err)
	defer rdma.FreeBuffer(buf)
	mr, err := pd.RegMR(buf, rdma.AccessLocalWrite)
	require.NoError(t, err)
	id := dataplane.RandomID()
	node := c.Maps().Current().Nodes[0]
	conn, g, err := dataplane.DialData(ctx, pd, cq, node.RDMAAddr, 16, dataplane.Hello{Token: dptest.Token, ClientID: id, Incarnation: 1})
	require.NoError(t, err)
	defer conn.Close()
	req := wire.Request{Op: wire.OpMap, Header: wire.Header{Epoch: 1, ClientID: id, Incarnation: 1}, Session: g.Session, Ino: ino}
	b, err := c.Caller().Call(ctx, node, uint16(wire.OpMap), req.Encode())
	require.NoError(t, err)
	rep, err := wire.DecodeReply(b)
	require.NoError(t, err)
	require.Equal(t, wire.StatusOK, rep.Status, rep.Message)
	require.Len(t, rep.Extents, 1)
	require.False(t, rep.Extents[0].Unwritten(), "persisted")
	x := rep.Extents[0]

	rng := rand.New(rand.NewPCG(7, 7))
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = rng.Uint64N(size/4096) * 4096
	}
	var wc [1]rdma.WorkCompletion
	raw := timeEach(offs, func(off uint64) {
		require.NoError(t, conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 4096, LKey: mr.LKey()}}, RemoteAddr: x.Addr + off, RKey: x.RKey}}))
		_, err := cq.Wait(ctx, wc[:])
		require.NoError(t, err)
		require.Equal(t, rdma.WCSuccess, wc[0].Status)
	})

	reg, err := e.AllocBuffer(4096)
	require.NoError(t, err)
	defer reg.Free()
	require.NoError(t, e.ReadAt(ctx, ino, reg.Bytes(), 0))
	before := e.Stats()
	zero := timeEach(offs, func(off uint64) { require.NoError(t, e.ReadAt(ctx, ino, reg.Bytes(), off)) })
	plain := make([]byte, 4096)
	copied := timeEach(offs, func(off uint64) { require.NoError(t, e.ReadAt(ctx, ino, plain, off)) })
	after := e.Stats()
	require.Equal(t, uint64(2*n), after.RDMAReads-before.RDMAReads, "one RDMA READ per read")
	require.Equal(t, before.TotalRPCs(), after.TotalRPCs(), "no RPC per read")
	t.Logf("4 KiB random read p50 over %d reads: raw READ %v, engine (registered) %v = %.2fx, engine (copy) %v = %.2fx",
		n, raw, zero, float64(zero)/float64(raw), copied, float64(copied)/float64(raw))
}

// timeEach runs f for each offset and returns the median time.
func timeEach(offs []uint64, f func(off uint64)) time.Duration {
	d := make([]time.Duration, len(offs))
	for i, off := range offs {
		start := time.Now()
		f(off)
		d[i] = time.Since(start)
	}
	slices.Sort(d)
	return d[len(d)/2]
}

// TestSequentialBandwidth moves 1 MiB at a time through the engine
// (registered buffer) and raw 1 MiB READs and WRITEs on a connection of
// its own, in the same run, and logs the rates. Writes are measured over
// allocated blocks (overwrite) and into a new file (allocation, with its
// zeroing, included).
func TestSequentialBandwidth(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test; not in -short")
	}
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, RegionSize: 256 << 20})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino, mib, total = 1<<48 | 81, 1 << 20, 64 << 20
	reg, err := e.AllocBuffer(mib)
	require.NoError(t, err)
	defer reg.Free()
	copy(reg.Bytes(), pattern(81, mib))
	for off := uint64(0); off < total; off += mib {
		require.NoError(t, e.WriteAt(ctx, ino, reg.Bytes(), off))
	}

	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	buf, err := rdma.AllocBuffer(mib)
	require.NoError(t, err)
	defer rdma.FreeBuffer(buf)
	mr, err := pd.RegMR(buf, rdma.AccessLocalWrite)
	require.NoError(t, err)
	id := dataplane.RandomID()
	node := c.Maps().Current().Nodes[0]
	conn, g, err := dataplane.DialData(ctx, pd, cq, node.RDMAAddr, 16, dataplane.Hello{Token: dptest.Token, ClientID: id, Incarnation: 1})
	require.NoError(t, err)
	defer conn.Close()
	req := wire.Request{Op: wire.OpMap, Header: wire.Header{Epoch: 1, ClientID: id, Incarnation: 1}, Session: g.Session, Ino: ino}
	b, err := c.Caller().Call(ctx, node, uint16(wire.OpMap), req.Encode())
	require.NoError(t, err)
	rep, err := wire.DecodeReply(b)
	require.NoError(t, err)
	x := rep.Extents[0]
	require.GreaterOrEqual(t, x.Len, uint32(mib))
	var wc [1]rdma.WorkCompletion
	rawOp := func(op rdma.Opcode) float64 {
		start := time.Now()
		for range total / mib {
			require.NoError(t, conn.QP.PostSend([]rdma.SendWR{{Opcode: op, Flags: rdma.SendSignaled,
				SGL: []rdma.SGE{{Addr: mr.Addr(), Length: mib, LKey: mr.LKey()}}, RemoteAddr: x.Addr, RKey: x.RKey}}))
			_, err := cq.Wait(ctx, wc[:])
			require.NoError(t, err)
			require.Equal(t, rdma.WCSuccess, wc[0].Status)
		}
		return total / time.Since(start).Seconds() / (1 << 20)
	}
	engine := func(f func(off uint64) error) float64 {
		start := time.Now()
		for off := uint64(0); off < total; off += mib {
			require.NoError(t, f(off))
		}
		return total / time.Since(start).Seconds() / (1 << 20)
	}
	rawRead := rawOp(rdma.OpRead)
	rawWrite := rawOp(rdma.OpWrite)
	read := engine(func(off uint64) error { return e.ReadAt(ctx, ino, reg.Bytes(), off) })
	over := engine(func(off uint64) error { return e.WriteAt(ctx, ino, reg.Bytes(), off) })
	fresh := engine(func(off uint64) error { return e.WriteAt(ctx, ino+1, reg.Bytes(), off) })
	t.Logf("1 MiB sequential, MiB/s: raw READ %.0f, engine read %.0f (%.2fx); raw WRITE %.0f, engine overwrite %.0f (%.2fx), engine write to a new file %.0f (%.2fx)",
		rawRead, read, read/rawRead, rawWrite, over, over/rawWrite, fresh, fresh/rawWrite)
}
