package alloc

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRunHelpers(t *testing.T) {
	tests := map[string]struct {
		free    uint64
		n       uint64
		starts  uint64
		longest uint64
	}{
		"empty":               {0, 1, 0, 0},
		"all free, 64":        {^uint64(0), 64, 1, 64},
		"all free, 1":         {^uint64(0), 1, ^uint64(0), 64},
		"low nibble, 4":       {0xf, 4, 1, 4},
		"low nibble, 5":       {0xf, 5, 0, 4},
		"two runs, 3":         {0b1110_0111, 3, 0b0010_0001, 3},
		"top bits":            {0xff00000000000000, 8, 1 << 56, 8},
		"alternating":         {0x5555555555555555, 2, 0, 1},
		"run of 63 at bit 1":  {0xfffffffffffffffe, 63, 2, 63},
		"run of 63 at bit 0":  {^uint64(0) >> 1, 63, 1, 63},
		"run of 40, search 9": {(1<<40 - 1) << 10, 9, ((1<<32 - 1) << 10), 40},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.starts, runStarts(tc.free, tc.n))
			require.Equal(t, tc.longest, longestRun(tc.free))
		})
	}
}

// TestTreeMatchesScan drives Tree and Scan with the same random
// operations on maps of awkward sizes and requires the same answer to
// every search and valid summaries throughout.
func TestTreeMatchesScan(t *testing.T) {
	for _, n := range []uint64{1, 63, 64, 65, 2047, 2048, 2049, 3*chunkBits + 17, 40000} {
		t.Run("", func(t *testing.T) {
			rng := rand.New(rand.NewPCG(n, 7))
			tr, sc := NewTree(n), NewScan(n)
			type run struct{ s, n uint64 }
			var live []run
			for op := range 3000 {
				switch r := rng.IntN(10); {
				case r < 5 || len(live) == 0:
					count := uint64(1 + rng.IntN(int(min(n, 3000))))
					if rng.IntN(4) == 0 {
						count = uint64(1 + rng.IntN(70))
					}
					hint := rng.Uint64N(n + 5)
					s1, ok1 := tr.Alloc(count, hint)
					s2, ok2 := sc.Alloc(count, hint)
					require.Equal(t, ok2, ok1, "op %d: alloc %d at hint %d", op, count, hint)
					require.Equal(t, s2, s1, "op %d: alloc %d at hint %d", op, count, hint)
					if ok1 {
						live = append(live, run{s1, count})
					}
				case r < 9:
					i := rng.IntN(len(live))
					tr.Clear(live[i].s, live[i].n)
					sc.Clear(live[i].s, live[i].n)
					live[i] = live[len(live)-1]
					live = live[:len(live)-1]
				default:
					// Mark an arbitrary range, as loading a bitmap or fsck does.
					s := rng.Uint64N(n)
					c := 1 + rng.Uint64N(min(n-s, 200))
					if rng.IntN(2) == 0 {
						tr.Set(s, c)
						sc.Set(s, c)
					} else {
						tr.Clear(s, c)
						sc.Clear(s, c)
					}
					live = nil // ownership is no longer tracked
					if rng.IntN(2) == 0 {
						tr.Clear(0, n)
						sc.Clear(0, n)
					}
				}
				require.Equal(t, sc.Used(), tr.Used(), "op %d", op)
				if op%50 == 0 {
					require.NoError(t, tr.check(), "op %d", op)
				}
			}
			require.NoError(t, tr.check())
			for i := range tr.Words() {
				require.Equal(t, sc.w[i], tr.Word(i))
			}
		})
	}
}

func TestTreeLoad(t *testing.T) {
	const n = 5000
	words := make([]uint64, (n+63)/64)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range words {
		words[i] = rng.Uint64()
	}
	words[len(words)-1] = ^uint64(0) // tail bits past n must be ignored
	tr := NewTree(n)
	tr.Load(words)
	sc := NewScan(n)
	sc.Load(words)
	require.NoError(t, tr.check())
	require.Equal(t, sc.Used(), tr.Used())
	for count := uint64(1); count < 12; count++ {
		for hint := uint64(0); hint < n; hint += 97 {
			s1, ok1 := tr.Find(count, hint)
			s2, ok2 := sc.Find(count, hint)
			require.Equal(t, ok2, ok1)
			require.Equal(t, s2, s1, "count %d hint %d", count, hint)
		}
	}
}

func TestTreeFullAndEmpty(t *testing.T) {
	tr := NewTree(10000)
	require.Equal(t, uint64(10000), tr.Longest())
	s, ok := tr.Alloc(10000, 77)
	require.True(t, ok)
	require.Zero(t, s)
	_, ok = tr.Find(1, 0)
	require.False(t, ok, "a full index has no room")
	tr.Clear(9999, 1)
	s, ok = tr.Find(1, 0)
	require.True(t, ok)
	require.Equal(t, uint64(9999), s)
	_, ok = tr.Find(2, 0)
	require.False(t, ok)
	require.Panics(t, func() { tr.Set(9999, 2) }, "past the end")
}

// TestTreeFragmentedLarge is the allocator's reason to exist: on a
// 2^24-entry map with every other entry used and one free run far away,
// every search still finds the run and leaves valid summaries.
func TestTreeFragmentedLarge(t *testing.T) {
	const n = 1 << 24
	tr := NewTree(n)
	words := make([]uint64, n/64)
	for i := range words {
		words[i] = 0x5555555555555555
	}
	const runAt = n - 3*chunkBits + 5
	for i := uint64(runAt); i < runAt+64; i++ {
		words[i/64] &^= 1 << (i % 64)
	}
	tr.Load(words)
	for _, hint := range []uint64{0, 1, n / 2, runAt, runAt + 1, n - 1} {
		s, ok := tr.Find(8, hint)
		require.True(t, ok)
		if hint <= runAt+56 {
			require.Equal(t, max(uint64(runAt), hint), s, "hint %d", hint)
		} else {
			require.Equal(t, uint64(runAt), s, "wrapped, hint %d", hint)
		}
	}
	s, ok := tr.Alloc(64, 0)
	require.True(t, ok)
	require.Equal(t, uint64(runAt), s)
	_, ok = tr.Find(2, 0)
	require.False(t, ok)
	require.NoError(t, tr.check())
}

func BenchmarkFragmented(b *testing.B) {
	for _, n := range []uint64{1 << 20, 1 << 24} {
		words := make([]uint64, n/64)
		for i := range words {
			words[i] = 0x5555555555555555
		}
		runAt := n / 3
		for i := runAt; i < runAt+64; i++ {
			words[i/64] &^= 1 << (i % 64)
		}
		tr := NewTree(n)
		tr.Load(words)
		b.Run("tree", func(b *testing.B) {
			for i := range b.N {
				s, ok := tr.Alloc(8, uint64(i)*7919%n)
				if !ok {
					b.Fatal("no run")
				}
				tr.Clear(s, 8)
			}
		})
	}
}
