package dpclient_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

// TestPersistSurvivesPowerLoss writes a file striped over three nodes,
// persists it, and cuts power at every node (each region restarts from a
// crash image in which only flushed and fenced lines survive): the data is
// intact. Without the persist step the same test loses data, which shows
// the check would catch a persist that does not flush.
func TestPersistSurvivesPowerLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		persist bool
	}{
		{"persisted", true},
		{"not persisted (mutation)", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dptest.New(t, dptest.Options{Tracker: true, RegionSize: 32 << 20})
			e := c.NewEngine()
			ctx := testCtx(t)
			const ino = 1<<48 | 51
			data := pattern(51, 6*wire.ChunkSize+12345)
			require.NoError(t, e.WriteAt(ctx, ino, data, 777))
			if tc.persist {
				require.NoError(t, e.Persist(ctx, ino))
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, n := range c.Nodes {
				n.Crash(rng)
			}
			reader := c.NewEngine()
			got := make([]byte, len(data))
			require.NoError(t, reader.ReadAt(ctx, ino, got, 777), "the extent maps survive either way: they are logged")
			if tc.persist {
				require.True(t, bytes.Equal(data, got), "persisted data survives power loss")
			} else {
				require.False(t, bytes.Equal(data, got), "data that was never persisted is lost")
				require.NotContains(t, string(got[:4096]), string(data[:64]), "unpersisted blocks read as the zeros they were given")
			}
		})
	}
}

// TestOwnerRestart restarts every node (process state dropped, region
// kept): a client's reads go on without an error (new connections, new
// keys, new extents), and a persist of writes made before the restart
// reports ErrDataLost instead of claiming durability it cannot know.
func TestOwnerRestart(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	const ino = 1<<48 | 61
	data := pattern(61, 2*wire.ChunkSize)
	require.NoError(t, e.WriteAt(ctx, ino, data, 0))
	require.NoError(t, e.Persist(ctx, ino))
	require.NoError(t, e.WriteAt(ctx, ino, data[:100], 0))
	for _, n := range c.Nodes {
		n.Restart()
	}
	got := make([]byte, len(data))
	require.NoError(t, e.ReadAt(ctx, ino, got, 0))
	require.True(t, bytes.Equal(data, got))
	require.ErrorIs(t, e.Persist(ctx, ino), dpclient.ErrDataLost)

	// New writes after the restart persist normally.
	require.NoError(t, e.WriteAt(ctx, ino, data[:100], 0))
	require.NoError(t, e.Persist(ctx, ino))
}

// TestCheckpointAndReplay rewrites every partition's log from its state
// and restarts: the extent maps replayed from the checkpoint give the
// same bytes, unwritten blocks (allocated ahead, fallocated, or written
// and never persisted) stay mapped and read as zeros, and freed blocks
// are free again.
func TestCheckpointAndReplay(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	e := c.NewEngine()
	ctx := testCtx(t)
	for ino := uint64(1); ino <= 8; ino++ {
		require.NoError(t, e.WriteAt(ctx, ino, pattern(ino, int(ino)*300_000), ino*1000))
	}
	require.NoError(t, c.Truncate(ctx, 3, 3*300_000+3000, 1000))
	e.Forget(3)
	require.NoError(t, e.Allocate(ctx, 5, wire.FallocPunchHole|wire.FallocKeepSize, 6000, 100_000))
	require.NoError(t, e.Allocate(ctx, 6, wire.FallocKeepSize, 3_000_000, 500_000))
	want := map[uint64][]byte{}
	for ino := uint64(1); ino <= 8; ino++ {
		require.NoError(t, e.Persist(ctx, ino))
		b := make([]byte, int(ino)*300_000+int(ino)*1000)
		require.NoError(t, e.ReadAt(ctx, ino, b, 0))
		want[ino] = b
	}
	// Whole blocks written and not persisted: gone after a restart.
	const unpersisted = 9
	require.NoError(t, e.WriteAt(ctx, unpersisted, pattern(9, 1<<20), 0))
	want[unpersisted] = make([]byte, 1<<20)
	used := map[string]uint64{}
	for _, n := range c.Nodes {
		require.NoError(t, n.Proc().Service.Checkpoint())
		// Volatile blocks (written or allocated ahead, never persisted)
		// are in no record: they are free after the restart.
		used[string(n.ID)] = n.Proc().Service.Capacity().Used - n.Proc().Service.VolatileBytes()
		n.Restart()
	}
	for _, n := range c.Nodes {
		require.Equal(t, used[string(n.ID)], n.Proc().Service.Capacity().Used, "node %s replays the same used blocks", n.ID)
	}
	for ino := uint64(1); ino <= unpersisted; ino++ {
		b := make([]byte, len(want[ino]))
		require.NoError(t, c.NewEngine().ReadAt(ctx, ino, b, 0))
		require.Equal(t, -1, firstDiff(b, want[ino]), "inode %d", ino)
	}
}
