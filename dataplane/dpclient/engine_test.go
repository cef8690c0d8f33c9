package dpclient_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestWriteReadRoundTrip(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino = 1<<48 | 5
	for name, tc := range map[string]struct {
		off uint64
		n   int
	}{
		"small":            {off: 100, n: 10},
		"block":            {off: 4096, n: 4096},
		"across chunks":    {off: wire.ChunkSize - 3000, n: 9000},
		"several chunks":   {off: 3 * wire.ChunkSize / 2, n: 3 * wire.ChunkSize},
		"far, sparse file": {off: 1 << 40, n: 5000},
	} {
		t.Run(name, func(t *testing.T) {
			data := pattern(tc.off, tc.n)
			require.NoError(t, e.WriteAt(ctx, ino, data, tc.off))
			got := make([]byte, tc.n)
			require.NoError(t, e.ReadAt(ctx, ino, got, tc.off))
			require.True(t, bytes.Equal(data, got), "read back what was written")
			// A hole before the write reads as zeros.
			if tc.off >= 4096 {
				hole := make([]byte, 64)
				require.NoError(t, e.ReadAt(ctx, ino+1, hole, tc.off))
				require.Equal(t, make([]byte, 64), hole)
			}
		})
	}
}

func TestRegisteredBufferZeroCopy(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	buf, err := e.AllocBuffer(1 << 20)
	require.NoError(t, err)
	defer buf.Free()
	data := pattern(1, 1<<20)
	copy(buf.Bytes(), data)
	require.NoError(t, e.WriteAt(ctx, 7, buf.Bytes(), 0))
	clear(buf.Bytes())
	require.NoError(t, e.ReadAt(ctx, 7, buf.Bytes()[:1<<19], 1<<19))
	require.Equal(t, data[1<<19:], buf.Bytes()[:1<<19])
	require.Zero(t, e.Stats().BytesCopied, "registered memory goes without a copy")

	plain := make([]byte, 4096)
	require.NoError(t, e.ReadAt(ctx, 7, plain, 0))
	require.Equal(t, data[:4096], plain)
	require.Equal(t, uint64(4096), e.Stats().BytesCopied, "plain memory goes through a bounce buffer")
}

func TestWarmReadIsOneRDMAReadAndNoRPC(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	require.NoError(t, e.WriteAt(ctx, 9, pattern(2, wire.ChunkSize), 0))
	buf := make([]byte, 4096)
	require.NoError(t, e.ReadAt(ctx, 9, buf, 0))
	before := e.Stats()
	for i := range 100 {
		require.NoError(t, e.ReadAt(ctx, 9, buf, uint64(i)*4096))
	}
	after := e.Stats()
	require.Equal(t, uint64(100), after.RDMAReads-before.RDMAReads)
	require.Equal(t, before.TotalRPCs(), after.TotalRPCs())
}

func TestStriping(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino = 1<<48 | 77
	data := pattern(3, 64<<20)
	require.NoError(t, e.WriteAt(ctx, ino, data, 0))
	got := make([]byte, len(data))
	require.NoError(t, e.ReadAt(ctx, ino, got, 0))
	require.True(t, bytes.Equal(data, got))
	perNode := map[string]uint64{}
	for _, n := range c.Nodes {
		perNode[string(n.ID)] = n.Proc().Service.Capacity().Used
	}
	t.Logf("bytes per node of a 64 MiB file: %v", perNode)
	for id, used := range perNode {
		require.NotZero(t, used, "node %s holds none of the 16 chunks", id)
	}
}

// TestSequentialWriterAllocatesAhead: a writer going 1 MiB at a time
// through a file asks for blocks about once per chunk (allocating ahead
// within a chunk, and the next chunks in the background once the stream
// is long), while a small file written at once gets nothing it does not
// use.
func TestSequentialWriterAllocatesAhead(t *testing.T) {
	for name, tc := range map[string]struct {
		size          int
		maxAllocates  uint64
		wantPrefetch  bool
		maxVolatileKB uint64
		// reserved: each MiB is reserved 64 KiB at a time first, as
		// the client library's write-behind does, then written at once.
		reserved bool
	}{
		"long stream": {size: 12 * wire.ChunkSize, maxAllocates: 12 + 2 + 2, wantPrefetch: true},
		// 64 KiB writes start the stream's ahead smaller: four more
		// allocations in the first chunk.
		"kept behind":  {size: 12 * wire.ChunkSize, maxAllocates: 12 + 2 + 2 + 4, wantPrefetch: true, reserved: true},
		"small file":   {size: 1 << 20, maxAllocates: 1, maxVolatileKB: 1 << 10},
		"single chunk": {size: wire.ChunkSize, maxAllocates: 3, maxVolatileKB: 4 << 10},
	} {
		t.Run(name, func(t *testing.T) {
			c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 4, RegionSize: 128 << 20})
			e := c.NewEngine()
			ctx := testCtx(t)
			data := pattern(uint64(tc.size), tc.size)
			for off := 0; off < tc.size; off += 1 << 20 {
				for r := off; tc.reserved && r < off+1<<20; r += 64 << 10 {
					require.NoError(t, e.Reserve(ctx, 9, data[r:r+64<<10], uint64(r)))
				}
				require.NoError(t, e.WriteAt(ctx, 9, data[off:off+1<<20], uint64(off)))
			}
			st := e.Stats()
			require.LessOrEqual(t, st.RPCs["allocate"], tc.maxAllocates, "allocate RPCs (prefetches included: %d)", st.Prefetches)
			require.Equal(t, tc.wantPrefetch, st.Prefetches > 0, "prefetches: %d", st.Prefetches)
			got := make([]byte, tc.size)
			require.NoError(t, e.ReadAt(ctx, 9, got, 0))
			require.True(t, bytes.Equal(data, got))
			if tc.maxVolatileKB > 0 {
				require.LessOrEqual(t, c.Nodes[0].Proc().Service.VolatileBytes(), tc.maxVolatileKB<<10,
					"blocks allocated for the file")
			}
		})
	}
}

// TestPartialWriteAfterPunchAndRewrite: a block punched out and written
// whole again is this client's, under the new allocation's stamp, until
// the persist; a write covering it in part must keep what the whole write
// put there. Before, the spans this client had written into the punched
// block under the old allocation's stamp also covered it, the write asked
// the owner to allocate naming that stamp, and the owner zeroed the
// block's head as a block nobody wrote (fsx: write, punch, write, write).
func TestPartialWriteAfterPunchAndRewrite(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino = 1<<48 | 9
	want := make([]byte, 64<<10)
	write := func(off int, b byte, n int) {
		t.Helper()
		p := bytes.Repeat([]byte{b}, n)
		require.NoError(t, e.WriteAt(ctx, ino, p, uint64(off)))
		copy(want[off:], p)
	}
	write(0, 'a', 64<<10)
	require.NoError(t, e.Allocate(ctx, ino, wire.FallocPunchHole|wire.FallocKeepSize, 8192, 16384))
	clear(want[8192 : 8192+16384])
	write(4096, 'Z', 32768)
	write(18000, 'b', 4000) // in part: blocks 4 and 5
	got := make([]byte, len(want))
	require.NoError(t, e.ReadAt(ctx, ino, got, 0))
	require.Equal(t, -1, firstDiff(got, want), "read before the persist")
	require.NoError(t, e.Persist(ctx, ino))
	e.Forget(ino)
	require.NoError(t, e.ReadAt(ctx, ino, got, 0))
	require.Equal(t, -1, firstDiff(got, want), "read after the persist")
}

// TestConcurrentRequestsNeverStarveTheQueue: requests of several work
// requests each (reads of fragmented files), from several goroutines at
// once, on a queue of 8. Before, two posts could each take part of the
// queue and wait for the rest until their contexts ended, then return
// without giving their part back: every later I/O to the node waited in
// vain, and the mount hung.
func TestConcurrentRequestsNeverStarveTheQueue(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1})
	ctx := testCtx(t)
	const files, blocks = 4, 12
	// Blocks of the files in turn, from the end (no allocation ahead):
	// each file's extents alternate with the others'.
	w := c.NewEngine()
	block := make([]byte, 4096)
	for b := blocks - 1; b >= 0; b-- {
		for f := range files {
			block[0] = byte(f)
			require.NoError(t, w.WriteAt(ctx, uint64(10+f), block, uint64(b*4096)))
		}
	}
	for f := range files {
		require.NoError(t, w.Persist(ctx, uint64(10+f)))
	}
	e := c.NewEngine(func(cfg *dpclient.Config) { cfg.Depth = 8 })
	var wg sync.WaitGroup
	errs := make(chan error, files)
	for f := range files {
		wg.Go(func() {
			got := make([]byte, 6*4096) // 6 work requests
			for i := range 200 {
				octx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := e.ReadAt(octx, uint64(10+f), got, uint64(i%6)*4096)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("file %d, read %d: %w", f, i, err)
					return
				}
				if got[0] != byte(f) {
					errs <- fmt.Errorf("file %d, read %d: byte %d", f, i, got[0])
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
