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

// TestFreshBlocksAreZeroed reuses a freed file's blocks for a small write
// of another file: the rest of the reused blocks reads as zeros. With the
// zeroing removed (mutation) the freed file's bytes show through.
func TestFreshBlocksAreZeroed(t *testing.T) {
	for _, mutate := range []bool{false, true} {
		t.Run(map[bool]string{false: "zeroed", true: "zeroing removed (mutation)"}[mutate], func(t *testing.T) {
			clk := &clock{now: time.Unix(1_000_000, 0)}
			c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, RegionSize: 16 << 20, Now: clk.Now,
				Lease: time.Second, Quarantine: 2 * time.Second})
			dataplane.SetMutations(c.Nodes[0].Proc().Service, false, mutate)
			e := c.NewEngine(func(cfg *dpclient.Config) { cfg.Now = clk.Now })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			secret := bytes.Repeat([]byte("secret! "), 32<<10)
			require.NoError(t, e.WriteAt(ctx, 1, secret, 0))
			require.NoError(t, e.Free(ctx, 1))
			clk.advance(3 * time.Second)
			require.NoError(t, e.WriteAt(ctx, 2, []byte("hello"), 5000))
			got := make([]byte, 8192)
			require.NoError(t, e.ReadAt(ctx, 2, got, 0))
			leaked := bytes.Contains(got, []byte("secret"))
			require.Equal(t, mutate, leaked, "another file's bytes show through: %v", leaked)
			if !mutate {
				want := make([]byte, 8192)
				copy(want[5000:], "hello")
				require.Equal(t, want, got)
			}
		})
	}
}

// TestServerPersistMutation: with the owner's persist step removed, data
// the client persisted is lost at power loss; the same test with it
// intact is TestPersistSurvivesPowerLoss in dpclient.
func TestServerPersistMutation(t *testing.T) {
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: 1, Tracker: true, RegionSize: 16 << 20})
	for _, mutate := range []bool{false, true} {
		dataplane.SetMutations(c.Nodes[0].Proc().Service, mutate, false)
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
