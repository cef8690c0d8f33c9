//go:build !amd64

package pmem

import "unsafe"

// No cache-flush instruction is wired up on this architecture. File-system
// DAX regions are persisted with msync (the kernel does the cache
// maintenance for DAX mappings on fsync); device DAX, which has no msync,
// is refused (see mediumPersistence).
func detectCPUFlush() cpuFlushInfo { return cpuFlushInfo{line: 64} }

func flushLinesAsm(Instruction, unsafe.Pointer, uintptr, uintptr) {}

func sfenceAsm() {}
