package dataplane

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// exportFixture is a node's export behind a listener whose accept loop
// routes data connections to Accept, as package node does.
type exportFixture struct {
	e      *Export
	region *pmem.Region
	addr   string
	token  atomic.Pointer[string]
}

func startExport(t *testing.T) *exportFixture {
	t.Helper()
	f := &exportFixture{}
	tok := testToken
	f.token.Store(&tok)
	var err error
	f.region, err = pmem.Format(pmem.NewMemMedium(8<<20), pmem.FormatOptions{Now: time.Unix(1, 0)}, pmem.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { f.region.Close() })
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	f.e, err = NewExport(ExportConfig{Region: f.region, Device: dev, Incarnation: 42, Token: func() string { return *f.token.Load() }})
	require.NoError(t, err)
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	ln, err := rdma.Listen(pd, "127.0.0.1:0")
	require.NoError(t, err)
	f.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			req, err := ln.Next(ctx)
			if err != nil {
				return
			}
			h, err := DecodeHello(req.PrivateData)
			if err != nil {
				req.Reject(err.Error())
				continue
			}
			f.e.Accept(ctx, req, h)
		}
	}()
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
		require.NoError(t, f.e.Close())
		require.NoError(t, pd.Close())
	})
	return f
}

// dataSpan allocates a pool-like extent in the region's data area and
// returns it as a span.
func dataSpan(t *testing.T, r *pmem.Region, blocks uint64) Span {
	t.Helper()
	tx, err := r.Begin(context.Background())
	require.NoError(t, err)
	id, err := tx.AllocRecord(7)
	require.NoError(t, err)
	ext, err := tx.AllocExtent(id, blocks)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	return Span{Off: r.ExtentOffset(ext), Len: blocks * uint64(r.Geometry().BlockSize)}
}

// dataClient is a client's device with one registered buffer.
type dataClient struct {
	dev rdma.Device
	pd  rdma.PD
	cq  rdma.CQ
	mr  rdma.MR
}

func newDataClient(t *testing.T) *dataClient {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	c := &dataClient{dev: dev}
	c.pd, err = dev.AllocPD()
	require.NoError(t, err)
	c.cq, err = dev.CreateCQ(64)
	require.NoError(t, err)
	c.mr, err = c.pd.RegMR(make([]byte, 8192), rdma.AccessLocalWrite)
	require.NoError(t, err)
	return c
}

func (c *dataClient) dial(t *testing.T, addr, token string, id uint64) (*rdma.Conn, Grant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, g, err := DialData(ctx, c.pd, c.cq, addr, 16, Hello{Token: token, ClientID: id, Incarnation: 1, Client: "test"})
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn, g
}

// op posts one READ or WRITE of n bytes between the buffer's start and
// raddr and returns its completion status.
func (c *dataClient) op(t *testing.T, conn *rdma.Conn, opcode rdma.Opcode, raddr uint64, rkey uint32, n uint32) rdma.WCStatus {
	t.Helper()
	require.NoError(t, conn.QP.PostSend([]rdma.SendWR{{Opcode: opcode, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: c.mr.Addr(), Length: n, LKey: c.mr.LKey()}}, RemoteAddr: raddr, RKey: rkey}}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rdma.WorkCompletion
	_, err := c.cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	return wc[0].Status
}

func TestExportOnlyExposedSpans(t *testing.T) {
	f := startExport(t)
	span := dataSpan(t, f.region, 4)
	c := newDataClient(t)
	conn, g := c.dial(t, f.addr, testToken, 1)
	require.Equal(t, uint64(42), g.Incarnation)
	require.Equal(t, f.region.Geometry().BlockSize, g.BlockSize)

	_, err := f.e.RemoteKey(g.Session, span.Off)
	require.ErrorIs(t, err, ErrNotExposed, "nothing is exposed before Expose")
	require.NoError(t, f.e.Expose(span))
	key, err := f.e.RemoteKey(g.Session, span.Off)
	require.NoError(t, err)

	copy(c.mr.Bytes(), "hello pool")
	require.Equal(t, rdma.WCSuccess, c.op(t, conn, rdma.OpWrite, key.Addr+100, key.RKey, 10))
	require.Equal(t, "hello pool", string(f.region.Bytes()[span.Off+100:span.Off+110]), "the write landed in the pool")
	require.Equal(t, rdma.WCSuccess, c.op(t, conn, rdma.OpRead, key.Addr+span.Len-8, key.RKey, 8), "last bytes of the span")

	// One byte past the span, and the superblock at the region's start,
	// are not reachable with the span's key.
	require.Equal(t, rdma.WCRemAccessErr, c.op(t, conn, rdma.OpRead, key.Addr+span.Len-8, key.RKey, 9))
}

func TestExportRegionMetadataUnreachable(t *testing.T) {
	f := startExport(t)
	span := dataSpan(t, f.region, 4)
	require.NoError(t, f.e.Expose(span))
	c := newDataClient(t)
	conn, g := c.dial(t, f.addr, testToken, 1)
	key, err := f.e.RemoteKey(g.Session, span.Off)
	require.NoError(t, err)
	// The superblock is span.Off bytes before the span's first byte.
	superblock := key.Addr - span.Off
	require.Equal(t, rdma.WCRemAccessErr, c.op(t, conn, rdma.OpRead, superblock, key.RKey, 64))
}

func TestExportKeyWorksOnlyOnItsConnection(t *testing.T) {
	f := startExport(t)
	span := dataSpan(t, f.region, 2)
	require.NoError(t, f.e.Expose(span))
	a, b := newDataClient(t), newDataClient(t)
	connA, gA := a.dial(t, f.addr, testToken, 1)
	connB, gB := b.dial(t, f.addr, testToken, 2)
	keyA, err := f.e.RemoteKey(gA.Session, span.Off)
	require.NoError(t, err)
	keyB, err := f.e.RemoteKey(gB.Session, span.Off)
	require.NoError(t, err)
	require.NotEqual(t, keyA.RKey, keyB.RKey)
	require.Equal(t, rdma.WCSuccess, a.op(t, connA, rdma.OpRead, keyA.Addr, keyA.RKey, 64))
	require.Equal(t, rdma.WCRemAccessErr, b.op(t, connB, rdma.OpRead, keyA.Addr, keyA.RKey, 64),
		"another connection's rkey names no region of this connection's protection domain")
}

func TestExportEvictFencesOldKeys(t *testing.T) {
	f := startExport(t)
	span := dataSpan(t, f.region, 2)
	require.NoError(t, f.e.Expose(span))
	c := newDataClient(t)
	conn, g := c.dial(t, f.addr, testToken, 5)
	key, err := f.e.RemoteKey(g.Session, span.Off)
	require.NoError(t, err)
	require.Equal(t, rdma.WCSuccess, c.op(t, conn, rdma.OpWrite, key.Addr, key.RKey, 64))

	require.Equal(t, 1, f.e.Evict(5))
	_, err = f.e.RemoteKey(g.Session, span.Off)
	require.ErrorIs(t, err, ErrNoSession)
	require.NotEqual(t, rdma.WCSuccess, c.op(t, conn, rdma.OpWrite, key.Addr, key.RKey, 64), "the evicted connection is closed")

	// The client may come back, but its old key is dead on the new
	// connection: the owner refuses it.
	conn2, g2 := c.dial(t, f.addr, testToken, 5)
	require.NotEqual(t, g.Session, g2.Session)
	require.Equal(t, rdma.WCRemAccessErr, c.op(t, conn2, rdma.OpWrite, key.Addr, key.RKey, 64))
	conn3, g3 := c.dial(t, f.addr, testToken, 5)
	key3, err := f.e.RemoteKey(g3.Session, span.Off)
	require.NoError(t, err)
	require.Equal(t, rdma.WCSuccess, c.op(t, conn3, rdma.OpWrite, key3.Addr, key3.RKey, 64), "a fresh key works")
}

func TestExportTokenRotation(t *testing.T) {
	f := startExport(t)
	span := dataSpan(t, f.region, 2)
	require.NoError(t, f.e.Expose(span))
	c := newDataClient(t)
	conn, g := c.dial(t, f.addr, testToken, 5)
	_, err := f.e.RemoteKey(g.Session, span.Off)
	require.NoError(t, err)

	rotated := "new-token"
	f.token.Store(&rotated)
	require.Equal(t, 1, f.e.Revalidate())
	select {
	case <-conn.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection with the old token stays open")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, err = DialData(ctx, c.pd, c.cq, f.addr, 4, Hello{Token: testToken, ClientID: 5, Incarnation: 1})
	require.ErrorIs(t, err, rdma.ErrRejected)
	require.ErrorContains(t, err, "wrong cluster token")
	c.dial(t, f.addr, rotated, 5)
}

func TestExportWithdraw(t *testing.T) {
	f := startExport(t)
	span := dataSpan(t, f.region, 2)
	require.NoError(t, f.e.Expose(span))
	c := newDataClient(t)
	conn, g := c.dial(t, f.addr, testToken, 5)
	key, err := f.e.RemoteKey(g.Session, span.Off)
	require.NoError(t, err)
	f.e.Withdraw(span.Off)
	_, err = f.e.RemoteKey(g.Session, span.Off)
	require.ErrorIs(t, err, ErrNotExposed)
	require.Equal(t, rdma.WCRemAccessErr, c.op(t, conn, rdma.OpRead, key.Addr, key.RKey, 64))
}

func TestExportRefuses(t *testing.T) {
	f := startExport(t)
	c := newDataClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, tc := range map[string]struct {
		token, want string
	}{
		"wrong token": {"guess", "wrong cluster token"},
		"no token":    {"", "wrong cluster token"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := DialData(ctx, c.pd, c.cq, f.addr, 4, Hello{Token: tc.token, ClientID: 1, Incarnation: 1})
			require.ErrorIs(t, err, rdma.ErrRejected)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.Equal(t, 0, f.e.Conns())
	// An RPC hello handed to the data export is refused too.
	hello, err := EncodeHello(Hello{Purpose: PurposeRPC, Token: testToken, ClientID: 1, Incarnation: 1})
	require.NoError(t, err)
	_, err = rdma.Dial(ctx, c.pd, f.addr, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: c.cq, RecvCQ: c.cq}, PrivateData: hello})
	require.True(t, errors.Is(err, rdma.ErrRejected), "got %v", err)
}

func TestExportCloseEndsSessions(t *testing.T) {
	f := startExport(t)
	c := newDataClient(t)
	conn, _ := c.dial(t, f.addr, testToken, 1)
	require.Eventually(t, func() bool { return f.e.Conns() == 1 }, 10*time.Second, time.Millisecond)
	conn.Close()
	require.Eventually(t, func() bool { return f.e.Conns() == 0 }, 10*time.Second, time.Millisecond, "a closed client is forgotten")
}
