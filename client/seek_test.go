package client_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node/nodetest"
)

// TestClusterSeekDataHole writes a sparse file across chunks and checks
// SEEK_DATA and SEEK_HOLE against its extent maps: before the writes are
// flushed (some kept behind), through a new open after close, after a
// punched hole, and after a small write into a hole.
func TestClusterSeekDataHole(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	root := client.Cred{}
	c.SetWriteBehind(1 << 20)
	const (
		K    = 1 << 10
		M    = 1 << 20
		size = 12 * M
	)
	a, f, err := c.Create(ctx, root, cluster.RootInode, "sparse", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	// Data at [0, 64K) in chunk 0 and [5M, 5M+64K) in chunk 1, holes
	// between and up to the size the truncate set. The writes come after
	// the truncate, so that they are not yet persisted: they sit in
	// unwritten extents, which read as zeros for anyone else.
	if err := f.Truncate(ctx, size); err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte{'d'}, 64*K)
	for _, off := range []int64{0, 5 * M} {
		if _, err := f.WriteAt(ctx, block, off); err != nil {
			t.Fatal(err)
		}
	}

	type seek struct {
		name string
		hole bool
		off  uint64
		want uint64 // with err nil
		err  error
	}
	check := func(t *testing.T, f *client.File, seeks []seek) {
		t.Helper()
		for _, s := range seeks {
			seekf, what := f.SeekData, "SEEK_DATA"
			if s.hole {
				seekf, what = f.SeekHole, "SEEK_HOLE"
			}
			got, err := seekf(ctx, s.off)
			if !errors.Is(err, s.err) || (err == nil && got != s.want) {
				t.Errorf("%s: %s(%d) = %d, %v; want %d, %v", s.name, what, s.off, got, err, s.want, s.err)
			}
		}
	}
	sparse := []seek{
		{"data at start", false, 0, 0, nil},
		{"data inside the first extent", false, 100, 100, nil},
		{"hole after the first extent", true, 0, 64 * K, nil},
		{"hole from inside the first extent", true, 100, 64 * K, nil},
		{"data in the next chunk", false, 64 * K, 5 * M, nil},
		{"data across the chunk boundary", false, 3 * M, 5 * M, nil},
		{"hole at a hole", true, 1 * M, 1 * M, nil},
		{"hole after the second extent", true, 5 * M, 5*M + 64*K, nil},
		{"no data after the second extent", false, 5*M + 64*K, 0, syscall.ENXIO},
		{"hole before the end", true, 11 * M, 11 * M, nil},
		{"data at the end", false, size, 0, syscall.ENXIO},
		{"hole at the end", true, size, 0, syscall.ENXIO},
		{"hole past the end", true, size + 1, 0, syscall.ENXIO},
	}
	t.Run("unflushed", func(t *testing.T) { check(t, f, sparse) })
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	f, err = c.Open(ctx, root, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	t.Run("reopened", func(t *testing.T) { check(t, f, sparse) })

	t.Run("punched", func(t *testing.T) {
		if err := f.Allocate(ctx, client.FallocPunchHole|client.FallocKeepSize, 16*K, 16*K); err != nil {
			t.Fatal(err)
		}
		check(t, f, []seek{
			{"data before the punch", false, 0, 0, nil},
			{"hole at the punch", true, 0, 16 * K, nil},
			{"data after the punch", false, 16 * K, 32 * K, nil},
			{"hole after the first extent", true, 32 * K, 64 * K, nil},
		})
	})
	t.Run("fallocated", func(t *testing.T) {
		// Allocated but never written reads as zeros: a hole, as ext4
		// and XFS answer for unwritten extents.
		if err := f.Allocate(ctx, client.FallocKeepSize, 1*M, 64*K); err != nil {
			t.Fatal(err)
		}
		check(t, f, []seek{
			{"data skips the allocation", false, 64 * K, 5 * M, nil},
			{"hole at the allocation", true, 1 * M, 1 * M, nil},
		})
	})
	t.Run("native API", func(t *testing.T) {
		g, err := c.FS(root).Open("sparse")
		if err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		for _, s := range []struct {
			whence int
			off    int64
			want   int64
			err    error
		}{
			{client.SeekData, 64 * K, 5 * M, nil},
			{client.SeekHole, 5 * M, 5*M + 64*K, nil},
			{client.SeekHole, size, 0, syscall.ENXIO},
		} {
			got, err := g.Seek(s.off, s.whence)
			if !errors.Is(err, s.err) || (err == nil && got != s.want) {
				t.Errorf("Seek(%d, %d) = %d, %v; want %d, %v", s.off, s.whence, got, err, s.want, s.err)
			}
		}
	})
	t.Run("small unflushed write", func(t *testing.T) {
		if _, err := f.WriteAt(ctx, []byte("0123456789"), 9*M+100); err != nil {
			t.Fatal(err)
		}
		// Block granularity: the write's block is data.
		got, err := f.SeekData(ctx, 5*M+64*K)
		if err != nil || got > 9*M+100 || got < 9*M {
			t.Errorf("SEEK_DATA after a 10-byte write at 9M+100: %d, %v", got, err)
		}
		got, err = f.SeekHole(ctx, 9*M+100)
		if err != nil || got < 9*M+110 || got > 9*M+64*K {
			t.Errorf("SEEK_HOLE inside a 10-byte write at 9M+100: %d, %v", got, err)
		}
	})
}

// TestClusterSeekDataFarAway: SEEK_DATA over a terabyte of holes asks the
// nodes where the next data is instead of mapping every 4 MiB chunk on
// the way: before, `cp` of a sparse 1 TiB file failed with ETIMEDOUT
// after 30 s of lseek (262,144 maps).
func TestClusterSeekDataFarAway(t *testing.T) {
	const (
		T   = 1 << 40
		far = 700 << 30
	)
	ctx := context.Background()
	c, f := hugeSparseFile(t, T, far, T-4096)
	before := c.Stats().TotalRPCs()
	for _, s := range []struct{ off, want uint64 }{{0, far}, {far + 4096, T - 4096}, {12345, far}} {
		if got, err := f.SeekData(ctx, s.off); err != nil || got != s.want {
			t.Errorf("SEEK_DATA(%d) = %d, %v; want %d", s.off, got, err, s.want)
		}
	}
	if got, err := f.SeekHole(ctx, far); err != nil || got != far+4096 {
		t.Errorf("SEEK_HOLE(%d) = %d, %v; want %d", uint64(far), got, err, uint64(far+4096))
	}
	if n := c.Stats().TotalRPCs() - before; n > 100 {
		t.Errorf("four seeks over a terabyte took %d RPCs, want a few dozen at most", n)
	}
}

// TestClusterPunchOverHoles: punching a hole over a terabyte of a sparse
// file frees its data and skips the chunks holding none (next-data), as
// SEEK_DATA does: before, every 4 MiB chunk of the range cost a request
// (262,144 for 1 TiB: 25 s through the mount).
func TestClusterPunchOverHoles(t *testing.T) {
	const (
		T   = 1 << 40
		far = 700 << 30
	)
	ctx := context.Background()
	c, f := hugeSparseFile(t, T, 4096, far, T-4096)
	before := c.Stats().TotalRPCs()
	if err := f.Allocate(ctx, client.FallocPunchHole|client.FallocKeepSize, 0, T-4096); err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().TotalRPCs() - before; n > 100 {
		t.Errorf("a punch over a terabyte took %d RPCs, want a few dozen at most", n)
	}
	if got, err := f.SeekData(ctx, 0); err != nil || got != T-4096 {
		t.Errorf("SEEK_DATA(0) after the punch = %d, %v; want %d (the block past the punch)", got, err, uint64(T-4096))
	}
	for _, off := range []int64{4096, far} {
		b := make([]byte, 4096)
		if _, err := f.ReadAt(ctx, b, off); err != nil || !bytes.Equal(b, make([]byte, 4096)) {
			t.Errorf("read at %d after the punch: %v, zeros %v", off, err, bytes.Equal(b, make([]byte, 4096)))
		}
	}
}

// hugeSparseFile creates a file of size bytes on a new 3-node cluster
// holding 4 KiB at each of offs and nothing else, flushed; it is closed
// when the test ends.
func hugeSparseFile(t *testing.T, size int64, offs ...int64) (*client.Client, *client.File) {
	t.Helper()
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	_, f, err := c.Create(ctx, client.Cred{}, cluster.RootInode, "huge", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close(ctx) })
	if err := f.Truncate(ctx, uint64(size)); err != nil {
		t.Fatal(err)
	}
	for _, off := range offs {
		if _, err := f.WriteAt(ctx, bytes.Repeat([]byte{'x'}, 4096), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return c, f
}
