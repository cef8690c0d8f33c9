package pmem

import (
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// Instruction is how stores to a region are made durable.
type Instruction uint8

const (
	// InstrNone: nothing makes stores durable (volatile memory).
	InstrNone Instruction = iota
	// InstrCLWB writes a cache line back and keeps it cached (best).
	InstrCLWB
	// InstrCLFLUSHOPT evicts a cache line; flushes of different lines overlap.
	InstrCLFLUSHOPT
	// InstrCLFLUSH evicts a cache line; flushes are serialised (slowest).
	InstrCLFLUSH
	// InstrMsync asks the kernel to write the page range back (plain files,
	// and file-system DAX where the CPU offers no flush instruction we can use).
	InstrMsync
)

func (i Instruction) String() string {
	switch i {
	case InstrNone:
		return "none"
	case InstrCLWB:
		return "clwb+sfence"
	case InstrCLFLUSHOPT:
		return "clflushopt+sfence"
	case InstrCLFLUSH:
		return "clflush+sfence"
	case InstrMsync:
		return "msync"
	}
	return fmt.Sprintf("Instruction(%d)", uint8(i))
}

// IsCacheFlush reports whether i is a CPU cache-line flush instruction.
func (i Instruction) IsCacheFlush() bool {
	return i == InstrCLWB || i == InstrCLFLUSHOPT || i == InstrCLFLUSH
}

// CPUInstructions lists the cache-flush instructions this CPU supports,
// best first. It is empty on platforms without them (then file-system DAX
// regions are persisted with msync and device DAX is refused).
func CPUInstructions() []Instruction {
	return append([]Instruction(nil), cpuFlush.available...)
}

// BestInstruction is the instruction DAX regions use on this machine:
// CLWB, else CLFLUSHOPT, else CLFLUSH, else msync.
func BestInstruction() Instruction {
	if len(cpuFlush.available) == 0 {
		return InstrMsync
	}
	return cpuFlush.available[0]
}

// CacheLineSize is the flush stride: the CLFLUSH line size CPUID reports,
// 64 when it reports none.
func CacheLineSize() int { return int(cpuFlush.line) }

// FlushLines flushes the cache lines covering b with instruction i and
// fences, so b is durable in the platform's persistence domain when it
// returns. It exists for benchmarks and tools that must pick the
// instruction; regions choose theirs at open. i must be one of
// CPUInstructions.
func FlushLines(i Instruction, b []byte) error {
	if !i.IsCacheFlush() || !cpuFlush.has(i) {
		return fmt.Errorf("%w: %v is not available on this CPU", ErrUnsupported, i)
	}
	if len(b) == 0 {
		return nil
	}
	flushRange(cpu, i, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
	cpu.sfence()
	return nil
}

// cpuFlushInfo is what start-up detection found. It is computed once at
// package initialisation and never written afterwards.
type cpuFlushInfo struct {
	available []Instruction
	line      uintptr
}

func (c cpuFlushInfo) has(i Instruction) bool {
	for _, a := range c.available {
		if a == i {
			return true
		}
	}
	return false
}

var cpuFlush = detectCPUFlush()

// hardware is what the flush code drives: in production the CPU's
// cache-flush and fence instructions and the msync system call (cpu), in
// tests the power-loss simulator (Tracker). Everything above it — which
// lines and pages are flushed, when a region fences — is the code nodes
// run, so the crash tests exercise it and `make mutate` can remove it.
type hardware interface {
	// flushLines issues instruction i for lines cache lines of stride
	// bytes starting at base (aligned to the stride).
	flushLines(i Instruction, base unsafe.Pointer, lines, stride uintptr)
	// sfence orders this thread's earlier flushes before what follows.
	sfence()
	// msync writes b (page-aligned start) back to the file and waits.
	msync(b []byte) error
}

// cpuHardware is the real machine.
type cpuHardware struct{}

var cpu hardware = cpuHardware{}

func (cpuHardware) flushLines(i Instruction, base unsafe.Pointer, lines, stride uintptr) {
	flushLinesAsm(i, base, lines, stride)
}

func (cpuHardware) sfence() { sfenceAsm() }

func (cpuHardware) msync(b []byte) error { return msyncSys(b) }

// flushRange issues instruction i for every line that overlaps
// [p, p+n). n must be > 0.
func flushRange(h hardware, i Instruction, p unsafe.Pointer, n uintptr) {
	line := cpuFlush.line
	start := uintptr(p) &^ (line - 1)
	end := uintptr(p) + n
	lines := (end - start + line - 1) / line
	// The mapping is not Go heap memory (or is pinned by the caller), so
	// re-deriving the pointer from an integer is safe here.
	base := unsafe.Add(p, -int(uintptr(p)-start))
	h.flushLines(i, base, lines, line)
}

// mapping is the persistence logic every real medium shares: a mapped
// byte range made durable with the instruction its MediumInfo names,
// through a hardware back-end.
type mapping struct {
	buf  []byte
	info MediumInfo
	hw   hardware
	// msyncMu serialises msync calls. The kernel reports a write-back
	// error once per open file (errseq), to whichever msync checks first,
	// not necessarily the caller whose pages failed; with one msync at a
	// time every error is seen by the call that follows it, which fails
	// the region before the next caller can believe its range durable
	// (Region.fail, checked at the end of every commit).
	msyncMu sync.Mutex
}

var pageSize = os.Getpagesize()

// Flush implements Medium. CPU flushes are issued and retire at the next
// Fence of the same goroutine; msync is synchronous, so its durability
// point and its error are the call itself.
func (m *mapping) Flush(off, n int) error {
	if n <= 0 {
		return nil
	}
	if off < 0 || off+n > len(m.buf) {
		return fmt.Errorf("%w: flush of [%d,%d) outside the %d-byte medium", ErrBadAddress, off, off+n, len(m.buf))
	}
	switch i := m.info.Instruction; {
	case i.IsCacheFlush():
		flushRange(m.hw, i, unsafe.Pointer(&m.buf[off]), uintptr(n))
	case i == InstrMsync:
		start := off &^ (pageSize - 1)
		m.msyncMu.Lock()
		err := m.hw.msync(m.buf[start : off+n])
		m.msyncMu.Unlock()
		if err != nil {
			return fmt.Errorf("%w: msync of %s bytes [%d,%d): %w; check the storage device (dmesg), then run octoctl fsck", ErrPersist, m.info.Path, start, off+n, err)
		}
	}
	return nil
}

// Fence implements Medium.
func (m *mapping) Fence() error {
	if m.info.Instruction.IsCacheFlush() {
		m.hw.sfence()
	}
	return nil
}

// Bytes implements Medium.
func (m *mapping) Bytes() []byte { return m.buf }

// Info implements Medium.
func (m *mapping) Info() MediumInfo { return m.info }
