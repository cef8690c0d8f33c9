package fuse

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestManyDescriptorsOfOneFile runs random pwrite, ftruncate, open with
// O_TRUNC, close and fstat on several descriptors of one file through
// the mount, and the same calls on a file of the test's temporary
// directory (the reference): every fstat size and every pread must agree.
// It found two bugs: closing a second descriptor with unflushed writes
// left a stale size for the next stat (181ce7c), and an attribute answer
// that crossed a commit undid it (37c2ae8). A failure names its seed;
// OCTOFS_DESC_SEED replays one.
func TestManyDescriptorsOfOneFile(t *testing.T) {
	forEachFixture(t, func(t *testing.T, f *fixture) {
		mnt, _ := f.mount(t, Options{})
		for _, seed := range testSeeds(t, "OCTOFS_DESC_SEED", 1, 2, 3, 4, 5, 6) {
			dir := subdir(t, mnt, fmt.Sprintf("seed%d", seed))
			descriptorStorm(t, seed, filepath.Join(dir, "f"), filepath.Join(t.TempDir(), "f"))
		}
	})
}

// descriptorStorm runs 300 random calls on three descriptors of got and of
// want and fails at the first answer that differs.
func descriptorStorm(t *testing.T, seed uint64, got, want string) {
	t.Helper()
	const descriptors, calls, maxSize = 3, 300, 96 << 10
	rng := rand.New(rand.NewPCG(seed, 0))
	open := func(name string, flag int) *os.File {
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|flag, 0o644)
		if err != nil {
			t.Fatalf("seed %d: open %s: %v", seed, name, err)
		}
		return f
	}
	var g, w [descriptors]*os.File
	for i := range descriptors {
		g[i], w[i] = open(got, 0), open(want, 0)
	}
	defer func() {
		for i := range descriptors {
			g[i].Close()
			w[i].Close()
		}
	}()
	fail := func(step int, what string, a, b any) {
		t.Fatalf("seed %d (replay: OCTOFS_DESC_SEED=%d), call %d, %s: mount %v, reference %v", seed, seed, step, what, a, b)
	}
	statBoth := func(step int) {
		gs, err := os.Stat(got)
		if err != nil {
			fail(step, "stat", err, nil)
		}
		ws, _ := os.Stat(want)
		if gs.Size() != ws.Size() {
			fail(step, "stat: size", gs.Size(), ws.Size())
		}
	}
	for step := range calls {
		i := rng.IntN(descriptors)
		switch op := rng.IntN(13); {
		case op < 4: // pwrite
			off := rng.Int64N(maxSize)
			buf := randomBytes(rng, 1+rng.IntN(12<<10))
			if _, err := g[i].WriteAt(buf, off); err != nil {
				fail(step, "pwrite", err, nil)
			}
			if _, err := w[i].WriteAt(buf, off); err != nil {
				t.Fatalf("seed %d: reference pwrite: %v", seed, err)
			}
		case op < 5: // ftruncate
			size := rng.Int64N(maxSize)
			if err := g[i].Truncate(size); err != nil {
				fail(step, "ftruncate", err, nil)
			}
			if err := w[i].Truncate(size); err != nil {
				t.Fatalf("seed %d: reference ftruncate: %v", seed, err)
			}
		case op < 6: // fallocate, one of the modes
			modes := []uint32{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
				unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE}
			mode := modes[rng.IntN(len(modes))]
			off, n := rng.Int64N(maxSize), 1+rng.Int64N(24<<10)
			gerr := unix.Fallocate(int(g[i].Fd()), mode, off, n)
			werr := unix.Fallocate(int(w[i].Fd()), mode, off, n)
			if gerr != werr {
				fail(step, fmt.Sprintf("fallocate(mode %#x, %d, %d)", mode, off, n), gerr, werr)
			}
		case op < 7: // close and open again, half the time with O_TRUNC
			flag := 0
			if rng.IntN(2) == 0 {
				flag = os.O_TRUNC
			}
			if err := g[i].Close(); err != nil {
				fail(step, "close", err, nil)
			}
			w[i].Close()
			g[i], w[i] = open(got, flag), open(want, flag)
		case op < 8: // another descriptor opened and closed at once
			extra := open(got, 0)
			if err := extra.Close(); err != nil {
				fail(step, "close of a descriptor opened for nothing", err, nil)
			}
		case op < 10: // fstat
			gs, err := g[i].Stat()
			if err != nil {
				fail(step, "fstat", err, nil)
			}
			ws, _ := w[i].Stat()
			if gs.Size() != ws.Size() {
				fail(step, fmt.Sprintf("fstat of descriptor %d: size", i), gs.Size(), ws.Size())
			}
		case op < 11: // stat of the path
			statBoth(step)
		default: // pread of a random range
			off := rng.Int64N(maxSize)
			n := 1 + rng.IntN(16<<10)
			gb, wb := make([]byte, n), make([]byte, n)
			gn, gerr := g[i].ReadAt(gb, off)
			wn, _ := w[i].ReadAt(wb, off)
			if gn != wn || !bytes.Equal(gb[:gn], wb[:wn]) {
				fail(step, fmt.Sprintf("pread(%d, %d) on descriptor %d: bytes read (err %v)", n, off, i, gerr), gn, wn)
			}
		}
	}
	statBoth(calls)
}

// testSeeds returns the seed that environment variable env names (a
// replay), or else seeds.
func testSeeds(t *testing.T, env string, seeds ...uint64) []uint64 {
	t.Helper()
	s := os.Getenv(env)
	if s == "" {
		return seeds
	}
	var seed uint64
	if _, err := fmt.Sscan(s, &seed); err != nil {
		t.Fatalf("%s=%q: %v", env, s, err)
	}
	return []uint64{seed}
}

// randomBytes returns n bytes drawn from rng.
func randomBytes(rng *rand.Rand, n int) []byte {
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	return buf
}
