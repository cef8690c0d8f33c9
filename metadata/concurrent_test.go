package metadata_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// TestConcurrentCreateRemove: 8 clients create and remove 10,000 entries
// in one directory, every file on another partition than the directory;
// afterwards the directory holds exactly the survivors, once each, the
// link counts agree and no inode leaked.
func TestConcurrentCreateRemove(t *testing.T) {
	const clients, total = 8, 10000
	c := metatest.Start(t, metatest.Config{Nodes: 3, Partitions: 16})
	setup := c.Client()
	d, err := setup.Mkdir(bg, root, rootIno, "big", 0o777)
	require.NoError(t, err)
	dirPart := cluster.PartitionOf(d.Ino)
	// Names whose inodes land on another partition than the directory.
	var names []string
	for i := 0; len(names) < total; i++ {
		n := fmt.Sprintf("f%06d", i)
		if cluster.PartitionForName(d.Ino, n, 16) != dirPart {
			names = append(names, n)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for w := range clients {
		cl := c.Client()
		wg.Go(func() {
			mine := names[w*total/clients : (w+1)*total/clients]
			for i, n := range mine {
				if _, err := cl.Create(bg, alice, d.Ino, n, 0o644, 0, false, 0); err != nil {
					errs <- fmt.Errorf("create %s: %w", n, err)
					return
				}
				// Remove every other entry once the next is created, so
				// creates and removes interleave.
				if i%2 == 1 {
					if err := cl.Unlink(bg, alice, d.Ino, mine[i-1], 0); err != nil {
						errs <- fmt.Errorf("unlink %s: %w", mine[i-1], err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got := names2(t, setup, d.Ino)
	want := map[string]bool{}
	for w := range clients {
		mine := names[w*total/clients : (w+1)*total/clients]
		for i, n := range mine {
			if i%2 == 1 || i == len(mine)-1 {
				want[n] = true
			}
		}
	}
	require.Equal(t, len(want), len(got))
	for n := range want {
		if _, ok := got[n]; !ok {
			t.Fatalf("entry %s lost", n)
		}
	}
	tr, err := metatest.Walk(bg, setup)
	require.NoError(t, err)
	require.Empty(t, tr.Check())
	require.Empty(t, c.Leaks(tr))
}

func names2(t *testing.T, cl interface {
	ReadDir(context.Context, wire.Cred, uint64, uint64, uint32, uint32) ([]wire.DirEntry, bool, error)
}, dir uint64) map[string]uint64 {
	out := map[string]uint64{}
	cookie := uint64(0)
	for range 1 << 20 {
		ents, eof, err := cl.ReadDir(bg, root, dir, cookie, 4096, 0)
		require.NoError(t, err)
		for _, e := range ents {
			_, dup := out[e.Name]
			require.False(t, dup, "%q listed twice", e.Name)
			out[e.Name] = e.Ino
			cookie = e.Cookie
		}
		if eof {
			break
		}
	}
	return out
}

// TestReadDirDuringModification: while writers add and remove entries,
// listings in small pages return every untouched entry exactly once, and
// no entry twice: cookies only go up. A name removed and made again while
// a listing runs may be listed twice (two files, two cookies), as on
// Linux file systems whose new entries go after the listing's cursor.
func TestReadDirDuringModification(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	d, err := cl.Mkdir(bg, root, rootIno, "d", 0o777)
	require.NoError(t, err)
	const stable = 300
	for i := range stable {
		_, err := cl.Create(bg, root, d.Ino, fmt.Sprintf("stable%03d", i), 0o644, 0, false, 0)
		require.NoError(t, err)
	}
	ctx, cancel := context.WithCancel(bg)
	var wg sync.WaitGroup
	// The writers stop before the cluster does, also when an assertion
	// below ends the test.
	defer wg.Wait()
	defer cancel()
	for w := range 3 {
		wcl := c.Client()
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < 100000; i++ {
				n := fmt.Sprintf("churn%d-%d", w, i%50)
				_, err := wcl.Create(ctx, root, d.Ino, n, 0o644, 0, false, 0)
				if err == syscall.EEXIST {
					err = wcl.Unlink(ctx, root, d.Ino, n, 0)
				}
				if err != nil && ctx.Err() == nil {
					t.Errorf("writer: %v", err)
					return
				}
			}
		})
	}
	for range 20 {
		seen := map[string]int{}
		type file struct {
			name string
			ino  uint64
		}
		files := map[file]bool{}
		cookie := uint64(0)
		for range 1 << 16 {
			ents, eof, err := cl.ReadDir(bg, root, d.Ino, cookie, 0, 7)
			require.NoError(t, err)
			for _, e := range ents {
				require.Greater(t, e.Cookie, cookie, "entry %s after cookie %d", e.Name, cookie)
				f := file{e.Name, e.Ino}
				require.False(t, files[f], "entry %s (inode %#x) listed twice", e.Name, e.Ino)
				files[f] = true
				seen[e.Name]++
				cookie = e.Cookie
			}
			if eof {
				break
			}
		}
		for i := range stable {
			n := fmt.Sprintf("stable%03d", i)
			require.Equal(t, 1, seen[n], "untouched entry %s", n)
		}
	}
}
