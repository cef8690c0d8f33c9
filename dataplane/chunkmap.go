package dataplane

import (
	"slices"

	"github.com/octofs/octofs/dataplane/wire"
)

// chunkMap is one chunk's extent map in DRAM: runs of the chunk's blocks
// mapped to region blocks, ordered by First, disjoint, and merged where
// both the chunk blocks and the region blocks are contiguous. Blocks not
// covered by a run are holes.
type chunkMap struct {
	runs []wire.Run
}

// overlapping returns the runs that overlap blocks [first, end), clipped to
// it.
func (m *chunkMap) overlapping(first, end uint32) []wire.Run {
	var out []wire.Run
	for _, r := range m.runs {
		rEnd := r.First + r.Count
		if rEnd <= first {
			continue
		}
		if r.First >= end {
			break
		}
		lo, hi := max(r.First, first), min(rEnd, end)
		out = append(out, wire.Run{First: lo, Count: hi - lo, Block: r.Block + uint64(lo-r.First)})
	}
	return out
}

// holes returns the unmapped block ranges in [first, end) as runs with no
// block.
func (m *chunkMap) holes(first, end uint32) []wire.Run {
	var out []wire.Run
	at := first
	for _, r := range m.runs {
		rEnd := r.First + r.Count
		if rEnd <= at {
			continue
		}
		if r.First >= end {
			break
		}
		if r.First > at {
			out = append(out, wire.Run{First: at, Count: r.First - at})
		}
		at = rEnd
		if at >= end {
			break
		}
	}
	if at < end {
		out = append(out, wire.Run{First: at, Count: end - at})
	}
	return out
}

// insert maps the runs, which must lie in holes (the caller found them
// with holes, under the partition's lock). Replay checks that instead of
// assuming it: it reports false if a run overlaps a mapped block.
func (m *chunkMap) insert(add []wire.Run) bool {
	for _, a := range add {
		if len(m.overlapping(a.First, a.First+a.Count)) > 0 {
			return false
		}
	}
	m.runs = append(m.runs, add...)
	slices.SortFunc(m.runs, func(a, b wire.Run) int { return int(a.First) - int(b.First) })
	merged := m.runs[:1]
	for _, r := range m.runs[1:] {
		last := &merged[len(merged)-1]
		if last.First+last.Count == r.First && last.Block+uint64(last.Count) == r.Block {
			last.Count += r.Count
			continue
		}
		merged = append(merged, r)
	}
	m.runs = merged
	return true
}

// remove unmaps blocks [first, end) and returns the region blocks they had.
func (m *chunkMap) remove(first, end uint32) []wire.Run {
	freed := m.overlapping(first, end)
	if len(freed) == 0 {
		return nil
	}
	var keep []wire.Run
	for _, r := range m.runs {
		rEnd := r.First + r.Count
		if rEnd <= first || r.First >= end {
			keep = append(keep, r)
			continue
		}
		if r.First < first {
			keep = append(keep, wire.Run{First: r.First, Count: first - r.First, Block: r.Block})
		}
		if rEnd > end {
			keep = append(keep, wire.Run{First: end, Count: rEnd - end, Block: r.Block + uint64(end-r.First)})
		}
	}
	m.runs = keep
	return freed
}
