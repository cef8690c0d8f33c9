package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/stretchr/testify/require"
)

var (
	chaosDuration = flag.Duration("chaos.duration", 40*time.Second, "how long TestChaos disturbs the cluster (make chaos: minutes)")
	chaosSeed     = flag.Uint64("chaos.seed", 0, "seed of TestChaos's choices (0: from the clock; the test logs it)")
)

// chaosWriteTimeout is each admin write's deadline in TestChaos.
const chaosWriteTimeout = 10 * time.Second

// TestChaos runs three `octofs serve` processes and, for -chaos.duration,
// kills (SIGKILL) and restarts, stops (SIGSTOP) and resumes, and restarts
// cleanly (SIGTERM) leaders and followers in a loop, while a client pins
// partitions (admin writes through any node) and monitors watch every
// node's epoch and heap. It checks that every write completes or fails
// with an error that names what went wrong, within its deadline; that no
// node's epoch ever goes backwards, across restarts included; that no
// node's heap grows without bound; and that every acknowledged write is
// in the map of every node at the end.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a cluster of processes under faults; skipped with -short")
	}
	seed := *chaosSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -chaos.seed=%d), duration %v", seed, seed, *chaosDuration)
	r := rand.New(rand.NewPCG(seed, 1))
	const partitions = 1024
	pc := startProcCluster(t, "--partitions", strconv.Itoa(partitions))
	c := cluster.NewAdminClient(pc.admins(), pc.token, nil)
	c.SetAttemptTimeout(2 * time.Second)
	defer c.CloseIdleConnections()
	m, err := c.Map(context.Background())
	require.NoError(t, err)
	owners := m.Partitions // nothing drains: owners stay

	ctx, cancel := context.WithTimeout(context.Background(), *chaosDuration)
	defer cancel()
	var wg sync.WaitGroup

	// The writer: a pin every 50ms, each with its own deadline.
	type write struct {
		p    uint32
		took time.Duration
		err  error
	}
	var writes []write
	wr := rand.New(rand.NewPCG(seed, 2))
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			p := uint32(wr.IntN(partitions))
			wctx, wcancel := context.WithTimeout(context.Background(), chaosWriteTimeout)
			start := time.Now()
			_, err := c.Pin(wctx, p, owners[p])
			wcancel()
			writes = append(writes, write{p: p, took: time.Since(start), err: err})
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})

	// The epoch monitor: every node's epoch, every 100ms.
	var epochMu sync.Mutex
	lastEpoch := map[string]uint64{}
	var backwards []string
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			for _, n := range pc.nodes {
				s, err := statusWithin(n.admin, 500*time.Millisecond)
				if err != nil {
					continue
				}
				epochMu.Lock()
				if s.Epoch < lastEpoch[n.id] {
					backwards = append(backwards, fmt.Sprintf("%s: epoch %d after %d", n.id, s.Epoch, lastEpoch[n.id]))
				}
				lastEpoch[n.id] = max(lastEpoch[n.id], s.Epoch)
				epochMu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})

	// The memory monitor: every node's heap and RSS, every second.
	type sample struct {
		node        string
		incarnation int
		at          time.Time
		heap, rss   float64
	}
	var samples []sample
	var procMu sync.Mutex // guards the nodes' processes against the chaos loop
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for ctx.Err() == nil {
			for _, n := range pc.nodes {
				procMu.Lock()
				inc := n.incarnation
				procMu.Unlock()
				heap, rss, err := memoryOf(n.admin)
				if err == nil {
					samples = append(samples, sample{n.id, inc, time.Now(), heap, rss})
				}
			}
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})

	// The chaos.
	pause := func(lo, hi time.Duration) bool {
		tm := time.NewTimer(lo + time.Duration(r.Int64N(int64(hi-lo))))
		defer tm.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-tm.C:
			return true
		}
	}
	actions := map[string]int{}
	for pause(time.Second, 3*time.Second) {
		target, role := pc.leader(), "leader"
		if target == nil || r.IntN(2) == 0 {
			target, role = pc.nodes[r.IntN(len(pc.nodes))], "node"
			if s, err := statusWithin(target.admin, 500*time.Millisecond); err == nil && s.RaftState == "Follower" {
				role = "follower"
			}
		}
		switch kind := r.IntN(3); kind {
		case 0:
			actions["kill "+role]++
			require.NoError(t, target.p.cmd.Process.Signal(syscall.SIGKILL))
			<-target.p.done
			pause(200*time.Millisecond, 2*time.Second)
			procMu.Lock()
			pc.start(target)
			procMu.Unlock()
		case 1:
			actions["stop "+role]++
			require.NoError(t, target.p.cmd.Process.Signal(syscall.SIGSTOP))
			pause(500*time.Millisecond, 4*time.Second)
			require.NoError(t, target.p.cmd.Process.Signal(syscall.SIGCONT))
		case 2:
			actions["restart "+role]++
			require.NoError(t, target.p.cmd.Process.Signal(syscall.SIGTERM))
			select {
			case <-target.p.done:
			case <-time.After(15 * time.Second):
				t.Errorf("%s did not stop on SIGTERM within 15s", target.id)
				target.p.cmd.Process.Kill()
				<-target.p.done
			}
			procMu.Lock()
			pc.start(target)
			procMu.Unlock()
		}
	}
	wg.Wait()
	waitFor(t, "the cluster settles: three nodes up, caught up, one leader", 60*time.Second, func() bool { return pc.formed(3) })

	// Writes: each completed or failed clearly, within its deadline.
	var ok int
	var lat []time.Duration
	kinds := map[string]int{}
	for _, w := range writes {
		lat = append(lat, w.took)
		require.Less(t, w.took, chaosWriteTimeout+2*time.Second, "a write outlived its deadline: %v", w.err)
		if w.err == nil {
			ok++
			continue
		}
		kinds[errorKind(w.err)]++
		require.True(t, clearError(w.err), "an unclear error: %v", w.err)
	}
	slices.Sort(lat)
	pct := func(q float64) time.Duration {
		return lat[min(len(lat)-1, int(q*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("chaos actions: %v", actions)
	t.Logf("writes: %d, %d ok, %d failed %v; latency p50 %v p99 %v max %v", len(writes), ok, len(writes)-ok, kinds, pct(0.5), pct(0.99), lat[len(lat)-1].Round(time.Millisecond))
	require.NotZero(t, ok, "some writes succeed")

	// Epochs never went backwards.
	t.Logf("highest epoch seen per node: %v", lastEpoch)
	require.Empty(t, backwards, "epochs went backwards")

	// Every acknowledged pin is in every node's map, once all have applied
	// the same log.
	waitFor(t, "every node at the same epoch", 30*time.Second, func() bool {
		var epochs []uint64
		for _, n := range pc.nodes {
			s, err := statusWithin(n.admin, time.Second)
			if err != nil {
				return false
			}
			epochs = append(epochs, s.Epoch)
		}
		return epochs[0] == epochs[1] && epochs[1] == epochs[2]
	})
	for _, n := range pc.nodes {
		m, err := cluster.NewAdminClient([]string{n.admin}, pc.token, nil).Map(context.Background())
		require.NoError(t, err)
		for _, w := range writes {
			if w.err == nil {
				require.True(t, m.IsPinned(w.p), "acknowledged pin of partition %d missing on %s", w.p, n.id)
			}
		}
	}

	// Memory: bounded, and not growing within a long-lived process.
	lives := map[string][]sample{}
	var maxHeap, maxRSS float64
	for _, s := range samples {
		maxHeap, maxRSS = max(maxHeap, s.heap), max(maxRSS, s.rss)
		key := fmt.Sprintf("%s#%d", s.node, s.incarnation)
		lives[key] = append(lives[key], s)
	}
	t.Logf("memory: max heap in use %.1f MiB, max RSS %.1f MiB over %d samples", maxHeap/(1<<20), maxRSS/(1<<20), len(samples))
	require.Less(t, maxHeap, float64(128<<20), "heap in use")
	require.Less(t, maxRSS, float64(512<<20), "resident memory")
	judged, worst, worstKey := 0, 0.0, ""
	for key, ss := range lives {
		if len(ss) < 12 {
			continue // too short-lived to judge growth
		}
		third := len(ss) / 3
		heap := func(s sample) float64 { return s.heap }
		early, late := meanHeap(ss[:third], heap), meanHeap(ss[len(ss)-third:], heap)
		require.Less(t, late, 2*early+16<<20, "%s's heap grows: %.1f MiB in its first third, %.1f MiB in its last", key, early/(1<<20), late/(1<<20))
		judged++
		if late/early > worst {
			worst, worstKey = late/early, fmt.Sprintf("%s (%.1f to %.1f MiB over %d samples)", key, early/(1<<20), late/(1<<20), len(ss))
		}
	}
	t.Logf("heap growth within a process, last third over first third: at most %.2fx, %s; %d processes of %d lived long enough to judge", worst, worstKey, judged, len(lives))
}

func meanHeap[S any](ss []S, f func(S) float64) float64 {
	var sum float64
	for _, s := range ss {
		sum += f(s)
	}
	return sum / float64(len(ss))
}

func statusWithin(addr string, d time.Duration) (*cluster.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	c := cluster.NewAdminClient([]string{addr}, "", nil)
	defer c.CloseIdleConnections()
	return c.Status(ctx)
}

// memoryOf reads a node's heap in use and resident memory from /metrics.
func memoryOf(addr string) (heap, rss float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+cluster.PathMetrics, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		name, v, ok := strings.Cut(s.Text(), " ")
		if !ok {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			heap, _ = strconv.ParseFloat(v, 64)
		case "process_resident_memory_bytes":
			rss, _ = strconv.ParseFloat(v, 64)
		}
	}
	if heap == 0 {
		return 0, 0, errors.New("no heap metric")
	}
	return heap, rss, s.Err()
}

// clearError reports whether a failed write says what went wrong: a known
// sentinel, and, when it ran into its deadline, what it was waiting for.
func clearError(err error) bool {
	known := false
	for _, s := range []error{cluster.ErrUnreachable, cluster.ErrNoLeader, cluster.ErrLeaderUnreachable, cluster.ErrNotLeader, cluster.ErrClosed} {
		known = known || errors.Is(err, s)
	}
	msg := err.Error()
	return known && (strings.Contains(msg, "127.0.0.1:") || strings.Contains(msg, "no leader"))
}

func errorKind(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{cluster.ErrLeaderUnreachable, "leader unreachable"},
		{cluster.ErrNoLeader, "no leader"},
		{cluster.ErrNotLeader, "not leader"},
		{cluster.ErrClosed, "closed"},
		{cluster.ErrUnreachable, "unreachable"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "other: " + err.Error()
}
