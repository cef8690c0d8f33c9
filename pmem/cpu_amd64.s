#include "textflag.h"

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// Each flush routine writes back (CLWB) or evicts (CLFLUSHOPT, CLFLUSH)
// lines cache lines of stride bytes starting at addr. The caller passes an
// addr aligned down to the stride and lines >= 1.

// func flushCLWB(addr unsafe.Pointer, lines, stride uintptr)
TEXT ·flushCLWB(SB), NOSPLIT, $0-24
	MOVQ addr+0(FP), AX
	MOVQ lines+8(FP), CX
	MOVQ stride+16(FP), DX
clwbloop:
	CLWB (AX)
	ADDQ DX, AX
	DECQ CX
	JNZ  clwbloop
	RET

// func flushCLFLUSHOPT(addr unsafe.Pointer, lines, stride uintptr)
TEXT ·flushCLFLUSHOPT(SB), NOSPLIT, $0-24
	MOVQ addr+0(FP), AX
	MOVQ lines+8(FP), CX
	MOVQ stride+16(FP), DX
optloop:
	CLFLUSHOPT (AX)
	ADDQ DX, AX
	DECQ CX
	JNZ  optloop
	RET

// func flushCLFLUSH(addr unsafe.Pointer, lines, stride uintptr)
TEXT ·flushCLFLUSH(SB), NOSPLIT, $0-24
	MOVQ addr+0(FP), AX
	MOVQ lines+8(FP), CX
	MOVQ stride+16(FP), DX
clfloop:
	CLFLUSH (AX)
	ADDQ DX, AX
	DECQ CX
	JNZ  clfloop
	RET

// func sfence()
TEXT ·sfence(SB), NOSPLIT, $0-0
	SFENCE
	RET
