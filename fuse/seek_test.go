package fuse

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSeekDataHoleThroughTheMount: lseek's SEEK_DATA and SEEK_HOLE reach
// the cluster's extent maps (client.File.SeekData and SeekHole) through
// the kernel: a file with data in two chunks and holes between and after
// them answers where the data is.
func TestSeekDataHoleThroughTheMount(t *testing.T) {
	f := clusterFixture(t)
	dir, _ := f.mount(t, Options{Logger: testLogger(t)})
	const (
		K    = 1 << 10
		M    = 1 << 20
		size = 12 * M
	)
	fh, err := os.OpenFile(filepath.Join(dir, "sparse"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	block := bytes.Repeat([]byte{'d'}, 64*K)
	for _, off := range []int64{0, 5 * M} {
		if _, err := fh.WriteAt(block, off); err != nil {
			t.Fatal(err)
		}
	}
	fd := int(fh.Fd())
	for _, s := range []struct {
		whence int
		off    int64
		want   int64
		err    error
	}{
		{unix.SEEK_DATA, 0, 0, nil},
		{unix.SEEK_HOLE, 0, 64 * K, nil},
		{unix.SEEK_DATA, 64 * K, 5 * M, nil},
		{unix.SEEK_HOLE, 5 * M, 5*M + 64*K, nil},
		{unix.SEEK_DATA, 5*M + 64*K, 0, syscall.ENXIO},
		{unix.SEEK_HOLE, 11 * M, 11 * M, nil},
		{unix.SEEK_HOLE, size, 0, syscall.ENXIO},
	} {
		got, err := unix.Seek(fd, s.off, s.whence)
		if !errors.Is(err, s.err) || (err == nil && got != s.want) {
			t.Errorf("lseek(%d, whence %d) = %d, %v; want %d, %v", s.off, s.whence, got, err, s.want, s.err)
		}
	}
}
