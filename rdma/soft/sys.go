package soft

import "golang.org/x/sys/unix"

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
