package dpclient_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

// TestStaleKeyRefreshedTransparently evicts a client at every node while
// it holds extents: its next read meets a dead rkey (remote access error),
// and the engine reconnects, fetches new extents and succeeds.
func TestStaleKeyRefreshedTransparently(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	data := pattern(11, 3*wire.ChunkSize)
	require.NoError(t, e.WriteAt(ctx, 21, data, 0))
	got := make([]byte, len(data))
	require.NoError(t, e.ReadAt(ctx, 21, got, 0))
	require.NotZero(t, c.Evict(e.ClientID()), "the client had data connections")

	clear(got)
	require.NoError(t, e.ReadAt(ctx, 21, got, 0), "the application sees no error")
	require.True(t, bytes.Equal(data, got))
	st := e.Stats()
	require.NotZero(t, st.Reconnects, "the engine connected again")
	t.Logf("after eviction: %d retries, %d reconnects", st.Retries, st.Reconnects)

	// Writes too.
	c.Evict(e.ClientID())
	require.NoError(t, e.WriteAt(ctx, 21, data[:5000], 100))
}

// TestStaleExtentsNeverSeeAnotherFile frees a file under a reader that
// holds its extents, lets another file take blocks, and reads again with
// the stale extents: while the lease lasts the reader sees the freed
// file's old bytes (the blocks are quarantined, nobody else has them);
// once it has lapsed the reader asks again and sees a hole. It never sees
// the other file's bytes. The last subtest shows what the quarantine
// prevents: a reader whose lease outlives it does read the other file.
func TestStaleExtentsNeverSeeAnotherFile(t *testing.T) {
	const lease, quarantine = time.Second, 3 * time.Second
	for _, tc := range []struct {
		name string
		// readerLags keeps the reader's clock still, so that its lease
		// never ends: a client that breaks the lease rules.
		readerLags bool
	}{
		{name: "lease honoured"},
		{name: "lease outliving the quarantine", readerLags: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := &fakeClock{now: time.Unix(1_000_000, 0)}
			readerClock := nodes
			if tc.readerLags {
				readerClock = &fakeClock{now: nodes.Now()}
			}
			// One node, one partition: the two files' chunks share pools,
			// so without the quarantine the blocks would be reused.
			c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, Now: nodes.Now, Lease: lease, Quarantine: quarantine, RegionSize: 16 << 20})
			writer := c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = nodes.Now })
			reader := c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = readerClock.Now })
			ctx := testCtx(t)
			const fileA, fileB, fileC = 1, 2, 3
			a := bytes.Repeat([]byte{0xAA}, 256<<10)
			b := bytes.Repeat([]byte{0xBB}, 256<<10)
			require.NoError(t, writer.WriteAt(ctx, fileA, a, 0))
			require.NoError(t, writer.Persist(ctx, fileA))
			got := make([]byte, len(a))
			require.NoError(t, reader.ReadAt(ctx, fileA, got, 0))
			require.Equal(t, a, got)

			// A is freed; B is written at once: B cannot have A's blocks.
			require.NoError(t, c.Free(ctx, fileA))
			require.NoError(t, writer.WriteAt(ctx, fileB, b, 0))
			require.NoError(t, reader.ReadAt(ctx, fileA, got, 0))
			require.Equal(t, a, got, "within the lease the stale extents still show A's old bytes")

			// Past the quarantine, C may take A's old blocks (the
			// allocation ends the quarantine; a sweep would free A's
			// then empty pool instead, and withdraw it from the export).
			nodes.Advance(quarantine + time.Second)
			require.NoError(t, writer.WriteAt(ctx, fileC, b, 0))
			require.NoError(t, reader.ReadAt(ctx, fileA, got, 0))
			sawOther := bytes.Contains(got, []byte{0xBB})
			if tc.readerLags {
				require.True(t, sawOther, "a reader whose lease outlives the quarantine reads another file's bytes: the quarantine is what prevents it")
				return
			}
			require.False(t, sawOther, "a reader never sees another file's bytes")
			require.Equal(t, make([]byte, len(got)), got, "the freed file reads as a hole after the lease")
		})
	}
}

// TestConcurrentWritersDisjointRanges has four clients write interleaved
// ranges of one file at once, some sharing blocks and chunks; after each
// closes (persists), a client that opens the file sees every byte.
func TestConcurrentWritersDisjointRanges(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	ctx := testCtx(t)
	const ino = 1<<48 | 31
	const writers, stripe, rounds = 4, 3000, 40 // stripes share blocks
	want := make([]byte, writers*stripe*rounds)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	engines := make([]*dpclient.Engine, writers)
	for w := range writers {
		engines[w] = c.NewEngine()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w]
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for r := range rounds {
				off := (r*writers + w) * stripe
				p := make([]byte, stripe)
				for i := range p {
					p[i] = byte(rng.Uint32())
				}
				copy(want[off:], p)
				if err := e.WriteAt(ctx, ino, p, uint64(off)); err != nil {
					errs[w] = err
					return
				}
			}
			errs[w] = e.Persist(ctx, ino)
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	reader := c.NewEngine()
	got := make([]byte, len(want))
	require.NoError(t, reader.ReadAt(ctx, ino, got, 0))
	require.Equal(t, -1, firstDiff(got, want))
}

// TestNoSpaceLeavesFileConsistent fills a small cluster: the write that
// does not fit fails with ErrNoSpace, and everything written before reads
// back.
func TestNoSpaceLeavesFileConsistent(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 4, RegionSize: 8 << 20})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino = 1<<48 | 41
	block := pattern(5, 256<<10)
	var written uint64
	var err error
	for range 64 {
		if err = e.WriteAt(ctx, ino, block, written); err != nil {
			break
		}
		written += uint64(len(block))
	}
	require.ErrorIs(t, err, dpclient.ErrNoSpace)
	require.NotZero(t, written)
	got := make([]byte, len(block))
	for off := uint64(0); off < written; off += uint64(len(block)) {
		require.NoError(t, e.ReadAt(ctx, ino, got, off))
		require.Equal(t, block, got, "offset %d", off)
	}
	// Freeing makes room again, once the quarantine is over.
	capBefore, err := e.StatFS(ctx)
	require.NoError(t, err)
	require.NoError(t, c.Free(ctx, ino))
	capAfter, err := e.StatFS(ctx)
	require.NoError(t, err)
	require.Greater(t, capAfter.Quarantined, capBefore.Quarantined)
	t.Logf("capacity full: %+v; after free: %+v", capBefore, capAfter)
}

// TestBlocksNamedLongAgoFreeAtOnce: blocks that no reply has named for a
// quarantine are free at once when their file goes (no client can hold
// them: a lease is shorter), so an rm on a full file system of a file
// written long ago gives its space back at once; blocks named recently
// are still quarantined.
func TestBlocksNamedLongAgoFreeAtOnce(t *testing.T) {
	const lease, quarantine = time.Second, 3 * time.Second
	clock := &fakeClock{now: time.Unix(1_000_000, 0)}
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, Now: clock.Now, Lease: lease, Quarantine: quarantine, RegionSize: 16 << 20})
	e := c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = clock.Now })
	ctx := testCtx(t)
	const old, recent = 1, 2
	data := bytes.Repeat([]byte{0xAA}, 256<<10)
	require.NoError(t, e.WriteAt(ctx, old, data, 0))
	require.NoError(t, e.Persist(ctx, old))
	clock.Advance(quarantine + time.Second)
	require.NoError(t, e.WriteAt(ctx, recent, data, 0))
	require.NoError(t, e.Persist(ctx, recent))

	require.NoError(t, c.Free(ctx, old))
	capa, err := e.StatFS(ctx)
	require.NoError(t, err)
	require.Zero(t, capa.Quarantined, "blocks last named a quarantine ago")

	require.NoError(t, c.Free(ctx, recent))
	capa, err = e.StatFS(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, capa.Quarantined, uint64(len(data)), "blocks named within the quarantine")
}

// statfsLiar answers every statfs with a capacity near 2^64 bytes, as a
// hostile or broken node might.
type statfsLiar struct{ dpclient.Caller }

func (l statfsLiar) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	b, err := l.Caller.Call(ctx, node, op, req)
	if err != nil || wire.Op(op) != wire.OpStatfs {
		return b, err
	}
	r, err := wire.DecodeReply(b)
	if err != nil {
		return nil, err
	}
	r.Capacity = wire.Capacity{Total: 1 << 63, Free: 1 << 63, Used: 1 << 63, Quarantined: 1 << 63}
	return r.Encode(), nil
}

// TestStatfsSumsSaturate: capacities that overflow when summed over the
// nodes saturate instead of wrapping to a plausible figure (three nodes
// claiming 2^63 bytes each summed to 2^63).
func TestStatfsSumsSaturate(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 3})
	e := c.NewEngine(func(cfg *dpclient.Config) { cfg.RPC = statfsLiar{cfg.RPC} })
	s, err := e.Space(testCtx(t))
	require.NoError(t, err)
	const max = ^uint64(0)
	require.Equal(t, max, s.Total)
	require.Equal(t, max, s.Free)
	require.Equal(t, max, s.Used)
	require.Equal(t, max, s.Quarantined)
	require.LessOrEqual(t, s.Writable, s.Free)
}
