package dataplane

import (
	"cmp"
	"slices"
	"time"

	"github.com/octofs/octofs/dataplane/wire"
)

// run maps count blocks of a chunk, from block index first, to region
// blocks [block, block+count). A run with a non-zero stamp is unwritten:
// it was mapped by the allocation that drew that stamp, nothing of the
// file is in it yet as far as the owner knows, and it reads as zeros. A
// volatile run (always unwritten) is in DRAM only: no log record maps it,
// so a restart forgets it and its blocks are free again; the persist
// that converts it logs it.
type run struct {
	first, count uint32
	block        uint64
	stamp        uint64
	volatile     bool
}

// clip returns the part of r over blocks [lo, hi), which r must cover.
func (r run) clip(lo, hi uint32) run {
	return run{first: lo, count: hi - lo, block: r.block + uint64(lo-r.first), stamp: r.stamp, volatile: r.volatile}
}

func (r run) end() uint32 { return r.first + r.count }

// unwritten reports whether the run reads as zeros.
func (r run) unwritten() bool { return r.stamp != 0 }

// chunkMap is one chunk's extent map in DRAM: runs ordered by first,
// disjoint, and merged where both the chunk blocks and the region blocks
// are contiguous and the stamps equal. Blocks not covered by a run are
// holes.
type chunkMap struct {
	runs []run
	// handed is when a reply last named the chunk's extents (in DRAM
	// only: a restarted node's clients hold no extents of it). A client
	// uses extents for at most the lease from before its request, so no
	// client can name a block of the chunk after handed + the quarantine.
	handed time.Time
}

// overlapping returns the runs that overlap blocks [first, end), clipped to
// it.
func (m *chunkMap) overlapping(first, end uint32) []run {
	var out []run
	for _, r := range m.runs {
		if r.end() <= first {
			continue
		}
		if r.first >= end {
			break
		}
		out = append(out, r.clip(max(r.first, first), min(r.end(), end)))
	}
	return out
}

// holes returns the unmapped block ranges in [first, end) as runs with no
// block.
func (m *chunkMap) holes(first, end uint32) []run {
	var out []run
	at := first
	for _, r := range m.runs {
		if r.end() <= at {
			continue
		}
		if r.first >= end {
			break
		}
		if r.first > at {
			out = append(out, run{first: at, count: r.first - at})
		}
		at = r.end()
		if at >= end {
			break
		}
	}
	if at < end {
		out = append(out, run{first: at, count: end - at})
	}
	return out
}

// mapped reports whether every block of [first, end) is mapped.
func (m *chunkMap) mapped(first, end uint32) bool {
	return first >= end || len(m.holes(first, end)) == 0
}

// insert maps the runs, which must lie in holes (the caller found them
// with holes, under the partition's lock). Replay checks that instead of
// assuming it: it reports false if a run overlaps a mapped block.
func (m *chunkMap) insert(add []run) bool {
	for _, a := range add {
		if len(m.overlapping(a.first, a.end())) > 0 {
			return false
		}
	}
	m.runs = append(m.runs, add...)
	m.normalize()
	return true
}

// normalize sorts the runs and merges neighbours that continue each other.
func (m *chunkMap) normalize() {
	if len(m.runs) == 0 {
		return
	}
	slices.SortFunc(m.runs, func(a, b run) int { return cmp.Compare(a.first, b.first) })
	merged := m.runs[:1]
	for _, r := range m.runs[1:] {
		last := &merged[len(merged)-1]
		if last.end() == r.first && last.block+uint64(last.count) == r.block && last.stamp == r.stamp && last.volatile == r.volatile {
			last.count += r.count
			continue
		}
		merged = append(merged, r)
	}
	m.runs = merged
}

// remove unmaps blocks [first, end) and returns the region blocks they had.
func (m *chunkMap) remove(first, end uint32) []run {
	freed := m.overlapping(first, end)
	if len(freed) == 0 {
		return nil
	}
	var keep []run
	for _, r := range m.runs {
		if r.end() <= first || r.first >= end {
			keep = append(keep, r)
			continue
		}
		if r.first < first {
			keep = append(keep, r.clip(r.first, first))
		}
		if r.end() > end {
			keep = append(keep, r.clip(end, r.end()))
		}
	}
	m.runs = keep
	return freed
}

// convert makes the (logged) unwritten blocks among [first, end) written.
// It reports false, changing nothing, if a block of the range is a hole.
func (m *chunkMap) convert(first, end uint32) bool {
	if !m.mapped(first, end) {
		return false
	}
	var out []run
	for _, r := range m.runs {
		if r.end() <= first || r.first >= end || !r.unwritten() || r.volatile {
			// Volatile runs are logged as written when converted,
			// never by a convert record.
			out = append(out, r)
			continue
		}
		lo, hi := max(r.first, first), min(r.end(), end)
		if r.first < lo {
			out = append(out, r.clip(r.first, lo))
		}
		out = append(out, run{first: lo, count: hi - lo, block: r.block + uint64(lo-r.first)})
		if hi < r.end() {
			out = append(out, r.clip(hi, r.end()))
		}
	}
	m.runs = out
	m.normalize()
	return true
}

// stamped returns the runs among blocks [first, end) that are unwritten
// with stamp, clipped to it.
func (m *chunkMap) stamped(first, end uint32, stamp uint64) []run {
	var out []run
	for _, r := range m.overlapping(first, end) {
		if r.stamp == stamp {
			out = append(out, r)
		}
	}
	return out
}

// wireRuns returns the runs as log-record runs (the stamp is not logged:
// the record's kind says written or unwritten).
func wireRuns(rs []run) []wire.Run {
	out := make([]wire.Run, len(rs))
	for i, r := range rs {
		out[i] = wire.Run{First: r.first, Count: r.count, Block: r.block}
	}
	return out
}

// runsOf returns a record's runs with stamp.
func runsOf(ws []wire.Run, stamp uint64) []run {
	out := make([]run, len(ws))
	for i, w := range ws {
		out[i] = run{first: w.First, count: w.Count, block: w.Block, stamp: stamp}
	}
	return out
}
