package alloc

import "math/bits"

// Scan is the baseline index: a plain bitmap searched bit by bit from the
// hint (skipping only words that are entirely used). Its cost grows with
// the distance to the first fitting run; on a fragmented 2^28-entry map
// that is the whole map. It answers every search exactly as Tree does.
type Scan struct {
	w    []uint64
	n    uint64
	used uint64
}

// NewScan returns a scan index of n entries, all free.
func NewScan(n uint64) *Scan { return &Scan{w: make([]uint64, (n+63)/64), n: n} }

// Load replaces the content with a persistent bitmap (bits past Len ignored).
func (b *Scan) Load(words []uint64) {
	copy(b.w, words)
	if rem := b.n % 64; rem != 0 && len(b.w) > 0 {
		b.w[len(b.w)-1] &= 1<<rem - 1
	}
	b.used = 0
	for _, w := range b.w {
		b.used += uint64(bits.OnesCount64(w))
	}
}

// Len is the number of entries.
func (b *Scan) Len() uint64 { return b.n }

// Used is the number of used entries.
func (b *Scan) Used() uint64 { return b.used }

// IsUsed reports whether entry i is used.
func (b *Scan) IsUsed(i uint64) bool { return b.w[i/64]&(1<<(i%64)) != 0 }

// Set marks [start, start+n) used.
func (b *Scan) Set(start, n uint64) {
	for i := start; i < start+n; i++ {
		if !b.IsUsed(i) {
			b.used++
		}
		b.w[i/64] |= 1 << (i % 64)
	}
}

// Clear marks [start, start+n) free.
func (b *Scan) Clear(start, n uint64) {
	for i := start; i < start+n; i++ {
		if b.IsUsed(i) {
			b.used--
		}
		b.w[i/64] &^= 1 << (i % 64)
	}
}

// Alloc finds a run like Find and marks it used.
func (b *Scan) Alloc(n, hint uint64) (uint64, bool) {
	s, ok := b.Find(n, hint)
	if ok {
		b.Set(s, n)
	}
	return s, ok
}

// Find finds n consecutive free entries, the leftmost starting at or after
// hint, else the leftmost starting before it.
func (b *Scan) Find(n, hint uint64) (uint64, bool) {
	if n == 0 || n > b.n {
		return 0, false
	}
	if hint >= b.n {
		hint = 0
	}
	if s, ok := b.findIn(n, hint, b.n); ok {
		return s, true
	}
	return b.findIn(n, 0, min(hint+n-1, b.n))
}

// findIn finds a run inside [from, to).
func (b *Scan) findIn(n, from, to uint64) (uint64, bool) {
	run, start := uint64(0), from
	for i := from; i < to; {
		if i%64 == 0 && b.w[i/64] == ^uint64(0) {
			run = 0
			i += 64
			start = i
			continue
		}
		if b.IsUsed(i) {
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
