package plog

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/octofs/octofs/pmem"
)

// scan is what a pass over the region's records found of plog's kinds.
// Open builds the store from it and Check reports on it; neither trusts
// a record before its payload decodes.
type scan struct {
	r     *pmem.Region
	g     pmem.Geometry
	heads map[pmem.RecordID]*scanHead
	segs  map[pmem.RecordID]*scanSeg
	pools map[pmem.RecordID]*scanPool
	order []pmem.RecordID // heads in id order
	// reached holds every segment a live head's chain walk reached,
	// including the link a failed walk stopped at, with that head: such a
	// segment is never freed as garbage, whatever its payload says.
	reached map[pmem.RecordID]pmem.RecordID
}

type scanHead struct {
	rec pmem.Record
	h   head
	err error
	// Filled by chain: the segments in order, or why they cannot be walked.
	chain    []segInfo
	chainErr error
	// brokenAt is the record the chain's walk stopped at, if it failed there.
	brokenAt pmem.RecordID
}

type scanSeg struct {
	rec pmem.Record
	s   segment
	err error
}

type scanPool struct {
	rec pmem.Record
	p   pool
	err error
}

// segInfo is one segment of a chain, with where its pieces are.
type segInfo struct {
	id      pmem.RecordID
	seq     uint64
	ext     pmem.Extent
	dataOff uint64 // region offset of the extent
	cap     uint64 // bytes in the extent
	end     uint64 // published bytes
	salt    uint32
	// region offsets of the segment's next and end words
	nextOff, endOff uint64
}

// payloadOff is where record id's payload starts in the region.
func payloadOff(g pmem.Geometry, id pmem.RecordID) uint64 {
	return g.RecordOff + (uint64(id)-1)*uint64(g.RecordSize) + g.PayloadOffset()
}

// readPayload copies the first n bytes of a record's payload with atomic
// word loads (other goroutines store words of live records).
func readPayload(r *pmem.Region, id pmem.RecordID, n int) []byte {
	off := payloadOff(r.Geometry(), id)
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Load8(off+uint64(i)))
	}
	return b
}

func checkGeometry(g pmem.Geometry) error {
	if g.PayloadSize() < minPayload || g.ExtentSlots < 1 {
		return fmt.Errorf("%w: records have %d payload bytes and %d extent slots; plog needs %d bytes and one slot: format the region with larger records", ErrGeometry, g.PayloadSize(), g.ExtentSlots, minPayload)
	}
	return nil
}

// scanRegion reads every record of plog's kinds.
func scanRegion(r *pmem.Region) (*scan, error) {
	g := r.Geometry()
	sc := &scan{
		r: r, g: g,
		heads: map[pmem.RecordID]*scanHead{},
		segs:  map[pmem.RecordID]*scanSeg{},
		pools: map[pmem.RecordID]*scanPool{},
	}
	err := r.Records(func(rec pmem.Record) bool {
		switch rec.Kind {
		case KindHead:
			h, err := decodeHead(readPayload(r, rec.ID, headSize), g.NumRecords)
			if err == nil && len(rec.Extents) != 0 {
				err = fmt.Errorf("%w: a head owns %d extents, want none", ErrCorrupt, len(rec.Extents))
			}
			sc.heads[rec.ID] = &scanHead{rec: rec, h: h, err: err}
			sc.order = append(sc.order, rec.ID)
		case KindSegment:
			s, err := decodeSegment(readPayload(r, rec.ID, segSize), g.NumRecords)
			if err == nil && len(rec.Extents) != 1 {
				err = fmt.Errorf("%w: a segment owns %d extents, want one", ErrCorrupt, len(rec.Extents))
			}
			if err == nil && s.End > rec.Extents[0].Count*uint64(g.BlockSize) {
				err = fmt.Errorf("%w: segment end %d is past its %d-byte extent", ErrCorrupt, s.End, rec.Extents[0].Count*uint64(g.BlockSize))
			}
			sc.segs[rec.ID] = &scanSeg{rec: rec, s: s, err: err}
		case KindPool:
			p, err := decodePool(readPayload(r, rec.ID, poolSize), g.NumRecords)
			if err == nil && len(rec.Extents) != 1 {
				err = fmt.Errorf("%w: a pool owns %d extents, want one", ErrCorrupt, len(rec.Extents))
			}
			sc.pools[rec.ID] = &scanPool{rec: rec, p: p, err: err}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("plog: reading the region's records: %w", err)
	}
	sc.reached = map[pmem.RecordID]pmem.RecordID{}
	for _, id := range sc.order {
		h := sc.heads[id]
		// A head being deleted may name segments already freed (and
		// reused): its chain is not walked.
		if h.err != nil || h.h.State != stateLive {
			continue
		}
		h.chain, h.brokenAt, h.chainErr = sc.walk(id, h.h)
		for _, si := range h.chain {
			sc.reached[si.id] = id
		}
		if h.brokenAt != 0 {
			sc.reached[h.brokenAt] = id
		}
	}
	return sc, nil
}

// walk follows head hid's chain from its first segment, checking that
// each link is a segment of this log, epoch and position. On failure it
// returns the segments walked so far and the record it stopped at.
func (sc *scan) walk(hid pmem.RecordID, h head) ([]segInfo, pmem.RecordID, error) {
	var chain []segInfo
	prev := pmem.RecordID(0)
	for cur := h.First; cur != 0; {
		where := func(format string, args ...any) error {
			return fmt.Errorf("%w: %v (head record %d): segment %d of the chain (record %d): %s", ErrCorrupt, h.ID, hid, len(chain), cur, fmt.Sprintf(format, args...))
		}
		if len(chain) > len(sc.segs) {
			return chain, cur, where("the chain is longer than the number of segments (a loop)")
		}
		ss := sc.segs[cur]
		switch {
		case ss == nil:
			return chain, cur, where("not a plog segment")
		case ss.err != nil:
			return chain, cur, fmt.Errorf("%v (head record %d): segment %d of the chain (record %d): %w", h.ID, hid, len(chain), cur, ss.err)
		case ss.s.Owner != hid || ss.s.ID != h.ID:
			return chain, cur, where("belongs to %v (head record %d)", ss.s.ID, ss.s.Owner)
		case ss.s.Epoch != h.Epoch:
			return chain, cur, where("epoch %d, the head's is %d", ss.s.Epoch, h.Epoch)
		case ss.s.Seq != uint64(len(chain)):
			return chain, cur, where("sequence number %d", ss.s.Seq)
		}
		chain = append(chain, sc.info(cur, ss))
		prev, cur = cur, ss.s.Next
	}
	if prev != h.Last {
		return chain, 0, fmt.Errorf("%w: %v (head record %d): the chain ends at segment record %d, the head says %d", ErrCorrupt, h.ID, hid, prev, h.Last)
	}
	return chain, 0, nil
}

func (sc *scan) info(id pmem.RecordID, ss *scanSeg) segInfo {
	e := ss.rec.Extents[0]
	po := payloadOff(sc.g, id)
	return segInfo{
		id: id, seq: ss.s.Seq, ext: e,
		dataOff: sc.r.ExtentOffset(e),
		cap:     e.Count * uint64(sc.g.BlockSize),
		end:     ss.s.End,
		salt:    ss.s.salt(),
		nextOff: po + offNext,
		endOff:  po + offEnd,
	}
}

// garbage reports whether segment sid is one an interrupted Rewrite left
// behind for head hid: it names hid and its log, no live chain reaches
// it, and its epoch is not the head's (every segment in a chain has the
// head's epoch, and epochs are never reused). hid must be a live head
// whose chain is whole.
func (sc *scan) garbage(sid, hid pmem.RecordID) bool {
	ss, sh := sc.segs[sid], sc.heads[hid]
	_, reached := sc.reached[sid]
	return ss != nil && ss.err == nil && ss.s.Owner == hid && ss.s.ID == sh.h.ID && !reached && ss.s.Epoch != sh.h.Epoch
}

// maxEpoch is the highest epoch of head hid and of the segments naming it.
func (sc *scan) maxEpoch(hid pmem.RecordID) uint64 {
	e := sc.heads[hid].h.Epoch
	for _, ss := range sc.segs {
		if ss.err == nil && ss.s.Owner == hid {
			e = max(e, ss.s.Epoch)
		}
	}
	return e
}

// owned lists the segments and pools whose payload names head hid.
func (sc *scan) owned(hid pmem.RecordID) (segs, pools []pmem.RecordID) {
	for id, ss := range sc.segs {
		if ss.err == nil && ss.s.Owner == hid {
			segs = append(segs, id)
		}
	}
	for id, sp := range sc.pools {
		if sp.err == nil && sp.p.Owner == hid {
			pools = append(pools, id)
		}
	}
	slices.Sort(segs)
	slices.Sort(pools)
	return segs, pools
}
