//go:build !linux

package pmem

import "fmt"

// FileMedium is unavailable off Linux.
type FileMedium struct{ MemMedium }

// OpenFileMedium is unavailable off Linux: mapping files with MAP_SYNC is
// Linux-only.
func OpenFileMedium(path string, opts FileOptions) (*FileMedium, error) {
	return nil, fmt.Errorf("%w: file-backed regions need Linux", ErrUnsupported)
}

// NewAnonMedium returns volatile memory.
func NewAnonMedium(size int) (*FileMedium, error) {
	return &FileMedium{MemMedium{buf: alignedBytes(size)}}, nil
}
