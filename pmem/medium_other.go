//go:build !linux

package pmem

import "fmt"

// FileMedium is unavailable off Linux.
type FileMedium struct{ mapping }

// OpenFileMedium is unavailable off Linux: mapping files with MAP_SYNC is
// Linux-only.
func OpenFileMedium(path string, opts FileOptions) (*FileMedium, error) {
	return nil, fmt.Errorf("%w: file-backed regions need Linux", ErrUnsupported)
}

// NewAnonMedium returns volatile memory.
func NewAnonMedium(size int) (*FileMedium, error) {
	return &FileMedium{mapping{buf: alignedBytes(size), hw: cpu, info: MediumInfo{Mode: ModeVolatile, Domain: DomainNone, Instruction: InstrNone}}}, nil
}

// Close implements Medium.
func (m *FileMedium) Close() error { return nil }

func (m *FileMedium) sync() error { return nil }

func msyncSys([]byte) error {
	return fmt.Errorf("%w: msync needs Linux", ErrUnsupported)
}

func removeStaleCreate(string) error { return nil }

func linkNew(string, string) error {
	return fmt.Errorf("%w: file-backed regions need Linux", ErrUnsupported)
}
