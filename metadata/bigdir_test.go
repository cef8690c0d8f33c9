package metadata_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata/metatest"
)

var bigDir = flag.Int("bigdir", 0, "entries for TestBigDirectory (0: skip)")

// TestBigDirectory creates -bigdir entries in one directory and compares
// the create rate of the last tenth with the first tenth, and the lookup
// rate at the end with the rate at the first tenth: both must stay
// (constant-time insert and lookup). Off by default (it takes a while);
// the client library's 1,000,000-entry test covers the whole stack.
func TestBigDirectory(t *testing.T) {
	n := *bigDir
	if n == 0 {
		t.Skip("set -bigdir N to run")
	}
	c := metatest.Start(t, metatest.Config{Nodes: 3, Partitions: 16, RegionSize: 1 << 30})
	cl := c.Client()
	d, err := cl.Mkdir(bg, root, rootIno, "big", 0o777)
	require.NoError(t, err)
	tenth := n / 10
	rng := rand.New(rand.NewPCG(1, 2))
	lookups := func(upto int) float64 {
		start := time.Now()
		for range 2000 {
			_, err := cl.Lookup(bg, root, d.Ino, fmt.Sprintf("f%08d", rng.IntN(upto)))
			require.NoError(t, err)
		}
		return 2000 / time.Since(start).Seconds()
	}
	var first, last, lookFirst float64
	start := time.Now()
	for i := range n {
		if i == tenth {
			first = float64(tenth) / time.Since(start).Seconds()
			lookFirst = lookups(tenth)
		}
		if i == n-tenth {
			start = time.Now()
		}
		_, err := cl.Create(bg, root, d.Ino, fmt.Sprintf("f%08d", i), 0o644, 0, false, 0)
		require.NoError(t, err)
	}
	last = float64(tenth) / time.Since(start).Seconds()
	lookLast := lookups(n)
	t.Logf("%d entries: creates %.0f/s over the first %d, %.0f/s over the last (%.2fx); lookups %.0f/s at %d entries, %.0f/s at %d (%.2fx)",
		n, first, tenth, last, last/first, lookFirst, tenth, lookLast, n, lookLast/lookFirst)
	require.Greater(t, last/first, 0.8)
	require.Greater(t, lookLast/lookFirst, 0.8)
	ls := names2(t, cl, d.Ino)
	require.Len(t, ls, n)
}
