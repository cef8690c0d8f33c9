package dataplane_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

// TestFreeSpaceInOtherPartitionsPoolsIsUsable: the free space a node
// reports (statfs's) counts the free blocks of every partition's pools,
// so a write must be able to reach them from any partition. Each of 32
// partitions first writes a little, which leaves it a pool with a free
// tail; then one file is written over every partition until ENOSPC.
// Before, a partition whose pools were full answered ENOSPC as soon as
// the region itself was out of blocks, while the other partitions' pool
// tails still held a third of what statfs called free (a 3-node demo
// cluster took 500 MiB of a file with 692 MiB free; go build in the mount
// failed with ENOSPC at a third of the space used). The tails are given
// back to the region when it runs out.
func TestFreeSpaceInOtherPartitionsPoolsIsUsable(t *testing.T) {
	const partitions = 64
	c := dptest.New(t, dptest.Options{Nodes: 1, Partitions: partitions, RegionSize: 32 << 20})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := c.NewEngine()
	svc := c.Nodes[0].Proc().Service
	// A few blocks in each partition (one small file per chunk partition
	// it lands in), persisted.
	small := make([]byte, 3*4096)
	for i := range 4 * partitions {
		ino := uint64(1<<48 | 100 + i)
		require.NoError(t, e.WriteAt(ctx, ino, small, 0))
		require.NoError(t, e.Persist(ctx, ino))
	}
	free := svc.Capacity().Free
	// One striped file until ENOSPC, a chunk at a time.
	const big = 1<<48 | 7
	piece := make([]byte, wire.ChunkSize/4)
	var written uint64
	for {
		err := e.WriteAt(ctx, big, piece, written)
		if err != nil {
			require.True(t, errors.Is(err, dpclient.ErrNoSpace), "the write fails with ENOSPC: %v", err)
			break
		}
		written += uint64(len(piece))
		require.Less(t, written, free+uint64(len(piece)), "wrote more than the free space reported")
	}
	t.Logf("free %d MiB, written %d MiB before ENOSPC", free>>20, written>>20)
	require.GreaterOrEqual(t, written, free-free/8, "the space statfs reported free could be written")
}
