package pmem

import "math/bits"

// bitset is a volatile bitmap: the allocators' in-memory index of which
// records and blocks are taken (allocated or reserved by a transaction
// in flight). It is rebuilt from the persistent bitmaps on open.
type bitset struct {
	w []uint64
	n uint64
}

func newBitset(n uint64) bitset { return bitset{w: make([]uint64, (n+63)/64), n: n} }

func (b *bitset) get(i uint64) bool { return b.w[i/64]&(1<<(i%64)) != 0 }
func (b *bitset) set(i uint64)      { b.w[i/64] |= 1 << (i % 64) }
func (b *bitset) clear(i uint64)    { b.w[i/64] &^= 1 << (i % 64) }

func (b *bitset) setRange(start, n uint64) {
	for i := start; i < start+n; i++ {
		b.set(i)
	}
}

func (b *bitset) clearRange(start, n uint64) {
	for i := start; i < start+n; i++ {
		b.clear(i)
	}
}

func (b *bitset) count() uint64 {
	var c int
	for _, w := range b.w {
		c += bits.OnesCount64(w)
	}
	return uint64(c)
}

// findRun finds n consecutive clear bits, starting the search at hint and
// wrapping once. It skips full words, so a mostly full map is scanned
// quickly.
func (b *bitset) findRun(n, hint uint64) (uint64, bool) {
	if n == 0 || n > b.n {
		return 0, false
	}
	if hint >= b.n {
		hint = 0
	}
	if s, ok := b.findRunIn(n, hint, b.n); ok {
		return s, true
	}
	return b.findRunIn(n, 0, min(hint+n, b.n))
}

func (b *bitset) findRunIn(n, from, to uint64) (uint64, bool) {
	run, start := uint64(0), from
	for i := from; i < to; {
		if i%64 == 0 && b.w[i/64] == ^uint64(0) {
			run = 0
			i += 64
			start = i
			continue
		}
		if b.get(i) {
			run = 0
			start = i + 1
		} else {
			run++
			if run == n {
				return start, true
			}
		}
		i++
	}
	return 0, false
}
