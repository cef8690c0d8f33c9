//go:build !race

package soft

import "golang.org/x/sys/unix"

// writev writes bufs to fd without blocking. A batch of small frames is
// copied into the caller's small scratch and written with write(2), which
// costs the kernel less than gathering it.
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
	return vectored(unix.SYS_WRITEV, fd, bufs, iov)
}

// readv reads from fd into bufs without blocking, like writev.
func readv(fd int, bufs [][]byte, iov []unix.Iovec) (int, error) {
	return vectored(unix.SYS_READV, fd, bufs, iov)
}

// read is one non-blocking read(2) from fd into b.
func read(fd int, b []byte) (int, error) { return unix.Read(fd, b) }
