package metadata_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata/wire"
)

// TestBlocksCounted: a file's st_blocks is what the chunk owners hold
// (DataHooks.Usage), counted again after each change of its data; an
// empty new file is 0 at once; until a count answers, and when it fails,
// st_blocks is the estimate from the size.
func TestBlocksCounted(t *testing.T) {
	c, cl := newCluster(t)
	a, err := cl.Create(bg, root, rootIno, "f", 0o644, 0, false, 0)
	require.NoError(t, err)
	require.Zero(t, a.Blocks, "a new file's blocks")
	blocks := func() uint64 {
		t.Helper()
		a, err := cl.GetAttr(bg, root, a.Ino, 0)
		require.NoError(t, err)
		return a.Blocks
	}
	require.Zero(t, blocks())

	// A sparse file: 100 MiB long, one 4 KiB block written.
	c.Data.SetUsage(a.Ino, 4096)
	_, err = cl.WriteCommit(bg, root, a.Ino, 100<<20, wire.TimespecOf(time.Now()))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return blocks() == 8 }, 10*time.Second, time.Millisecond,
		"st_blocks of a 100 MiB file holding one 4 KiB block")

	// More written: counted again at the next commit.
	c.Data.SetUsage(a.Ino, 1<<20)
	_, err = cl.WriteCommit(bg, root, a.Ino, 100<<20, wire.TimespecOf(time.Now().Add(time.Second)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return blocks() == 2048 }, 10*time.Second, time.Millisecond)

	// A change of the mode does not move blocks: no count, the value stays.
	c.Data.SetUsage(a.Ino, 0)
	_, err = cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: a.Ino, Valid: wire.SetMode, Mode: 0o600})
	require.NoError(t, err)
	require.Equal(t, uint64(2048), blocks())

	// A truncate counts again.
	_, err = cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: a.Ino, Valid: wire.SetSize, Size: 0})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return blocks() == 0 }, 10*time.Second, time.Millisecond)

	// After a restart the count is gone; a stat has it made again.
	c.Data.SetUsage(a.Ino, 8192)
	_, err = cl.WriteCommit(bg, root, a.Ino, 50<<20, wire.TimespecOf(time.Now().Add(2*time.Second)))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return blocks() == 16 }, 10*time.Second, time.Millisecond)
	for i := range c.Nodes {
		c.Kill(i)
		c.Restart(i, nil)
	}
	require.Eventually(t, func() bool { return blocks() == 16 }, 10*time.Second, time.Millisecond,
		"st_blocks after a restart")

	// A count that fails leaves the estimate from the size.
	g, err := cl.Create(bg, root, rootIno, "g", 0o644, 0, false, 0)
	require.NoError(t, err)
	_, err = cl.WriteCommit(bg, root, g.Ino, 10000, wire.TimespecOf(time.Now()))
	require.NoError(t, err)
	gblocks := func() uint64 {
		b, err := cl.GetAttr(bg, root, g.Ino, 0)
		require.NoError(t, err)
		return b.Blocks
	}
	// (Over a while: the failing count runs on a goroutine, and must not
	// leave a value behind when it ends.)
	require.Never(t, func() bool { return gblocks() != 24 }, 300*time.Millisecond, 10*time.Millisecond,
		"st_blocks other than the estimate (three 4 KiB blocks) after a failed count")
}

// TestBlocksKeptAcrossResize: a truncate writes nothing, so a count known
// before it stays in the reply and in the stats right after it (capped at
// the blocks below a smaller size), instead of the estimate from the size
// until the new count: a sparse file grown to 1 TiB said 1 TiB of blocks,
// so that du and cp's sparse test (st_blocks below the size) took it for
// a dense file.
func TestBlocksKeptAcrossResize(t *testing.T) {
	c, cl := newCluster(t)
	a, err := cl.Create(bg, root, rootIno, "f", 0o644, 0, false, 0)
	require.NoError(t, err)
	c.Data.SetUsage(a.Ino, 1<<20)
	_, err = cl.WriteCommit(bg, root, a.Ino, 100<<20, wire.TimespecOf(time.Now()))
	require.NoError(t, err)
	blocks := func() uint64 {
		t.Helper()
		b, err := cl.GetAttr(bg, root, a.Ino, 0)
		require.NoError(t, err)
		return b.Blocks
	}
	require.Eventually(t, func() bool { return blocks() == 2048 }, 10*time.Second, time.Millisecond)

	r, err := cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: a.Ino, Valid: wire.SetSize, Size: 1 << 40})
	require.NoError(t, err)
	require.Equal(t, uint64(2048), r.Blocks, "st_blocks in the reply of a grow to 1 TiB")
	require.Equal(t, uint64(2048), blocks(), "st_blocks right after a grow to 1 TiB")

	c.Data.SetUsage(a.Ino, 4096)
	r, err = cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: a.Ino, Valid: wire.SetSize, Size: 4096})
	require.NoError(t, err)
	require.LessOrEqual(t, r.Blocks, uint64(8), "st_blocks in the reply of a shrink to 4 KiB")
	require.LessOrEqual(t, blocks(), uint64(8), "st_blocks right after a shrink to 4 KiB")
	require.Eventually(t, func() bool { return blocks() == 8 }, 10*time.Second, time.Millisecond)
}
