package client

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node/nodetest"
)

// The million-entry directory (issue 12): a directory built through the
// client library keeps constant-time inserts and lookups, and readdir
// returns every entry exactly once. `make bigdir` runs it with 1,000,000
// entries; CI runs a short version.

var (
	bigDirEntries = flag.Int("client.bigdir", 0, "entries of TestBigDirectory (0: a short CI version, 20000); make bigdir passes 1000000")
	bigDirBackend = flag.String("client.bigdir.backend", "cluster", "TestBigDirectory's cluster: cluster (3 nodes over RDMA, node/nodetest) or metatest (namespace services in process)")
)

// bigDirWorkers is how many creates are in flight at once.
const bigDirWorkers = 16

func TestBigDirectory(t *testing.T) {
	n := *bigDirEntries
	long := n > 0
	if !long {
		if testing.Short() {
			t.Skip("creates 20,000 entries; skipped with -short")
		}
		n = 20000
	}
	// The window the rates are compared over: the first and last 100,000
	// entries of a million, a tenth of a shorter run.
	window := min(100000, n/10)
	c := bigDirClient(t, n)
	ctx := context.Background()
	dir, err := c.Mkdir(ctx, RootCred, cluster.RootInode, "big", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("entry-%07d", i) }

	// Create, in slices: each slice of the big directory is followed by a
	// control slice of creates into a small directory (emptied after
	// each), so that every rate has a baseline measured moments apart;
	// on a shared machine the load moves both alike.
	control, err := c.Mkdir(ctx, RootCred, cluster.RootInode, "control", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	slice := max(window/20, 500)
	ctrlN := max(slice/10, 100)
	var bigRates, ctrlRates []float64
	start := time.Now()
	var bigTime time.Duration
	for lo := 0; lo < n; lo += slice {
		hi := min(lo+slice, n)
		el, err := createRange(ctx, c, dir.Ino, lo, hi, name)
		if err != nil {
			t.Fatal(err)
		}
		bigTime += el
		cel, err := createRange(ctx, c, control.Ino, 0, ctrlN, name)
		if err != nil {
			t.Fatal(err)
		}
		for i := range ctrlN {
			if err := c.Unlink(ctx, RootCred, control.Ino, name(i)); err != nil {
				t.Fatal(err)
			}
		}
		bigRates = append(bigRates, float64(hi-lo)/el.Seconds())
		ctrlRates = append(ctrlRates, float64(ctrlN)/cel.Seconds())
		if long && hi%(n/10) < slice {
			t.Logf("%d entries: %.0f/s in the big directory, %.0f/s in the control, after %v",
				hi, bigRates[len(bigRates)-1], ctrlRates[len(ctrlRates)-1], time.Since(start).Round(time.Second))
		}
	}
	total := time.Since(start)
	// Rates over the first and the last window: raw, and each slice's
	// rate over its control's, averaged.
	windowRates := func(from, to int) (raw, norm float64) {
		var sum float64
		var entries, secs float64
		for i := from; i < to; i++ {
			sum += bigRates[i] / ctrlRates[i]
			lo := i * slice
			cnt := float64(min(lo+slice, n) - lo)
			entries += cnt
			secs += cnt / bigRates[i]
		}
		return entries / secs, sum / float64(to-from)
	}
	w := (window + slice - 1) / slice
	firstRaw, firstNorm := windowRates(0, w)
	lastRaw, lastNorm := windowRates(len(bigRates)-w, len(bigRates))
	t.Logf("created %d entries in %v (%.0f/s creating, %v in all with the control slices)", n, bigTime.Round(time.Millisecond),
		float64(n)/bigTime.Seconds(), total.Round(time.Millisecond))
	t.Logf("first %d: %.0f/s (%.2fx the small control directory's rate); last %d: %.0f/s (%.2fx); last/first %.2fx raw, %.2fx against the control",
		window, firstRaw, firstNorm, window, lastRaw, lastNorm, lastRaw/firstRaw, lastNorm/firstNorm)

	// Random lookups: against a small directory (the first window's worth
	// of entries, in a directory of its own) and against the big one, in
	// turns so that the machine's load moves both alike.
	small, err := c.Mkdir(ctx, RootCred, cluster.RootInode, "small", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	smallN := min(window, 10000)
	for i := range smallN {
		if _, err := c.Mknod(ctx, RootCred, small.Ino, name(i), syscall.S_IFREG|0o644, 0); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	var smallT, bigT time.Duration
	const rounds, perRound = 20, 250
	for range rounds {
		for _, which := range []struct {
			dir   uint64
			count int
			total *time.Duration
		}{{small.Ino, smallN, &smallT}, {dir.Ino, n, &bigT}} {
			t0 := time.Now()
			for range perRound {
				nm := name(rng.IntN(which.count))
				if _, err := c.Lookup(ctx, RootCred, which.dir, nm); err != nil {
					t.Fatalf("lookup %s: %v", nm, err)
				}
			}
			*which.total += time.Since(t0)
		}
	}
	lookups := float64(rounds * perRound)
	smallRate, bigRate := lookups/smallT.Seconds(), lookups/bigT.Seconds()
	t.Logf("random lookups: %.0f/s in a %d-entry directory, %.0f/s in the %d-entry one: %.2fx", smallRate, smallN, bigRate, n, bigRate/smallRate)

	// Readdir: every entry exactly once, in pages.
	seen := make([]bool, n)
	count := 0
	t0 := time.Now()
	for cookie, eof, pages := uint64(0), false, 0; !eof; pages++ {
		if pages > n {
			t.Fatal("readdir does not end")
		}
		var ents []DirEntry
		ents, eof, err = c.ReadDirPage(ctx, RootCred, dir.Ino, cookie, 1024)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) == 0 && !eof {
			t.Fatal("readdir returned an empty page before the end")
		}
		for _, e := range ents {
			var i int
			if _, err := fmt.Sscanf(e.Name, "entry-%07d", &i); err != nil || i < 0 || i >= n {
				t.Fatalf("readdir returned an unknown entry %q", e.Name)
			}
			if seen[i] {
				t.Fatalf("readdir returned %s twice", e.Name)
			}
			seen[i] = true
			count++
		}
		if len(ents) > 0 {
			cookie = ents[len(ents)-1].Cookie
		}
	}
	if count != n {
		t.Fatalf("readdir returned %d entries of %d", count, n)
	}
	t.Logf("readdir: %d entries exactly once in %v", n, time.Since(t0).Round(time.Millisecond))

	// The targets. On a long run they are the issue's; a short run on a
	// shared CI machine is too brief for timing ratios to mean much, so
	// it only catches a collapse (an insert or lookup that grows with the
	// directory is far below these at 20,000 entries too).
	minRatio := 0.8
	if !long {
		minRatio = 0.5
	}
	if r := lastNorm / firstNorm; r < minRatio {
		t.Errorf("create rate over the last %d entries (against its control) is %.2fx the first %d's, want at least %.1fx", window, r, window, minRatio)
	}
	// The issue's own measure, raw rates, on a long run: it also catches
	// a cluster that slows down as it holds more inodes, which the
	// control (slowed alike) hides.
	if r := lastRaw / firstRaw; long && r < minRatio {
		t.Errorf("raw create rate over the last %d entries is %.2fx the first %d's, want at least %.1fx", window, r, window, minRatio)
	}
	if r := bigRate / smallRate; r < minRatio {
		t.Errorf("random lookups in the %d-entry directory run %.2fx as fast as in a %d-entry one, want at least %.1fx", n, r, smallN, minRatio)
	}
}

// createRange creates entries lo..hi-1 in dir with bigDirWorkers in
// flight and returns how long it took.
func createRange(ctx context.Context, c *Client, dir uint64, lo, hi int, name func(int) string) (time.Duration, error) {
	var next atomic.Int64
	next.Store(int64(lo))
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	start := time.Now()
	for range bigDirWorkers {
		wg.Go(func() {
			for failed.Load() == nil {
				i := int(next.Add(1)) - 1
				if i >= hi {
					return
				}
				if _, err := c.Mknod(ctx, RootCred, dir, name(i), syscall.S_IFREG|0o644, 0); err != nil {
					err = fmt.Errorf("create %s: %w", name(i), err)
					failed.Store(&err)
					return
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return 0, *p
	}
	return time.Since(start), nil
}

// bigDirClient returns a client of a 3-node cluster with regions big
// enough for n entries: a whole cluster reached over RDMA, or (with
// -client.bigdir.backend=metatest) the namespace services in process with
// their production timing (the services' janitor scans are part of what a
// big directory costs).
func bigDirClient(t *testing.T, n int) *Client {
	size := max(128<<20, n*1024)
	switch *bigDirBackend {
	case "cluster":
		return clusterClient(t, nodetest.Start(t, nodetest.Options{RegionSize: int64(size)}))
	case "metatest":
		return newMetaClusterSized(t, 3, size, true).client(t)
	}
	t.Fatalf("-client.bigdir.backend=%q: use cluster or metatest", *bigDirBackend)
	return nil
}
