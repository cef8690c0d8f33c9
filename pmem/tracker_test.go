package pmem

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTrackerModel(t *testing.T) {
	word := func(img []byte, off int) uint64 { return binary.LittleEndian.Uint64(img[off:]) }
	store := func(tr *Tracker, off int, v uint64) {
		binary.LittleEndian.PutUint64(tr.work[off:], v)
		tr.Stored(off, 8)
	}
	tests := map[string]struct {
		run func(tr *Tracker)
		// allowed values of the word at offset 0 and 64 after a crash
		want0, want64 []uint64
	}{
		"flushed and fenced survives": {
			run:   func(tr *Tracker) { store(tr, 0, 1); tr.Flush(0, 8); tr.Fence() },
			want0: []uint64{1}, want64: []uint64{0},
		},
		"flushed without a fence may be lost": {
			run:   func(tr *Tracker) { store(tr, 0, 1); tr.Flush(0, 8) },
			want0: []uint64{0, 1}, want64: []uint64{0},
		},
		"never flushed may still reach the medium": {
			run:   func(tr *Tracker) { store(tr, 64, 5) },
			want0: []uint64{0}, want64: []uint64{0, 5},
		},
		"intermediate values can be evicted": {
			run:   func(tr *Tracker) { store(tr, 0, 1); store(tr, 0, 2); store(tr, 0, 3) },
			want0: []uint64{0, 1, 2, 3}, want64: []uint64{0},
		},
		"a store after the flush is not covered by the fence": {
			run:   func(tr *Tracker) { store(tr, 0, 1); tr.Flush(0, 8); store(tr, 0, 2); tr.Fence() },
			want0: []uint64{1, 2}, want64: []uint64{0},
		},
		"direct stores are caught by the flush": {
			run:   func(tr *Tracker) { binary.LittleEndian.PutUint64(tr.work[64:], 9); tr.Flush(64, 8); tr.Fence() },
			want0: []uint64{0}, want64: []uint64{9},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tr := NewTracker(make([]byte, 256))
			tc.run(tr)
			seen0, seen64 := map[uint64]bool{}, map[uint64]bool{}
			rng := rand.New(rand.NewPCG(1, 2))
			for range 200 {
				img := tr.CrashImage(rng)
				seen0[word(img, 0)] = true
				seen64[word(img, 64)] = true
			}
			for v := range seen0 {
				require.Contains(t, tc.want0, v, "word 0 = %d is not a value it ever held", v)
			}
			for v := range seen64 {
				require.Contains(t, tc.want64, v)
			}
			require.Len(t, seen0, len(tc.want0), "every allowed outcome of word 0 shows up")
			require.Len(t, seen64, len(tc.want64))
		})
	}
}

func TestTrackerNeverTearsWords(t *testing.T) {
	tr := NewTracker(make([]byte, 128))
	for i := range 16 {
		binary.LittleEndian.PutUint64(tr.work[8*i:], ^uint64(0))
		tr.Stored(8*i, 8)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		img := tr.CrashImage(rng)
		for i := 0; i < len(img); i += 8 {
			w := img[i : i+8]
			allSame := true
			for _, b := range w {
				allSame = allSame && b == w[0]
			}
			require.True(t, allSame && (w[0] == 0 || w[0] == 0xff), "torn word at %d: %x", i, w)
		}
	}
}
