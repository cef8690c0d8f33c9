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
// it does in fact. Unlike x/sys, writev reports its reads of the buffers
// before it publishes, not after the system call: a READ response sent
// from a region happens before a later WRITE into the same bytes that
// arrived on another link because of it. Without that, the detector saw
// a race between a READ's response and a WRITE that the application had
// ordered after it (one client's read, then another's write).

var ioSync byte

func writev(fd int, bufs [][]byte, iov []unix.Iovec, _ []byte) (int, error) {
	for _, b := range bufs {
		if len(b) > 0 {
			runtime.RaceReadRange(unsafe.Pointer(&b[0]), len(b))
		}
	}
	runtime.RaceReleaseMerge(unsafe.Pointer(&ioSync))
	iov = fillIov(bufs, iov)
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	clear(iov)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

func readv(fd int, bufs [][]byte, iov []unix.Iovec) (int, error) {
	iov = fillIov(bufs, iov)
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.Syscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	clear(iov)
	if e != 0 {
		return 0, e
	}
	runtime.RaceAcquire(unsafe.Pointer(&ioSync))
	left := int(n)
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
	return int(n), nil
}

// read is readv of one buffer, so that every read acquires ioSync.
func read(fd int, b []byte) (int, error) {
	var iov [1]unix.Iovec
	return readv(fd, [][]byte{b}, iov[:])
}
