package rdma

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// AllocBuffer returns n bytes of zeroed, page-aligned memory outside the Go
// heap, suitable for RegMR with every provider. Release it with FreeBuffer
// after deregistering it.
func AllocBuffer(n int) ([]byte, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: buffer size %d", ErrInvalid, n)
	}
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("rdma: allocate %d bytes: %w", n, err)
	}
	return b, nil
}

// FreeBuffer releases memory from AllocBuffer.
func FreeBuffer(b []byte) error {
	if b == nil {
		return nil
	}
	return unix.Munmap(b)
}
