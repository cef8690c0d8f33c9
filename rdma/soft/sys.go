package soft

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// fillIov points iov (scratch, reused) at the non-empty buffers of bufs.
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

// vectored makes one non-blocking readv or writev (trap) of fd over bufs
// through the caller's iovec scratch (x/sys's Readv and Writev allocate
// for more than eight buffers).
func vectored(trap uintptr, fd int, bufs [][]byte, iov []unix.Iovec) (int, error) {
	iov = fillIov(bufs, iov)
	if len(iov) == 0 {
		return 0, nil
	}
	n, _, e := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(len(iov)))
	clear(iov)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
