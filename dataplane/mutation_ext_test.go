package dataplane_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestFreshBlocksAreZeroed reuses a freed file's blocks for another file
// and checks that nothing of the freed file ever reads back: not in a
// block a small write covers in part (zeroed before it is mapped), not in
// blocks fallocate maps (unwritten: they read as zeros without being
// zeroed), not after a power loss in blocks written and never persisted
// (still unwritten after recovery). Each case runs again with the step
// that protects it removed (a mutation), and then the freed file's bytes
// do show through.
func TestFreshBlocksAreZeroed(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name    string
		mutate  dataplane.Mutations
		tracker bool
		// reuse touches blocks of the freed file through e and returns
		// what a client (reader) sees there.
		reuse func(t *testing.T, ctx context.Context, c *dptest.Cluster, e, reader *dpclient.Engine) []byte
	}{
		{
			name:   "block a write covers in part",
			mutate: dataplane.Mutations{SkipZero: true},
			reuse: func(t *testing.T, ctx context.Context, c *dptest.Cluster, e, reader *dpclient.Engine) []byte {
				require.NoError(t, e.WriteAt(ctx, 2, []byte("hello"), 5000))
				require.NoError(t, e.Persist(ctx, 2))
				got := make([]byte, 8192)
				require.NoError(t, reader.ReadAt(ctx, 2, got, 0))
				want := make([]byte, 8192)
				copy(want[5000:], "hello")
				return diffOrNil(got, want)
			},
		},
		{
			name:   "unwritten blocks of fallocate",
			mutate: dataplane.Mutations{MapWritten: true},
			reuse: func(t *testing.T, ctx context.Context, c *dptest.Cluster, e, reader *dpclient.Engine) []byte {
				require.NoError(t, e.Allocate(ctx, 2, wire.FallocKeepSize, 0, mib/4))
				got := make([]byte, mib/4)
				require.NoError(t, reader.ReadAt(ctx, 2, got, 0))
				return diffOrNil(got, make([]byte, mib/4))
			},
		},
		{
			name:    "written, not persisted, power lost",
			mutate:  dataplane.Mutations{MapWritten: true},
			tracker: true,
			reuse: func(t *testing.T, ctx context.Context, c *dptest.Cluster, e, reader *dpclient.Engine) []byte {
				require.NoError(t, e.WriteAt(ctx, 2, bytes.Repeat([]byte("new data"), mib/4/8), 0))
				c.Nodes[0].Crash(rand.New(rand.NewPCG(5, 6)))
				got := make([]byte, mib/4)
				require.NoError(t, c.NewEngine().ReadAt(ctx, 2, got, 0))
				return diffOrNil(got, make([]byte, mib/4))
			},
		},
	} {
		for _, mutate := range []bool{false, true} {
			name := tc.name
			if mutate {
				name += " (mutation)"
			}
			t.Run(name, func(t *testing.T) {
				clk := &clock{now: time.Unix(1_000_000, 0)}
				c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, RegionSize: 16 << 20, Now: clk.Now,
					Lease: time.Second, Quarantine: 2 * time.Second, Tracker: tc.tracker})
				e := c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = clk.Now })
				reader := c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = clk.Now })
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				secret := bytes.Repeat([]byte("secret! "), mib/2/8)
				require.NoError(t, e.WriteAt(ctx, 1, secret, 0))
				require.NoError(t, e.Persist(ctx, 1))
				require.NoError(t, c.Free(ctx, 1))
				clk.advance(3 * time.Second) // the quarantine is over
				if mutate {
					dataplane.SetMutations(c.Nodes[0].Proc().Service, tc.mutate)
				}
				diff := tc.reuse(t, ctx, c, e, reader)
				leaked := bytes.Contains(diff, []byte("secret"))
				if mutate {
					require.True(t, leaked, "with the step removed the freed file's bytes show through")
					return
				}
				require.Nil(t, diff, "the reused blocks read as they should")
			})
		}
	}
}

// diffOrNil returns got if it differs from want, else nil.
func diffOrNil(got, want []byte) []byte {
	if bytes.Equal(got, want) {
		return nil
	}
	return got
}

// TestServerPersistMutation: with the owner's persist step removed, data
// the client persisted is lost at power loss; the same test with it
// intact is TestPersistSurvivesPowerLoss in dpclient.
func TestServerPersistMutation(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, Tracker: true, RegionSize: 16 << 20})
	for _, mutate := range []bool{false, true} {
		dataplane.SetMutations(c.Nodes[0].Proc().Service, dataplane.Mutations{SkipPersist: mutate})
		e := c.NewEngine()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		data := bytes.Repeat([]byte{0x5a}, 64<<10)
		ino := uint64(10)
		if mutate {
			ino = 11
		}
		require.NoError(t, e.WriteAt(ctx, ino, data, 0))
		require.NoError(t, e.Persist(ctx, ino))
		c.Nodes[0].Crash(rand.New(rand.NewPCG(3, 4)))
		got := make([]byte, len(data))
		require.NoError(t, c.NewEngine().ReadAt(ctx, ino, got, 0))
		require.Equal(t, !mutate, bytes.Equal(data, got), "mutation %v", mutate)
		cancel()
	}
}
