package pmem

import "unsafe"

// Implemented in cpu_amd64.s.
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func flushCLWB(addr unsafe.Pointer, lines, stride uintptr)
func flushCLFLUSHOPT(addr unsafe.Pointer, lines, stride uintptr)
func flushCLFLUSH(addr unsafe.Pointer, lines, stride uintptr)
func sfence()

// detectCPUFlush reads CPUID: leaf 1 EDX bit 19 (CLFSH) and EBX[15:8] (line
// size in 8-byte units), leaf 7 EBX bit 23 (CLFLUSHOPT) and bit 24 (CLWB).
// golang.org/x/sys/cpu does not expose these three flags, hence our own.
func detectCPUFlush() cpuFlushInfo {
	info := cpuFlushInfo{line: 64}
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 1 {
		return info
	}
	_, ebx1, _, edx1 := cpuid(1, 0)
	if sz := uintptr((ebx1>>8)&0xff) * 8; sz >= 32 && sz&(sz-1) == 0 {
		info.line = sz
	}
	var ebx7 uint32
	if maxLeaf >= 7 {
		_, ebx7, _, _ = cpuid(7, 0)
	}
	if ebx7&(1<<24) != 0 {
		info.available = append(info.available, InstrCLWB)
	}
	if ebx7&(1<<23) != 0 {
		info.available = append(info.available, InstrCLFLUSHOPT)
	}
	if edx1&(1<<19) != 0 {
		info.available = append(info.available, InstrCLFLUSH)
	}
	return info
}

func flushLinesAsm(i Instruction, base unsafe.Pointer, lines, stride uintptr) {
	switch i {
	case InstrCLWB:
		flushCLWB(base, lines, stride)
	case InstrCLFLUSHOPT:
		flushCLFLUSHOPT(base, lines, stride)
	case InstrCLFLUSH:
		flushCLFLUSH(base, lines, stride)
	}
}

// sfenceAsm orders the flushes before it. CLFLUSH is ordered with respect
// to stores already, but an SFENCE costs little and keeps one rule for all.
func sfenceAsm() { sfence() }
