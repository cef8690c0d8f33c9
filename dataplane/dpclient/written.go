package dpclient

import (
	"cmp"
	"slices"

	"github.com/octofs/octofs/dataplane/wire"
)

// This file keeps what the engine wrote and has not yet seen persisted:
// byte ranges per inode, per owner process, per chunk and per stamp of the
// extents they went through. Persist sends them to the owners; reads use
// them to show this client's own writes in unwritten extents, which read
// as zeros for everyone else until a persist converts them.

// span is a byte range [lo, hi) inside a chunk.
type span struct{ lo, hi uint32 }

// spans is a set of byte ranges: ordered, disjoint, touching ones merged.
type spans []span

// add returns the set with [lo, hi) added.
func (s spans) add(lo, hi uint32) spans {
	if lo >= hi {
		return s
	}
	i, _ := slices.BinarySearchFunc(s, lo, func(x span, lo uint32) int { return cmp.Compare(x.hi, lo) })
	// s[i:] are the ranges ending at or after lo; merge those starting at
	// or before hi.
	j := i
	for j < len(s) && s[j].lo <= hi {
		lo, hi = min(lo, s[j].lo), max(hi, s[j].hi)
		j++
	}
	return slices.Replace(s, i, j, span{lo, hi})
}

// union returns the ranges of s and t.
func (s spans) union(t spans) spans {
	out := slices.Clone(s)
	for _, x := range t {
		out = out.add(x.lo, x.hi)
	}
	return out
}

// wholeBlocks returns the block-aligned ranges that s covers whole.
func (s spans) wholeBlocks(bs uint32) spans {
	var out spans
	for _, x := range s {
		lo := (x.lo + bs - 1) / bs * bs
		hi := x.hi / bs * bs
		if lo < hi {
			out = append(out, span{lo, hi})
		}
	}
	return out
}

// writeKey is a chunk and the stamp of the extents written through (0:
// written extents).
type writeKey struct {
	chunk, stamp uint64
}

// writes are one inode's unpersisted writes, by owner process.
type writes map[ownerKey]map[writeKey]spans

func (w writes) add(key ownerKey, wk writeKey, lo, hi uint32) {
	byChunk := w[key]
	if byChunk == nil {
		byChunk = make(map[writeKey]spans)
		w[key] = byChunk
	}
	byChunk[wk] = byChunk[wk].add(lo, hi)
}

func (w writes) merge(key ownerKey, from map[writeKey]spans) {
	for wk, s := range from {
		for _, x := range s {
			w.add(key, wk, x.lo, x.hi)
		}
	}
}

// persisting is a snapshot of an inode's writes that a Persist is
// sending.
type persisting struct{ w writes }

// ownWrites are this client's unpersisted writes into one chunk at one
// owner process, by stamp: what a read must fetch from unwritten extents
// instead of showing zeros.
type ownWrites map[uint64]spans

// stampCovering returns the stamp through which this client wrote the
// block at chunk byte b whole, or 0. When several did (the block was
// written whole, punched or truncated away, allocated again and written
// whole again before a persist), it is the latest allocation's, the
// highest: the owner draws stamps in order, and only the latest can still
// map the block.
func (o ownWrites) stampCovering(b, bs uint32) uint64 {
	var out uint64
	for stamp := range o {
		if stamp > out && o.covered(stamp, b, bs) {
			out = stamp
		}
	}
	return out
}

// covered reports whether this client wrote the block at chunk byte b
// whole through extents of stamp.
func (o ownWrites) covered(stamp uint64, b, bs uint32) bool {
	for _, w := range o[stamp] {
		if w.lo <= b && w.hi >= b+bs {
			return true
		}
	}
	return false
}

// convertCached returns exts with the parts of unwritten extents of stamp
// that blocks covers made written: what the owner did on a persist of
// those ranges. exts is not changed.
func convertCached(exts []wire.Extent, stamp uint64, blocks spans) []wire.Extent {
	out := make([]wire.Extent, 0, len(exts)+2*len(blocks))
	for _, x := range exts {
		if x.Stamp != stamp {
			out = append(out, x)
			continue
		}
		at := x.Off
		emit := func(lo, hi uint32, stamp uint64) {
			if lo < hi {
				out = append(out, wire.Extent{Off: lo, Len: hi - lo, Addr: x.Addr + uint64(lo-x.Off), RKey: x.RKey, Stamp: stamp})
			}
		}
		for _, b := range blocks {
			lo, hi := max(b.lo, x.Off), min(b.hi, x.End())
			if lo >= hi {
				continue
			}
			emit(at, lo, stamp)
			emit(lo, hi, 0)
			at = hi
		}
		emit(at, x.End(), stamp)
	}
	return out
}
