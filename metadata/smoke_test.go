package metadata_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

var root = wire.Cred{}

const rootIno = cluster.RootInode

func newCluster(t *testing.T) (*metatest.Cluster, *mdclient.Client) {
	t.Helper()
	c := metatest.Start(t, metatest.Config{})
	return c, c.Client()
}

// names lists a directory through readdir, in pages of n entries.
func names(t *testing.T, cl *mdclient.Client, cred wire.Cred, dir uint64, page uint32) map[string]wire.DirEntry {
	t.Helper()
	out := map[string]wire.DirEntry{}
	cookie := uint64(0)
	for range 1 << 20 {
		ents, eof, err := cl.ReadDir(context.Background(), cred, dir, cookie, 0, page)
		require.NoError(t, err)
		for _, e := range ents {
			_, dup := out[e.Name]
			require.False(t, dup, "entry %q listed twice", e.Name)
			out[e.Name] = e
			cookie = e.Cookie
		}
		if eof {
			return out
		}
	}
	t.Fatal("readdir never ended")
	return nil
}

func TestSmoke(t *testing.T) {
	_, cl := newCluster(t)
	ctx := context.Background()
	a, err := cl.GetAttr(ctx, root, rootIno, 0)
	require.NoError(t, err)
	require.True(t, a.IsDir())
	require.Equal(t, uint32(2), a.Nlink)

	d, err := cl.Mkdir(ctx, root, rootIno, "d", 0o755)
	require.NoError(t, err)
	for _, name := range []string{"a", "b", "c", "dd", "eee"} {
		f, err := cl.Create(ctx, root, d.Ino, name, 0o644, 0, false, 0)
		require.NoError(t, err, name)
		require.Equal(t, uint32(1), f.Nlink)
		got, err := cl.Lookup(ctx, root, d.Ino, name)
		require.NoError(t, err)
		require.Equal(t, f.Ino, got.Ino)
	}
	_, err = cl.Create(ctx, root, d.Ino, "a", 0o644, 0, false, 0)
	require.Equal(t, syscall.EEXIST, err)
	ls := names(t, cl, root, d.Ino, 2)
	require.Len(t, ls, 5)
	require.NoError(t, cl.Unlink(ctx, root, d.Ino, "b", 0))
	_, err = cl.Lookup(ctx, root, d.Ino, "b")
	require.Equal(t, syscall.ENOENT, err)
	require.Len(t, names(t, cl, root, d.Ino, 0), 4)
	err = cl.Rmdir(ctx, root, rootIno, "d", 0)
	require.Equal(t, syscall.ENOTEMPTY, err)
	for _, name := range []string{"a", "c", "dd", "eee"} {
		require.NoError(t, cl.Unlink(ctx, root, d.Ino, name, 0))
	}
	require.NoError(t, cl.Rmdir(ctx, root, rootIno, "d", 0))
	a, err = cl.GetAttr(ctx, root, rootIno, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(2), a.Nlink)
}
