//go:build !amd64

package pmem

import "unsafe"

// Portable fallback: no cache-flush instruction is wired up on this
// architecture, so DAX regions are persisted with msync (which the kernel
// implements with the right cache maintenance for DAX mappings).
func detectCPUFlush() cpuFlushInfo { return cpuFlushInfo{line: 64} }

func flushLinesAsm(Instruction, unsafe.Pointer, uintptr, uintptr) {}

func fence(Instruction) {}
