package pmem

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func trackerStore(tr *Tracker, off int, v uint64) {
	binary.LittleEndian.PutUint64(tr.work[off:], v)
	tr.Stored(off, 8)
}

// outcomes draws crash images and collects the values words 0 and 64
// take in them.
func outcomes(tr *Tracker) (w0, w64 map[uint64]bool) {
	w0, w64 = map[uint64]bool{}, map[uint64]bool{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		img := tr.CrashImage(rng)
		w0[binary.LittleEndian.Uint64(img[0:])] = true
		w64[binary.LittleEndian.Uint64(img[64:])] = true
	}
	return w0, w64
}

func TestTrackerModel(t *testing.T) {
	tests := map[string]struct {
		instr Instruction
		run   func(tr *Tracker, m Medium)
		// allowed values of the words at offsets 0 and 64 after a crash
		want0, want64 []uint64
	}{
		"flushed and fenced survives": {
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 0, 1); m.Flush(0, 8); m.Fence() },
			want0: []uint64{1}, want64: []uint64{0},
		},
		"flushed without a fence may be lost": {
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 0, 1); m.Flush(0, 8) },
			want0: []uint64{0, 1}, want64: []uint64{0},
		},
		"never flushed may still reach the medium": {
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 64, 5) },
			want0: []uint64{0}, want64: []uint64{0, 5},
		},
		"intermediate values can be evicted": {
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 0, 1); trackerStore(tr, 0, 2); trackerStore(tr, 0, 3) },
			want0: []uint64{0, 1, 2, 3}, want64: []uint64{0},
		},
		"a store after the flush is not covered by the fence": {
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 0, 1); m.Flush(0, 8); trackerStore(tr, 0, 2); m.Fence() },
			want0: []uint64{1, 2}, want64: []uint64{0},
		},
		"a flush covers the whole line": {
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 8, 1); trackerStore(tr, 0, 4); m.Flush(8, 1); m.Fence() },
			want0: []uint64{4}, want64: []uint64{0},
		},
		"a flush covers every line of its range": {
			run: func(tr *Tracker, m Medium) {
				trackerStore(tr, 0, 1)
				trackerStore(tr, 64, 2)
				m.Flush(60, 8)
				m.Fence()
			},
			want0: []uint64{1}, want64: []uint64{2},
		},
		"msync is durable at once": {
			instr: InstrMsync,
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 0, 1); trackerStore(tr, 64, 2); m.Flush(0, 8) },
			want0: []uint64{1}, want64: []uint64{2}, // the whole page
		},
		"a fence does nothing for msync": {
			instr: InstrMsync,
			run:   func(tr *Tracker, m Medium) { trackerStore(tr, 0, 1); m.Fence() },
			want0: []uint64{0, 1}, want64: []uint64{0},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tr := NewTracker(make([]byte, 8192))
			instr := tc.instr
			if instr == InstrNone {
				instr = InstrCLWB
			}
			tc.run(tr, tr.Medium(instr))
			seen0, seen64 := outcomes(tr)
			for v := range seen0 {
				require.Contains(t, tc.want0, v, "word 0 = %d is not a value it may hold", v)
			}
			for v := range seen64 {
				require.Contains(t, tc.want64, v, "word 64 = %d is not a value it may hold", v)
			}
			require.Len(t, seen0, len(tc.want0), "every allowed outcome of word 0 shows up")
			require.Len(t, seen64, len(tc.want64))
		})
	}
}

// TestTrackerFencesAreThreadLocal: an SFENCE orders only its own thread's
// flushes, so a flush issued by one goroutine is not made durable by
// another goroutine's fence.
func TestTrackerFencesAreThreadLocal(t *testing.T) {
	tr := NewTracker(make([]byte, 256))
	tr.TrackGoroutines(true)
	m := tr.Medium(InstrCLWB)
	flushed, fenceNow, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		trackerStore(tr, 0, 7)
		m.Flush(0, 8)
		close(flushed)
		<-fenceNow
		m.Fence()
	}()
	<-flushed
	m.Fence() // another goroutine's fence
	seen0, _ := outcomes(tr)
	require.Len(t, seen0, 2, "the other goroutine's flush is still pending: %v", seen0)
	close(fenceNow)
	<-done
	seen0, _ = outcomes(tr)
	require.Equal(t, map[uint64]bool{7: true}, seen0, "the flushing goroutine's own fence retires it")
}

func TestTrackerNeverTearsWords(t *testing.T) {
	tr := NewTracker(make([]byte, 128))
	for i := range 16 {
		trackerStore(tr, 8*i, ^uint64(0))
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

func TestTrackerWritebackErrors(t *testing.T) {
	tr := NewTracker(make([]byte, 3*4096))
	m := tr.Medium(InstrMsync)
	trackerStore(tr, 0, 1)
	trackerStore(tr, 4096, 2)
	eio := errors.New("EIO")
	tr.FailWriteback(0, 8, eio)
	// The next msync, of another page, reports the error (errseq) but
	// writes its own page.
	require.ErrorIs(t, m.Flush(4096, 8), eio)
	// The failed page counts as clean: msync writes nothing and says
	// nothing.
	require.NoError(t, m.Flush(0, 8))
	img := tr.CrashImage(rand.New(rand.NewPCG(1, 1)))
	require.Equal(t, uint64(0), binary.LittleEndian.Uint64(img[0:]), "the lost write-back never reached the medium")
	require.Equal(t, uint64(2), binary.LittleEndian.Uint64(img[4096:]))
	tr.InjectMsyncFault(func(off, n int) error { return ErrTrackerEIO })
	trackerStore(tr, 8192, 3)
	require.ErrorIs(t, m.Flush(8192, 8), ErrTrackerEIO)
}

func TestTrackerCrashPoints(t *testing.T) {
	tr := NewTracker(make([]byte, 4096))
	var kinds []string
	tr.OnCrashPoint(func(p CrashPoint) {
		kinds = append(kinds, p.Kind)
		_ = p.Image(rand.New(rand.NewPCG(1, 1))) // callable inside the hook
	})
	tr.Medium(InstrCLWB).Fence()
	tr.Medium(InstrMsync).Flush(0, 8)
	tr.Medium(InstrMsync).Fence() // not a crash point: nothing happens
	require.Equal(t, []string{"fence", "msync"}, kinds)
	require.Equal(t, 2, tr.Points())
}

// TestTrackerAsMedium: the tracker used directly as a medium persists
// like CLWB through the production flush code, and the fence hook may
// take crash images from inside it.
func TestTrackerAsMedium(t *testing.T) {
	tr := NewTracker(make([]byte, 128<<10))
	r, err := Format(tr, smallFormat, Options{})
	require.NoError(t, err)
	var images int
	tr.OnFence(func(fence int) {
		require.Equal(t, tr.fences, fence)
		_ = tr.CrashImage(rand.New(rand.NewPCG(1, 1)))
		images++
	})
	before := tr.Fences()
	require.NoError(t, r.Store8(r.RootOffset(0), 5))
	tr.OnFence(nil)
	require.Equal(t, 1, images)
	require.Equal(t, before+1, tr.Fences())
	require.Equal(t, InstrCLWB, tr.Info().Instruction)
}
