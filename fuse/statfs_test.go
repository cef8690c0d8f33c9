package fuse

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

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
