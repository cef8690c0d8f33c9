package cluster

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInodeNumberLayout(t *testing.T) {
	for name, tc := range map[string]struct {
		part  uint32
		local uint64
	}{
		"root":           {0, 1},
		"last partition": {MaxPartitions - 1, 42},
		"max local":      {7, MaxLocalInode},
	} {
		t.Run(name, func(t *testing.T) {
			ino := InodeNumber(tc.part, tc.local)
			require.Equal(t, tc.part, PartitionOf(ino))
			require.Equal(t, tc.local, LocalOf(ino))
		})
	}
	require.Equal(t, RootInode, InodeNumber(0, 1))
	require.Panics(t, func() { InodeNumber(MaxPartitions, 1) })
	require.Panics(t, func() { InodeNumber(0, MaxLocalInode+1) })
}

// bruteMinimumMoves computes the fewest partitions that must change owner
// for table to become balanced over eligible (each node floor or ceil of
// P/N) by trying every choice of which nodes get ceil. It shares no code
// with rebalance, so the test checks rebalance against it.
func bruteMinimumMoves(table []NodeID, eligible []NodeID) int {
	p, n := len(table), len(eligible)
	lo, extra := p/n, p%n
	load := make([]int, n)
	for _, id := range table {
		if i := slices.Index(eligible, id); i >= 0 {
			load[i]++
		}
	}
	best := p + 1
	var rec func(i, ceilLeft, kept int)
	rec = func(i, ceilLeft, kept int) {
		if i == n {
			if ceilLeft == 0 {
				best = min(best, p-kept)
			}
			return
		}
		if ceilLeft > 0 {
			rec(i+1, ceilLeft-1, kept+min(load[i], lo+1))
		}
		if n-i > ceilLeft {
			rec(i+1, ceilLeft, kept+min(load[i], lo))
		}
	}
	rec(0, extra, 0)
	return best
}

func ids(k int) []NodeID {
	var out []NodeID
	for i := 1; i <= k; i++ {
		out = append(out, NodeID(fmt.Sprintf("n%02d", i)))
	}
	return out
}

func checkBalanced(t *testing.T, table []NodeID, eligible []NodeID) {
	t.Helper()
	lo, hi := LoadBound(len(table), len(eligible))
	load := map[NodeID]int{}
	for p, id := range table {
		require.Contains(t, eligible, id, "partition %d owned by ineligible %s", p, id)
		load[id]++
	}
	for _, id := range eligible {
		require.True(t, load[id] >= lo && load[id] <= hi, "node %s owns %d, bound [%d,%d]", id, load[id], lo, hi)
	}
}

// TestRebalanceMovesMinimum is the placement report: nodes join one by
// one, then some drain or leave, and every step must move exactly the
// minimum number of partitions while keeping each node within
// [floor(P/N), ceil(P/N)].
func TestRebalanceMovesMinimum(t *testing.T) {
	const P = DefaultPartitions
	table := make([]NodeID, P)
	all := ids(8)
	for i := range table {
		table[i] = all[0]
	}
	type step struct {
		name     string
		eligible []NodeID
	}
	steps := []step{}
	for k := 2; k <= 8; k++ {
		steps = append(steps, step{fmt.Sprintf("join %s (N=%d)", all[k-1], k), all[:k]})
	}
	steps = append(steps,
		step{"remove n03 (N=7)", without(all, "n03")},
		step{"drain n07 (N=6)", without(all, "n03", "n07")},
		step{"remove n01 (N=5)", without(all, "n01", "n03", "n07")},
		step{"join n03 back (N=6)", without(all, "n01", "n07")},
	)
	var report strings.Builder
	fmt.Fprintf(&report, "P=%d\n%-22s %6s %8s %8s\n", P, "step", "moved", "minimum", "bound")
	totalMoved, totalMin := 0, 0
	for _, s := range steps {
		want := bruteMinimumMoves(table, s.eligible)
		next, moved, err := rebalance(table, s.eligible)
		require.NoError(t, err)
		checkBalanced(t, next, s.eligible)
		require.Equal(t, want, moved, s.name)
		diff := 0
		for i := range next {
			if next[i] != table[i] {
				diff++
			}
		}
		require.Equal(t, moved, diff, "moved count must equal changed entries")
		lo, hi := LoadBound(P, len(s.eligible))
		fmt.Fprintf(&report, "%-22s %6d %8d   [%d,%d]\n", s.name, moved, want, lo, hi)
		totalMoved += moved
		totalMin += want
		table = next
	}
	fmt.Fprintf(&report, "%-22s %6d %8d\n", "total", totalMoved, totalMin)
	t.Log("\n" + report.String())
}

func without(all []NodeID, drop ...NodeID) []NodeID {
	return slices.DeleteFunc(slices.Clone(all), func(id NodeID) bool { return slices.Contains(drop, id) })
}

// TestRebalanceProperty: for random tables and random eligible sets the
// result is balanced, minimal, and a second rebalance moves nothing.
func TestRebalanceProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pool := ids(9)
	for iter := 0; iter < 500; iter++ {
		p := 1 + r.IntN(300)
		table := make([]NodeID, p)
		for i := range table {
			table[i] = pool[r.IntN(len(pool))]
		}
		var eligible []NodeID
		for _, id := range pool {
			if r.IntN(2) == 0 {
				eligible = append(eligible, id)
			}
		}
		if len(eligible) == 0 {
			_, _, err := rebalance(table, eligible)
			require.ErrorIs(t, err, ErrNoEligibleNodes)
			continue
		}
		next, moved, err := rebalance(table, eligible)
		require.NoError(t, err)
		checkBalanced(t, next, eligible)
		require.Equal(t, bruteMinimumMoves(table, eligible), moved, "iter %d", iter)
		again, moved2, err := rebalance(next, eligible)
		require.NoError(t, err)
		require.Zero(t, moved2)
		require.Equal(t, next, again)
	}
}

func TestPlacementSpread(t *testing.T) {
	const P = 256
	counts := make([]int, P)
	for i := 0; i < 100000; i++ {
		counts[PartitionForName(RootInode, fmt.Sprintf("file-%d", i), P)]++
	}
	lo, hi := slices.Min(counts), slices.Max(counts)
	// Expected 390.6 per partition; a uniform hash stays well within ±25%.
	require.Greater(t, lo, 290)
	require.Less(t, hi, 490)

	chunks := make([]int, P)
	for c := uint64(0); c < 100000; c++ {
		chunks[ChunkPartition(InodeNumber(3, 77), c, P)]++
	}
	require.Greater(t, slices.Min(chunks), 290)
	require.Less(t, slices.Max(chunks), 490)
}

// TestPlacementGolden pins the hash functions: they are part of the on-media
// format, and a change would strand existing inodes and chunks.
func TestPlacementGolden(t *testing.T) {
	var b strings.Builder
	for _, name := range []string{"", "a", "file.txt", "dir", "日本語"} {
		for _, parent := range []uint64{RootInode, InodeNumber(5, 9), InodeNumber(255, 1<<40)} {
			fmt.Fprintf(&b, "name parent=%#x name=%q P=256 -> %d\n", parent, name, PartitionForName(parent, name, 256))
		}
	}
	for _, ino := range []uint64{RootInode, InodeNumber(17, 3)} {
		for _, c := range []uint64{0, 1, 2, 1000} {
			fmt.Fprintf(&b, "chunk ino=%#x chunk=%d P=256 -> %d\n", ino, c, ChunkPartition(ino, c, 256))
		}
	}
	golden(t, "placement.golden", []byte(b.String()))
}

func TestMapPlacementFunctions(t *testing.T) {
	m := testMap(t, 64, "a", "b", "c")
	for name, tc := range map[string]struct {
		ino uint64
	}{
		"root":         {RootInode},
		"partition 63": {InodeNumber(63, 5)},
	} {
		t.Run(name, func(t *testing.T) {
			owner, err := m.OwnerOfInode(tc.ino)
			require.NoError(t, err)
			require.Equal(t, m.Partitions[PartitionOf(tc.ino)], owner.ID)
		})
	}
	_, err := m.OwnerOfInode(InodeNumber(64, 1))
	require.ErrorIs(t, err, ErrBadRequest)
	o, err := m.OwnerOfName(RootInode, "x", true)
	require.NoError(t, err)
	require.Equal(t, m.Partitions[m.NewInodePartition(RootInode, "x", true)], o.ID)
	o, err = m.ChunkOwner(RootInode, 3)
	require.NoError(t, err)
	require.Equal(t, m.Partitions[m.ChunkPartition(RootInode, 3)], o.ID)
	_, err = (&Map{}).ChunkOwner(1, 1)
	require.ErrorIs(t, err, ErrNotInitialized)
}

// TestRebalancePinnedProperty: with some partitions pinned (to eligible
// owners, as the map guarantees), rebalancing never moves a pinned
// partition, balances the unpinned ones to floor or ceil of U/N per node,
// moves the fewest of them that allows (the brute-force minimum over the
// unpinned sub-table), and a second rebalance moves nothing.
func TestRebalancePinnedProperty(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pool := ids(8)
	for iter := range 500 {
		p := 1 + r.IntN(300)
		var eligible []NodeID
		for _, id := range pool {
			if r.IntN(3) > 0 {
				eligible = append(eligible, id)
			}
		}
		if len(eligible) == 0 {
			eligible = pool[:1]
		}
		table := make([]NodeID, p)
		var pinned []uint32
		for i := range table {
			table[i] = pool[r.IntN(len(pool))]
			// Pin up to about a third, only on eligible owners.
			if slices.Contains(eligible, table[i]) && r.IntN(3) == 0 {
				pinned = append(pinned, uint32(i))
			}
		}
		next, moved, err := rebalancePinned(table, pinned, eligible)
		require.NoError(t, err)
		var sub, subNext []NodeID
		for i := range table {
			if _, ok := slices.BinarySearch(pinned, uint32(i)); ok {
				require.Equal(t, table[i], next[i], "iter %d: pinned partition %d moved", iter, i)
				continue
			}
			sub = append(sub, table[i])
			subNext = append(subNext, next[i])
		}
		checkBalanced(t, subNext, eligible)
		require.Equal(t, bruteMinimumMoves(sub, eligible), moved, "iter %d", iter)
		diff := 0
		for i := range next {
			if next[i] != table[i] {
				diff++
			}
		}
		require.Equal(t, moved, diff)
		again, moved2, err := rebalancePinned(next, pinned, eligible)
		require.NoError(t, err)
		require.Zero(t, moved2)
		require.Equal(t, next, again)
	}
	// A pinned partition of an ineligible owner is refused, not moved.
	_, _, err := rebalancePinned([]NodeID{"a", "b"}, []uint32{1}, []NodeID{"a"})
	require.ErrorIs(t, err, ErrHoldsData)
}

func TestFilePlacement(t *testing.T) {
	parts := make([]NodeID, 64)
	dir := InodeNumber(17, 5)
	for _, tc := range []struct {
		placement FilePlacement
		together  bool // files go to their directory's partition
	}{
		{PlaceWithDirectory, true},
		{PlaceHashed, false},
		{"", false}, // a map from before FilePlacement: hashed
	} {
		t.Run(string(tc.placement), func(t *testing.T) {
			m := &Map{Epoch: 1, Partitions: parts, FilePlacement: tc.placement}
			elsewhere := 0
			for i := range 200 {
				name := fmt.Sprintf("n%d", i)
				hashed := PartitionForName(dir, name, 64)
				require.Equal(t, hashed, m.NewInodePartition(dir, name, true), "a directory always spreads")
				file := m.NewInodePartition(dir, name, false)
				if tc.together {
					require.Equal(t, uint32(17), file, name)
				} else {
					require.Equal(t, hashed, file, name)
				}
				if hashed != 17 {
					elsewhere++
				}
			}
			require.Greater(t, elsewhere, 150, "names hash over the partitions")
		})
	}
	// The init command records the placement; a map with an unknown one
	// is refused.
	m := mustApply(t, &Map{}, Command{Type: CmdInit, Init: &InitCommand{ClusterID: "c", Partitions: 8, First: info("a"), FilePlacement: PlaceWithDirectory}})
	require.Equal(t, PlaceWithDirectory, m.Placement())
	require.NoError(t, m.Validate())
	m.FilePlacement = "striped"
	require.ErrorContains(t, m.Validate(), `file placement "striped"`)
	require.ErrorContains(t, Config{DataDir: "d", FilePlacement: "striped"}.Validate(), "file placement")
	var c Config
	c.setDefaults()
	require.Equal(t, PlaceWithDirectory, c.FilePlacement, "a new cluster keeps files with their directory")
}
