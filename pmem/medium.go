package pmem

import (
	"fmt"
	"unsafe"
)

// Mode says what backs a region.
type Mode uint8

const (
	// ModeVolatile: anonymous memory, tmpfs or ramfs. Nothing survives a
	// reboot; for tests and caches.
	ModeVolatile Mode = iota
	// ModeFile: a plain file mapped MAP_SHARED; durable once msync returns.
	ModeFile
	// ModeFSDAX: a file on a DAX file system mapped with
	// MAP_SHARED_VALIDATE|MAP_SYNC, so flushed stores are durable without
	// a system call.
	ModeFSDAX
	// ModeDevDAX: a device-DAX character device (/dev/daxX.Y).
	ModeDevDAX
)

func (m Mode) String() string {
	switch m {
	case ModeVolatile:
		return "volatile"
	case ModeFile:
		return "file"
	case ModeFSDAX:
		return "fsdax"
	case ModeDevDAX:
		return "devdax"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// IsPmem reports whether m is real persistent memory (DAX).
func (m Mode) IsPmem() bool { return m == ModeFSDAX || m == ModeDevDAX }

// Domain is the persistence domain: the point after which a store
// survives power loss.
type Domain uint8

const (
	// DomainNone: nothing survives power loss.
	DomainNone Domain = iota
	// DomainStorage: the block device behind the page cache, reached when
	// msync returns.
	DomainStorage
	// DomainMemoryController (ADR): a store is durable once its cache line
	// is flushed and fenced.
	DomainMemoryController
	// DomainCPUCache (eADR): a store is durable once globally visible;
	// the flushes we still issue are cheap no-ops for durability.
	DomainCPUCache
)

func (d Domain) String() string {
	switch d {
	case DomainNone:
		return "none (volatile)"
	case DomainStorage:
		return "storage (page cache + msync)"
	case DomainMemoryController:
		return "memory controller (ADR: flush+fence)"
	case DomainCPUCache:
		return "cpu cache (eADR)"
	}
	return fmt.Sprintf("Domain(%d)", uint8(d))
}

// MediumInfo describes a medium: what it is and how it persists.
type MediumInfo struct {
	Mode        Mode        `json:"mode"`
	Domain      Domain      `json:"domain"`
	Instruction Instruction `json:"instruction"`
	Path        string      `json:"path,omitempty"`
	// FileSystem names the file system a region file lives on (ext4,
	// xfs, tmpfs, ...), empty for devices and memory.
	FileSystem string `json:"file_system,omitempty"`
	// ReadOnly means the medium is mapped read-only (an offline check):
	// the region keeps what recovery would write in memory and nothing
	// reaches the medium, whatever its persistence domain.
	ReadOnly bool `json:"read_only,omitempty"`
}

func (i MediumInfo) String() string {
	p := i.Path
	if p == "" {
		p = "(memory)"
	}
	if i.FileSystem != "" {
		p += " (on " + i.FileSystem + ")"
	}
	if i.ReadOnly {
		return fmt.Sprintf("%s %s, mapped read-only: nothing is written to it", i.Mode, p)
	}
	return fmt.Sprintf("%s %s, persistence domain %s, flush with %s", i.Mode, p, i.Domain, i.Instruction)
}

// Medium is the memory a Region lives in and the way stores to it become
// durable. The real ones are file mappings (OpenFile) and plain memory
// (NewMemMedium); Tracker is the power-loss simulator.
type Medium interface {
	// Bytes is the whole medium. It never moves or changes length, so it
	// can be registered as an RDMA memory region.
	Bytes() []byte
	// Flush starts writing [off, off+n) back to the persistence domain.
	// Where write-back is synchronous (msync) Flush is the write-back and
	// returns its error; the caller owns that error.
	Flush(off, n int) error
	// Fence waits until every Flush this goroutine issued before it is
	// durable (a CPU fence orders only its own thread's flushes).
	Fence() error
	// Info says what the medium is.
	Info() MediumInfo
	// Close releases the medium. Bytes must not be used afterwards.
	Close() error
}

// FileOptions says how to open a region file (OpenFileMedium; Linux only).
type FileOptions struct {
	// Require refuses backings weaker than this.
	Require Requirement
	// Create creates a new regular file of Size bytes (refusing an
	// existing one) with all its blocks allocated, so that a full file
	// system fails the creation rather than a later store with SIGBUS. If
	// anything fails the file is removed again.
	Create bool
	// Size is the file size to create; ignored without Create.
	Size int64
	// ReadOnly opens and maps the file read-only (shared, so device DAX
	// accepts it): the region recovers and checks in memory and can write
	// nothing. fsck uses it to check a region without changing it.
	ReadOnly bool
	// SysfsRoot is where sysfs is mounted ("/sys" when empty); tests point
	// it elsewhere.
	SysfsRoot string
}

// StoreObserver is implemented by media that want to see every store the
// region makes (Tracker). Stored is called after the bytes changed.
type StoreObserver interface {
	Stored(off, n int)
}

// MemMedium is a volatile medium in ordinary memory.
type MemMedium struct {
	buf []byte
}

var _ Medium = (*MemMedium)(nil)

// NewMemMedium returns size bytes of zeroed volatile memory. size is
// rounded up to a multiple of 8.
func NewMemMedium(size int) *MemMedium {
	return &MemMedium{buf: alignedBytes(size)}
}

// NewMemMediumFrom returns volatile memory holding a copy of image, e.g.
// a crash image to recover.
func NewMemMediumFrom(image []byte) *MemMedium {
	m := NewMemMedium(len(image))
	copy(m.buf, image)
	m.buf = m.buf[:len(image)]
	return m
}

// alignedBytes allocates through []uint64 so the base is 8-byte aligned,
// which the region's atomic word stores need.
func alignedBytes(size int) []byte {
	if size <= 0 {
		return nil
	}
	words := make([]uint64, (size+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

// Bytes implements Medium.
func (m *MemMedium) Bytes() []byte { return m.buf }

// Flush implements Medium; volatile memory has nothing to flush.
func (m *MemMedium) Flush(off, n int) error { return nil }

// Fence implements Medium.
func (m *MemMedium) Fence() error { return nil }

// Info implements Medium.
func (m *MemMedium) Info() MediumInfo {
	return MediumInfo{Mode: ModeVolatile, Domain: DomainNone, Instruction: InstrNone}
}

// Close implements Medium.
func (m *MemMedium) Close() error { return nil }
