package dataplane

import (
	"math/bits"
	"time"

	"github.com/octofs/octofs/pmem"
)

// pool is one of a partition's data pools (a plog pool: one extent of
// region blocks) with its sub-allocation, derived at replay from the
// extent maps: a block is free, used by a chunk, or quarantined.
type pool struct {
	ext pmem.Extent
	// free has bit i set when block ext.Start+i is free to hand out.
	free  []uint64
	nfree uint64
	// quarantined counts blocks freed whose quarantine has not ended.
	quarantined uint64
}

func newPool(ext pmem.Extent) *pool {
	p := &pool{ext: ext, free: make([]uint64, (ext.Count+63)/64), nfree: ext.Count}
	for i := uint64(0); i < ext.Count; i++ {
		p.free[i/64] |= 1 << (i % 64)
	}
	return p
}

func (p *pool) contains(block uint64) bool { return block >= p.ext.Start && block < p.ext.End() }

// isFree reports whether block (inside the pool) is free.
func (p *pool) isFree(block uint64) bool {
	i := block - p.ext.Start
	return p.free[i/64]&(1<<(i%64)) != 0
}

// take marks [block, block+n) used; they must be free (replay checks with
// isFree first).
func (p *pool) take(block, n uint64) {
	for i := block - p.ext.Start; i < block-p.ext.Start+n; i++ {
		p.free[i/64] &^= 1 << (i % 64)
	}
	p.nfree -= n
}

// give marks [block, block+n) free.
func (p *pool) give(block, n uint64) {
	for i := block - p.ext.Start; i < block-p.ext.Start+n; i++ {
		p.free[i/64] |= 1 << (i % 64)
	}
	p.nfree += n
}

// freeTail counts the free blocks at the end of the pool.
func (p *pool) freeTail() uint64 {
	var n uint64
	for n < p.ext.Count && p.isFree(p.ext.End()-1-n) {
		n++
	}
	return n
}

// shrink drops the pool's blocks past its first keep, which must be free.
func (p *pool) shrink(keep uint64) {
	p.nfree -= p.ext.Count - keep
	p.ext.Count = keep
	p.free = p.free[:(keep+63)/64]
	if r := keep % 64; r != 0 {
		p.free[len(p.free)-1] &= 1<<r - 1
	}
}

// alloc takes up to n blocks as few runs as it can find, first fit from
// the pool's start, and returns them.
func (p *pool) alloc(n uint64) []pmem.Extent {
	var out []pmem.Extent
	for w := 0; w < len(p.free) && n > 0; w++ {
		for p.free[w] != 0 && n > 0 {
			b := uint64(bits.TrailingZeros64(p.free[w]))
			start := uint64(w)*64 + b
			// Extend the run while blocks stay free.
			end := start
			for end < p.ext.Count && end-start < n && p.free[end/64]&(1<<(end%64)) != 0 {
				end++
			}
			ext := pmem.Extent{Start: p.ext.Start + start, Count: end - start}
			p.take(ext.Start, ext.Count)
			out = append(out, ext)
			n -= ext.Count
			w = int(end / 64)
			if w >= len(p.free) {
				break
			}
		}
	}
	return out
}

// quarantine is a freed extent that may not be reused before until.
type quarantine struct {
	ext   pmem.Extent
	until time.Time
}
