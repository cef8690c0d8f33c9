package metadata_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// TestFullRegion fills the nodes' regions with files: creates end with
// ENOSPC and change nothing, every partition stays usable (no append
// ever runs out of room, which would stop it), removals work on the full
// file system, and once the files are gone the logs are reclaimed and
// creates work again.
func TestFullRegion(t *testing.T) {
	c := metatest.Start(t, metatest.Config{RegionSize: 4 << 20})
	cl := c.Client()
	d, err := cl.Mkdir(bg, root, rootIno, "d", 0o777)
	require.NoError(t, err)
	var made []string
	fill := func() {
		t.Helper()
		var full error
		for len(made) < 200000 {
			name := fmt.Sprintf("file-with-a-longish-name-%06d", len(made))
			_, err := cl.Create(bg, root, d.Ino, name, 0o644, 0, false, 0)
			if err != nil {
				full = err
				break
			}
			made = append(made, name)
		}
		require.Equal(t, syscall.ENOSPC, full, "after %d files", len(made))
	}
	// The partitions rewrite their logs in the background (each create
	// leaves some history), so room can come back between one refusal
	// and the next request: fill again until a mkdir right after the
	// fill meets ENOSPC too.
	var subs []string
	for round := 0; ; round++ {
		fill()
		sub := fmt.Sprint("sub", round)
		_, err = cl.Mkdir(bg, root, d.Ino, sub, 0o755)
		if err == syscall.ENOSPC {
			break
		}
		require.NoError(t, err)
		subs = append(subs, sub)
		require.Less(t, round, 20, "room keeps coming back")
	}
	t.Logf("ENOSPC after %d files (%d fills)", len(made), len(subs)+1)
	if err := cl.SetXattr(bg, root, d.Ino, "user.x", []byte("v"), 0); err != syscall.ENOSPC {
		require.NoError(t, err, "a full file system")
		require.NoError(t, cl.RemoveXattr(bg, root, d.Ino, "user.x"))
	}

	// Nothing was lost and every partition still answers and changes.
	got := names(t, cl, root, d.Ino, 1000)
	require.Len(t, got, len(made)+len(subs))
	for _, sub := range subs {
		require.NoError(t, cl.Rmdir(bg, root, d.Ino, sub, 0))
	}
	for _, n := range made[:len(made)/2] {
		require.NoError(t, cl.Unlink(bg, root, d.Ino, n, 0))
	}
	for _, n := range made[len(made)/2:][:100] {
		_, err := cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: got[n].Ino, Valid: wire.SetMode, Mode: 0o600})
		require.NoError(t, err)
	}
	for _, n := range made[len(made)/2:] {
		require.NoError(t, cl.Unlink(bg, root, d.Ino, n, 0))
	}
	require.Empty(t, names(t, cl, root, d.Ino, 1000))

	// The logs are mostly history now: reclaimed, they make room again.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := cl.Create(bg, root, d.Ino, "again", 0o644, 0, false, 0)
		if err == nil {
			break
		}
		require.Equal(t, syscall.ENOSPC, err)
		require.True(t, time.Now().Before(deadline), "no room after every file was removed")
		time.Sleep(100 * time.Millisecond)
	}
	tr, err := metatest.Walk(bg, cl)
	require.NoError(t, err)
	require.Empty(t, tr.Check())
}
