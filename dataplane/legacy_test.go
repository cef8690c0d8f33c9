package dataplane

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

const testToken = "s3cret-token"

func startLegacyExport(t *testing.T) (*Export, *pmem.Region) {
	t.Helper()
	region, err := pmem.Format(pmem.NewMemMedium(8<<20), pmem.FormatOptions{Now: time.Unix(1, 0)}, pmem.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { region.Close() })
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	e, err := StartExport(ExportConfig{Region: region, Device: dev, ListenAddr: "127.0.0.1:0", Token: func() string { return testToken }})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e, region
}

// client is the other side: a device of its own with a buffer.
type client struct {
	pd  rdma.PD
	cq  rdma.CQ
	mr  rdma.MR
	buf []byte
}

func newClient(t *testing.T) *client {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	c := &client{buf: make([]byte, 4096)}
	c.pd, err = dev.AllocPD()
	require.NoError(t, err)
	c.cq, err = dev.CreateCQ(16)
	require.NoError(t, err)
	c.mr, err = c.pd.RegMR(c.buf, rdma.AccessLocalWrite)
	require.NoError(t, err)
	return c
}

func (c *client) read(t *testing.T, conn *rdma.Conn, d Descriptor, off uint64, n uint32) rdma.WorkCompletion {
	t.Helper()
	require.NoError(t, conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: c.mr.Addr(), Length: n, LKey: c.mr.LKey()}}, RemoteAddr: d.Base + off, RKey: d.RKey}}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rdma.WorkCompletion
	_, err := c.cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	return wc[0]
}

func TestLegacyExportServesOneSidedReads(t *testing.T) {
	e, region := startLegacyExport(t)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := DialExport(ctx, c.pd, c.cq, e.Addr(), testToken, "test")
	require.NoError(t, err)
	d := e.Descriptor()
	require.Equal(t, uint64(len(region.Bytes())), d.Length)

	wc := c.read(t, conn, d, 0, 4096)
	require.Equal(t, rdma.WCSuccess, wc.Status)
	sb, err := pmem.DecodeSuperblock(c.buf)
	require.NoError(t, err, "the superblock read over RDMA decodes")
	require.Equal(t, region.Superblock().RegionUUID, sb.RegionUUID)

	// Past the region's end is refused by the responder, not served.
	wc = c.read(t, conn, d, d.Length-8, 16)
	require.Equal(t, rdma.WCRemAccessErr, wc.Status)

	require.Eventually(t, func() bool { return e.Conns() == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, conn.Close())
	require.Eventually(t, func() bool { return e.Conns() == 0 }, 10*time.Second, time.Millisecond, "a closed client is forgotten")
}

func TestLegacyExportRefusesWrongToken(t *testing.T) {
	e, _ := startLegacyExport(t)
	c := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, token := range map[string]string{"wrong": "guess", "empty": "", "prefix": testToken[:4]} {
		t.Run(name, func(t *testing.T) {
			_, err := DialExport(ctx, c.pd, c.cq, e.Addr(), token, "test")
			require.ErrorIs(t, err, rdma.ErrRejected)
			require.ErrorContains(t, err, "wrong cluster token")
		})
	}
	require.Equal(t, 0, e.Conns())
}
