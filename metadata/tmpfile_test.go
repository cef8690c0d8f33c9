package metadata_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// TestTmpfile: O_TMPFILE makes an open file with no name, which link
// names (unless O_EXCL), in the directory's partition or another one,
// and which its last release frees when it has no name.
func TestTmpfile(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	f := &fixture{t: t, cl: cl}
	d := f.mkdir(rootIno, "d", 0o2777, root)
	_, err := cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: d.Ino, Valid: wire.SetGID, GID: 55})
	require.NoError(t, err)
	_, err = cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: d.Ino, Valid: wire.SetMode, Mode: 0o2777})
	require.NoError(t, err)
	ro := f.mkdir(rootIno, "ro", 0o755, root)

	tf, err := cl.Tmpfile(bg, alice, d.Ino, 0o640, wire.OpenReadWrite)
	require.NoError(t, err)
	require.Equal(t, uint32(0), tf.Nlink)
	require.Equal(t, uint32(wire.ModeRegular|0o640), tf.Mode)
	require.Equal(t, alice.UID, tf.UID)
	require.Equal(t, uint32(55), tf.GID, "the setgid directory's group")
	require.Equal(t, cluster.PartitionOf(d.Ino), cluster.PartitionOf(tf.Ino), "made in the directory's partition")
	require.Empty(t, names(t, cl, root, d.Ino, 100), "no name")
	_, err = cl.WriteCommit(bg, alice, tf.Ino, 4096, wire.Timespec{})
	require.NoError(t, err, "written while it has no name")

	// Named twice: in its own directory, then in one of another
	// partition (a cross-partition link) whatever the placement.
	a, err := cl.Link(bg, alice, tf.Ino, d.Ino, "named")
	require.NoError(t, err)
	require.Equal(t, uint32(1), a.Nlink)
	require.Equal(t, uint64(4096), a.Size)
	var other wire.Attr
	for i := range 64 {
		other = f.mkdir(rootIno, fmt.Sprintf("o%d", i), 0o777, root)
		if cluster.PartitionOf(other.Ino) != cluster.PartitionOf(tf.Ino) {
			break
		}
	}
	a, err = cl.Link(bg, alice, tf.Ino, other.Ino, "again")
	require.NoError(t, err)
	require.Equal(t, uint32(2), a.Nlink)
	require.NoError(t, cl.Release(bg, tf.Ino, wire.OpenReadWrite))
	time.Sleep(50 * time.Millisecond)
	got, err := cl.Lookup(bg, alice, d.Ino, "named")
	require.NoError(t, err, "a named tmpfile outlives its open")
	require.Equal(t, tf.Ino, got.Ino)

	// O_EXCL: never linkable; a name it cannot take leaves it an orphan
	// the release frees.
	ex, err := cl.Tmpfile(bg, alice, d.Ino, 0o600, wire.OpenWriteOnly|wire.OpenExcl)
	require.NoError(t, err)
	_, err = cl.Link(bg, alice, ex.Ino, d.Ino, "excl")
	require.Equal(t, syscall.ENOENT, err)
	lt, err := cl.Tmpfile(bg, alice, d.Ino, 0o600, wire.OpenWriteOnly)
	require.NoError(t, err)
	_, err = cl.Link(bg, alice, lt.Ino, other.Ino, "again")
	require.Equal(t, syscall.EEXIST, err, "a cross-partition link that fails")
	for _, x := range []wire.Attr{ex, lt} {
		o, err := cl.GetAttr(bg, alice, x.Ino, x.Gen)
		require.NoError(t, err)
		require.Equal(t, uint32(0), o.Nlink)
		require.NoError(t, cl.Release(bg, x.Ino, wire.OpenWriteOnly))
		require.Eventually(t, func() bool {
			_, err := cl.GetAttr(bg, alice, x.Ino, x.Gen)
			return err == syscall.ESTALE
		}, 10*time.Second, time.Millisecond, "released without a name: freed")
	}

	// Errors as Linux gives them.
	_, err = cl.Tmpfile(bg, alice, ro.Ino, 0o600, wire.OpenReadWrite)
	require.Equal(t, syscall.EACCES, err, "no write permission on the directory")
	_, err = cl.Tmpfile(bg, alice, d.Ino, 0o600, wire.OpenReadOnly)
	require.Equal(t, syscall.EINVAL, err, "read-only")
	_, err = cl.Tmpfile(bg, alice, a.Ino, 0o600, wire.OpenReadWrite)
	require.Equal(t, syscall.ENOTDIR, err)

	tr, err := metatest.Walk(bg, cl)
	require.NoError(t, err)
	require.Empty(t, tr.Check())
}
