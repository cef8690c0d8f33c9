package fuse

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/client"
)

// TestStatfsKeptForTheAttrTimeout: statfs through the mount asks the
// cluster once per attribute timeout, and every time with NoCache.
func TestStatfsKeptForTheAttrTimeout(t *testing.T) {
	mountable(t)
	f := clusterFixture(t)
	for _, noCache := range []bool{false, true} {
		c := f.newClient(t)
		dir, _ := mountClient(t, c, Options{Logger: testLogger(t), NoCache: noCache, AttrTimeout: time.Hour})
		before := statfsRPCs(c)
		if _, err := c.StatFS(context.Background()); err != nil {
			t.Fatal(err)
		}
		perCall := statfsRPCs(c) - before
		before += perCall
		var st syscall.Statfs_t
		for range 5 {
			if err := syscall.Statfs(dir, &st); err != nil {
				t.Fatal(err)
			}
		}
		want := perCall
		if noCache {
			want = 5 * perCall
		}
		if got := statfsRPCs(c) - before; got != want || st.Blocks == 0 {
			t.Errorf("NoCache %v: 5 statfs asked the cluster %d times (want %d); blocks %d", noCache, got, want, st.Blocks)
		}
	}
}

// statfsRPCs counts c's statfs requests (of either service).
func statfsRPCs(c *client.Client) uint64 {
	var n uint64
	for op, k := range c.Stats().RPCs {
		if strings.Contains(strings.ToLower(op), "statfs") {
			n += k
		}
	}
	return n
}

// TestStatxBirthTime checks statx(2) through the mount: the birth time is
// the creation's, kept by writes, renames and chmod, alongside the fields
// stat(2) gives. Without Statx the kernel answers statx from GETATTR and
// says it has no birth time.
func TestStatxBirthTime(t *testing.T) {
	_, d := clusterMountDir(t, "statx")
	before := time.Now().Add(-time.Second)
	p := filepath.Join(d, "f")
	if err := os.WriteFile(p, []byte("born"), 0o640); err != nil {
		t.Fatal(err)
	}
	after := time.Now().Add(time.Second)
	time.Sleep(20 * time.Millisecond)
	q := filepath.Join(d, "g")
	if err := os.Rename(p, q); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(q, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(q, []byte("written again"), 0o600); err != nil {
		t.Fatal(err)
	}
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, q, unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx); err != nil {
		t.Fatal(err)
	}
	if sx.Mask&unix.STATX_BTIME == 0 {
		t.Fatalf("statx: no birth time (mask %#x)", sx.Mask)
	}
	born := time.Unix(sx.Btime.Sec, int64(sx.Btime.Nsec))
	if born.Before(before) || born.After(after) {
		t.Errorf("birth time %v, want between %v and %v", born, before, after)
	}
	mtime := time.Unix(sx.Mtime.Sec, int64(sx.Mtime.Nsec))
	if !mtime.After(born) {
		t.Errorf("mtime %v not after the birth time %v", mtime, born)
	}
	if sx.Size != uint64(len("written again")) || sx.Mode&0o7777 != 0o600 || sx.Mode&unix.S_IFMT != unix.S_IFREG || sx.Nlink != 1 {
		t.Errorf("statx: size %d mode %o nlink %d, want 13, regular 0600, 1", sx.Size, sx.Mode, sx.Nlink)
	}
	var st unix.Stat_t
	if err := unix.Stat(q, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino != sx.Ino || st.Blocks != int64(sx.Blocks) || st.Uid != sx.Uid {
		t.Errorf("stat and statx differ: ino %d/%d blocks %d/%d uid %d/%d", st.Ino, sx.Ino, st.Blocks, sx.Blocks, st.Uid, sx.Uid)
	}
}
