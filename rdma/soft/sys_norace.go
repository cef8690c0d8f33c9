//go:build !race

package soft

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// writev writes bufs to fd without blocking, through the caller's iovec
// scratch (x/sys's Writev allocates for more than eight buffers). A batch
// of small frames is copied into the caller's small scratch and written
// with write(2), which costs the kernel less than gathering it.
func writev(fd int, bufs [][]byte, iov []unix.Iovec, small []byte) (int, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if len(bufs) > 1 && total <= len(small) {
		n := 0
		for _, b := range bufs {
			n += copy(small[n:], b)
		}
		return unix.Write(fd, small[:n])
	}
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

// readv reads from fd into bufs without blocking, like writev.
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
	return int(n), nil
}

// read is one non-blocking read(2) from fd into b.
func read(fd int, b []byte) (int, error) { return unix.Read(fd, b) }
