//go:build race

package soft

import "golang.org/x/sys/unix"

// With the race detector, x/sys's Writev and Readv, which tell it that a
// write to a descriptor happens before the read that returns the data:
// a round trip over a link then orders the two sides' memory accesses
// as it does in fact. (They allocate beyond eight buffers, which the
// build without the detector avoids: sys_norace.go.)

func writev(fd int, bufs [][]byte, _ []unix.Iovec, _ []byte) (int, error) {
	return unix.Writev(fd, bufs)
}

func readv(fd int, bufs [][]byte, _ []unix.Iovec) (int, error) { return unix.Readv(fd, bufs) }
