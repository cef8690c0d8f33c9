//go:build !race

package soft

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// writev writes bufs to fd without blocking, through the caller's iovec
// scratch (x/sys's Writev allocates for more than eight buffers).
var smallScratch [4096]byte

func writev(fd int, bufs [][]byte, iov []unix.Iovec) (int, error) {
	total := 0
	for _, b := range bufs {
		total += len(b)
	}
	if total <= len(smallScratch) && len(bufs) > 1 {
		n := 0
		for _, b := range bufs {
			n += copy(smallScratch[n:], b)
		}
		return unix.Write(fd, smallScratch[:n])
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

func fillIov(bufs [][]byte, iov []unix.Iovec) []unix.Iovec {
	iov = iov[:0]
	for _, b := range bufs {
		if len(b) > 0 {
			iov = append(iov, unix.Iovec{Base: &b[0]})
			iov[len(iov)-1].SetLen(len(b))
		}
	}
	return iov
}
