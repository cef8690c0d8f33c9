package pmem

import "fmt"

// NewDRAMMedium maps size bytes of anonymous memory that regions persist
// with CPU instruction i as if it were persistent memory: the flushes and
// fences run and cost what they cost on this CPU, but nothing survives a
// power loss. Benchmarks use it to measure the CPU side of the commit path
// on machines without persistent memory.
func NewDRAMMedium(size int, i Instruction) (*FileMedium, error) {
	if !i.IsCacheFlush() || !cpuFlush.has(i) {
		return nil, fmt.Errorf("%w: %v is not a cache-flush instruction of this CPU", ErrUnsupported, i)
	}
	m, err := NewAnonMedium(size)
	if err != nil {
		return nil, err
	}
	m.info = MediumInfo{Mode: ModeVolatile, Domain: DomainNone, Instruction: i, Path: "(DRAM)"}
	return m, nil
}
