package pmem

import (
	"fmt"
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
	// and DAX where the CPU offers no flush instruction we can use).
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
// best first. It is empty on platforms without them (then DAX regions are
// persisted with msync).
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
	flushRange(i, unsafe.Pointer(unsafe.SliceData(b)), uintptr(len(b)))
	fence(i)
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

// flushRange issues instruction i for every line that overlaps
// [p, p+n). n must be > 0.
func flushRange(i Instruction, p unsafe.Pointer, n uintptr) {
	line := cpuFlush.line
	start := uintptr(p) &^ (line - 1)
	end := uintptr(p) + n
	lines := (end - start + line - 1) / line
	// The mapping is not Go heap memory (or is pinned by the caller), so
	// re-deriving the pointer from an integer is safe here.
	base := unsafe.Add(p, -int(uintptr(p)-start))
	flushLinesAsm(i, base, lines, line)
}
