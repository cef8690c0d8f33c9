//go:build race

package soft

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// With the race detector, every write to a descriptor happens before
// every later read from one (ioSync), as x/sys's Writev and Readv say; a
// round trip over a link then orders the two sides' memory accesses as
// it does in fact. Every read and write of the package goes through here,
// so that they share the one sync point (x/sys's is its own). Unlike
// x/sys, writev reports its reads of the buffers before it publishes, not
// after the system call: a READ response sent from a region happens
// before a later WRITE into the same bytes that arrived on another link
// because of it. Without that, the detector saw a race between a READ's
// response and a WRITE that the application had ordered after it (one
// client's read, then another's write).

var ioSync byte

func writev(fd int, bufs [][]byte, iov []unix.Iovec, _ []byte) (int, error) {
	for _, b := range bufs {
		if len(b) > 0 {
			runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
		}
	}
	runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync))
	return vectored(unix.SYS_WRITEV, fd, bufs, iov)
}

func readv(fd int, bufs [][]byte, iov []unix.Iovec) (int, error) {
	n, err := vectored(unix.SYS_READV, fd, bufs, iov)
	if err != nil {
		return 0, err
	}
	runtime.RaceAcquire(unsafe.Pointer(&ioSync))
	left := n
	for _, b := range bufs {
		if left == 0 {
			break
		}
		k := min(left, len(b))
		if k > 0 {
			runtime.RaceWriteRange(unsafe.Pointer(&b[0]), k)
		}
		left -= k
	}
	return n, nil
}

// read is readv of one buffer, so that every read acquires ioSync.
func read(fd int, b []byte) (int, error) {
	var iov [1]unix.Iovec
	return readv(fd, [][]byte{b}, iov[:])
}
