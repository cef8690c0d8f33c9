package alloc

import (
	"fmt"
	"math/bits"
)

// chunkWords is how many bitmap words one leaf of the summary tree
// covers: 1024 entries. Smaller leaves make updates cheaper and the tree
// bigger; at 2^28 entries (1 TiB of 4 KiB blocks) the tree has 2^19 nodes,
// 16 MiB beside the 32 MiB bitmap.
const (
	chunkWords = 16
	chunkBits  = chunkWords * 64
)

// summary describes the free entries of one node's range.
type summary struct {
	n    uint64 // entries in the range
	pre  uint64 // free entries at its start
	suf  uint64 // free entries at its end
	best uint64 // longest free run inside it
}

func (s summary) full() bool { return s.pre == s.n }

// join summarises two adjacent ranges, l before r.
func join(l, r summary) summary {
	out := summary{n: l.n + r.n, pre: l.pre, suf: r.suf}
	if l.full() {
		out.pre = l.n + r.pre
	}
	if r.full() {
		out.suf = r.n + l.suf
	}
	out.best = max(l.best, r.best, l.suf+r.pre)
	return out
}

// Tree is a bitmap of Len entries with summary levels (see the package
// documentation).
type Tree struct {
	words  []uint64
	n      uint64
	used   uint64
	leaves uint64    // a power of two >= the number of chunks
	sum    []summary // heap order: node 1 is the root, leaves at [leaves, 2*leaves)
}

// NewTree returns an index of n entries, all free.
func NewTree(n uint64) *Tree {
	chunks := max(1, (n+chunkBits-1)/chunkBits)
	leaves := uint64(1)
	for leaves < chunks {
		leaves *= 2
	}
	t := &Tree{words: make([]uint64, (n+63)/64), n: n, leaves: leaves, sum: make([]summary, 2*leaves)}
	t.markTail()
	t.rebuild()
	return t
}

// markTail marks the bits past n in the last word used, so that no run
// crosses the end.
func (t *Tree) markTail() {
	if rem := t.n % 64; rem != 0 {
		t.words[len(t.words)-1] |= ^uint64(0) << rem
	}
}

func (t *Tree) tailMask(i int) uint64 {
	if rem := t.n % 64; rem != 0 && i == len(t.words)-1 {
		return 1<<rem - 1
	}
	return ^uint64(0)
}

// Load replaces the index's content with a persistent bitmap: words holds
// ceil(Len/64) words, bit i of word w standing for entry 64w+i. Bits past
// Len are ignored.
func (t *Tree) Load(words []uint64) {
	if len(words) != len(t.words) {
		panic(fmt.Sprintf("alloc: Load of %d words into an index of %d", len(words), len(t.words)))
	}
	copy(t.words, words)
	t.markTail()
	t.rebuild()
}

// rebuild recomputes every summary and the used count.
func (t *Tree) rebuild() {
	t.used = 0
	for i, w := range t.words {
		t.used += uint64(bits.OnesCount64(w & t.tailMask(i)))
	}
	for c := range t.leaves {
		t.sum[t.leaves+c] = t.leafSummary(c)
	}
	for v := t.leaves - 1; v >= 1; v-- {
		t.sum[v] = join(t.sum[2*v], t.sum[2*v+1])
	}
}

// Len is the number of entries.
func (t *Tree) Len() uint64 { return t.n }

// Used is the number of used entries.
func (t *Tree) Used() uint64 { return t.used }

// Longest is the longest run of free entries.
func (t *Tree) Longest() uint64 { return t.sum[1].best }

// IsUsed reports whether entry i is used.
func (t *Tree) IsUsed(i uint64) bool { return t.words[i/64]&(1<<(i%64)) != 0 }

// Word returns bitmap word i as the persistent bitmap holds it (bits past
// Len clear).
func (t *Tree) Word(i int) uint64 { return t.words[i] & t.tailMask(i) }

// Words is the number of bitmap words.
func (t *Tree) Words() int { return len(t.words) }

// Find returns the leftmost start s >= hint such that entries [s, s+count)
// are free, else the leftmost such s below hint; ok is false when there is
// no run of count free entries at all.
func (t *Tree) Find(count, hint uint64) (start uint64, ok bool) {
	if count == 0 || count > t.sum[1].best {
		return 0, false
	}
	if hint >= t.n {
		hint = 0
	}
	if count <= 4*64 && t.freeAt(hint, count) {
		// The common case (allocating after the last allocation): the
		// leftmost start at or after hint is hint itself.
		return hint, true
	}
	if s, ok, _ := t.search(1, 0, count, hint, 0); ok {
		return s, true
	}
	if hint == 0 {
		return 0, false
	}
	s, ok, _ := t.search(1, 0, count, 0, 0)
	return s, ok
}

// freeAt reports whether entries [s, s+count) are all free.
func (t *Tree) freeAt(s, count uint64) bool {
	end := s + count
	if end > t.n || end < s {
		return false
	}
	for wi := s / 64; wi*64 < end; wi++ {
		lo := max(s, wi*64) - wi*64
		hi := min(end, wi*64+64) - wi*64
		if t.words[wi]&(^uint64(0)>>(64-(hi-lo))<<lo) != 0 {
			return false
		}
	}
	return true
}

// Alloc finds a run like Find and marks it used.
func (t *Tree) Alloc(count, hint uint64) (uint64, bool) {
	s, ok := t.Find(count, hint)
	if ok {
		t.Set(s, count)
	}
	return s, ok
}

// search looks in node v, covering entries [lo, lo+sum[v].n), for the
// leftmost start >= hint of count free entries, given that the carry
// entries just before lo are free (and >= hint). If there is none it
// returns the free run at the node's end that a search to the right can
// continue (carry included when the whole node is free).
func (t *Tree) search(v, lo, count, hint, carry uint64) (start uint64, ok bool, carryOut uint64) {
	s := t.sum[v]
	if lo+s.n <= hint {
		return 0, false, 0
	}
	if lo >= hint {
		if carry+s.pre >= count {
			return lo - carry, true, 0
		}
		if s.best < count {
			if s.full() {
				return 0, false, carry + s.n
			}
			return 0, false, s.suf
		}
	}
	if v >= t.leaves {
		return t.scanLeaf(v-t.leaves, count, hint, carry)
	}
	start, ok, carry = t.search(2*v, lo, count, hint, carry)
	if ok {
		return start, true, 0
	}
	return t.search(2*v+1, lo+t.sum[2*v].n, count, hint, carry)
}

// scanLeaf searches chunk c word by word, entries below hint counting as
// used.
func (t *Tree) scanLeaf(c, count, hint, carry uint64) (uint64, bool, uint64) {
	first := c * chunkWords
	last := min(first+chunkWords, uint64(len(t.words)))
	for wi := first; wi < last; wi++ {
		base := wi * 64
		used := t.words[wi]
		switch {
		case base+64 <= hint:
			carry = 0
			continue
		case base < hint:
			used |= 1<<(hint-base) - 1
		}
		if lead := uint64(bits.TrailingZeros64(used)); carry+lead >= count {
			return base - carry, true, 0
		}
		if count <= 64 {
			if m := runStarts(^used, count); m != 0 {
				return base + uint64(bits.TrailingZeros64(m)), true, 0
			}
		}
		if used == 0 {
			carry += 64
		} else {
			carry = uint64(bits.LeadingZeros64(used))
		}
	}
	return 0, false, carry
}

// runStarts returns the positions p of free (a word of 1 = free bits) at
// which n consecutive free bits start inside the word (1 <= n <= 64).
func runStarts(free, n uint64) uint64 {
	for k := uint64(1); k < n; {
		s := min(k, n-k)
		free &= free >> s
		k += s
	}
	return free
}

// longestRun is the longest run of ones in free: each step shortens every
// run by one, so it costs one step per bit of the longest run.
func longestRun(free uint64) uint64 {
	n := uint64(0)
	for free != 0 {
		free &= free >> 1
		n++
	}
	return n
}

// leafSummary computes chunk c's summary from the words.
func (t *Tree) leafSummary(c uint64) summary {
	first := c * chunkWords
	if first >= uint64(len(t.words)) {
		return summary{} // padding past the last chunk: empty
	}
	last := min(first+chunkWords, uint64(len(t.words)))
	s := summary{n: min(t.n, (c+1)*chunkBits) - c*chunkBits}
	var cur uint64
	allFree := true
	for wi := first; wi < last; wi++ {
		used := t.words[wi]
		if used == 0 {
			cur += 64
			continue
		}
		lead := uint64(bits.TrailingZeros64(used))
		if allFree {
			s.pre = cur + lead
			allFree = false
		}
		s.best = max(s.best, cur+lead)
		if free := 64 - uint64(bits.OnesCount64(used)); free > s.best {
			s.best = max(s.best, longestRun(^used))
		}
		cur = uint64(bits.LeadingZeros64(used))
	}
	if allFree {
		// Only the last chunk can hold tail bits, and they are used, so
		// an all-zero chunk is all real entries.
		s.pre, s.suf, s.best = s.n, s.n, s.n
		return s
	}
	s.suf = cur
	s.best = max(s.best, cur)
	return s
}

// Set marks entries [start, start+count) used.
func (t *Tree) Set(start, count uint64) { t.update(start, count, true) }

// Clear marks entries [start, start+count) free.
func (t *Tree) Clear(start, count uint64) { t.update(start, count, false) }

func (t *Tree) update(start, count uint64, used bool) {
	if count == 0 {
		return
	}
	end := start + count
	if end < start || end > t.n {
		panic(fmt.Sprintf("alloc: range [%d,%d) outside %d entries", start, end, t.n))
	}
	for wi := start / 64; wi*64 < end; wi++ {
		lo := max(start, wi*64) - wi*64
		hi := min(end, wi*64+64) - wi*64
		mask := ^uint64(0) >> (64 - (hi - lo)) << lo
		old := t.words[wi]
		if used {
			t.words[wi] = old | mask
			t.used += uint64(bits.OnesCount64(mask &^ old))
		} else {
			t.words[wi] = old &^ mask
			t.used -= uint64(bits.OnesCount64(mask & old))
		}
	}
	c0, c1 := start/chunkBits, (end-1)/chunkBits
	for c := c0; c <= c1; c++ {
		whole := c*chunkBits >= start && (c+1)*chunkBits <= end
		switch {
		case whole && used:
			t.sum[t.leaves+c] = summary{n: chunkBits}
		case whole:
			t.sum[t.leaves+c] = summary{n: chunkBits, pre: chunkBits, suf: chunkBits, best: chunkBits}
		default:
			t.sum[t.leaves+c] = t.leafSummary(c)
		}
	}
	for lo, hi := (t.leaves+c0)/2, (t.leaves+c1)/2; lo >= 1; lo, hi = lo/2, hi/2 {
		for v := lo; v <= hi; v++ {
			t.sum[v] = join(t.sum[2*v], t.sum[2*v+1])
		}
	}
}

// check verifies the invariants against a recomputation; tests call it.
func (t *Tree) check() error {
	var used uint64
	for i, w := range t.words {
		used += uint64(bits.OnesCount64(w & t.tailMask(i)))
		if i == len(t.words)-1 && w|t.tailMask(i) != ^uint64(0) {
			return fmt.Errorf("tail bits of word %d are not marked used: %#x", i, w)
		}
	}
	if used != t.used {
		return fmt.Errorf("used count %d, bitmap has %d", t.used, used)
	}
	for c := range t.leaves {
		if got, want := t.sum[t.leaves+c], t.leafSummary(c); got != want {
			return fmt.Errorf("chunk %d summary %+v, want %+v", c, got, want)
		}
	}
	for v := t.leaves - 1; v >= 1; v-- {
		if got, want := t.sum[v], join(t.sum[2*v], t.sum[2*v+1]); got != want {
			return fmt.Errorf("node %d summary %+v, want %+v", v, got, want)
		}
	}
	return nil
}
