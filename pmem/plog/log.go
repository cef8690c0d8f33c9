package plog

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/octofs/octofs/pmem"
)

// Log is one durable append-only log. Its methods are safe for
// concurrent use; see the package documentation for how appends,
// replays, rewrites and deletes order against each other.
type Log struct {
	s       *Store
	id      LogID
	head    pmem.RecordID
	headOff uint64 // region offset of the head's payload

	// Group commit: appenders queue here; one of them, the leader,
	// commits a batch for all.
	qmu     sync.Mutex
	queue   []*pending
	leading bool

	// rw orders the log's operations: a batch commit, Replay and pool
	// changes hold it shared; Rewrite and Delete hold it exclusively.
	rw sync.RWMutex

	// mu guards the state below. It is changed only by a holder of rw
	// (shared, for the one leader committing, or exclusive), and read by
	// anyone.
	mu           sync.Mutex
	epoch        uint64
	nextEpoch    uint64 // for the next Rewrite: above every epoch ever used
	segs         []segInfo
	pools        map[pmem.Extent]pmem.RecordID
	rewriteBytes uint64
	bytes        uint64 // sum of the segments' ends
	deleted      bool
	appends      uint64
	commits      uint64
}

type pending struct {
	recs [][]byte
	size int // framed bytes
	done chan result
}

// result is what a waiting appender is told: its group's outcome, or
// that it is the leader now.
type result struct {
	err  error
	lead bool
}

// ID is the log's identity.
func (l *Log) ID() LogID { return l.id }

// Stats describe a log's size, for deciding when to rewrite it.
type Stats struct {
	// Bytes is the size of the log's records (with their framing) from its
	// start to the published tail.
	Bytes uint64 `json:"bytes"`
	// RewriteBytes is Bytes right after the last Rewrite (0 if none).
	RewriteBytes uint64 `json:"rewrite_bytes"`
	// Segments is the length of the chain.
	Segments int `json:"segments"`
	// Pools and PoolBlocks count the log's pools.
	Pools      int    `json:"pools"`
	PoolBlocks uint64 `json:"pool_blocks"`
	// Appends and Commits count, since Open, the groups appended and the
	// flush-fence-publish rounds that made them durable: Appends/Commits
	// is the group-commit factor.
	Appends uint64 `json:"appends"`
	Commits uint64 `json:"commits"`
}

// Stats returns the log's sizes and counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Stats{Bytes: l.bytes, RewriteBytes: l.rewriteBytes, Segments: len(l.segs), Pools: len(l.pools), Appends: l.appends, Commits: l.commits}
	for e := range l.pools {
		st.PoolBlocks += e.Count
	}
	return st
}

func (l *Log) errDeleted() error { return fmt.Errorf("%w: %v", ErrDeleted, l.id) }

// Append appends recs as one group and returns once they are durable.
// After a crash either every record of the group is in the log or none
// is, and no group is present after one that is missing. Concurrent
// appends share one flush, fence and publish (group commit).
func (l *Log) Append(recs ...[]byte) error {
	size := 0
	for _, r := range recs {
		if len(r) > MaxRecordSize {
			return fmt.Errorf("%w: %v: a %d-byte record (at most %d)", ErrTooLarge, l.id, len(r), MaxRecordSize)
		}
		size += frameSize(len(r))
	}
	if size > MaxGroupSize {
		return fmt.Errorf("%w: %v: a group of %d framed bytes (at most %d)", ErrTooLarge, l.id, size, MaxGroupSize)
	}
	if len(recs) == 0 {
		return nil
	}
	p := &pending{recs: recs, size: size, done: make(chan result, 1)}
	l.qmu.Lock()
	l.queue = append(l.queue, p)
	if l.leading {
		l.qmu.Unlock()
		res := <-p.done
		if !res.lead {
			return res.err
		}
	} else {
		l.leading = true
		l.qmu.Unlock()
	}
	return l.lead(p)
}

// lead commits the queue's first batch, which holds self (the queue's
// first entry when leadership is taken), answers its other appenders and
// hands leadership to the next waiting appender, if any.
func (l *Log) lead(self *pending) error {
	l.rw.RLock()
	l.qmu.Lock()
	limit := max(l.s.segBlocks*uint64(l.s.g.BlockSize), uint64(l.queue[0].size))
	n, total := 0, uint64(0)
	for n < len(l.queue) && total+uint64(l.queue[n].size) <= limit {
		total += uint64(l.queue[n].size)
		n++
	}
	batch := slices.Clone(l.queue[:n])
	l.queue = slices.Delete(l.queue, 0, n)
	l.qmu.Unlock()
	err := l.commit(batch, total)
	l.rw.RUnlock()

	var mine error
	for _, p := range batch {
		if p == self {
			mine = err
			continue
		}
		p.done <- result{err: err}
	}
	l.qmu.Lock()
	if len(l.queue) == 0 {
		l.leading = false
		l.qmu.Unlock()
		return mine
	}
	next := l.queue[0]
	l.qmu.Unlock()
	next.done <- result{lead: true}
	return mine
}

// commit makes batch durable at the tail: into the last segment's free
// space with one published 8-byte store, or into a new segment linked by
// a transaction.
func (l *Log) commit(batch []*pending, total uint64) error {
	l.mu.Lock()
	if l.deleted {
		l.mu.Unlock()
		return l.errDeleted()
	}
	var last *segInfo
	if n := len(l.segs); n > 0 {
		s := l.segs[n-1]
		last = &s
	}
	l.mu.Unlock()
	groups := make([][][]byte, len(batch))
	for i, p := range batch {
		groups[i] = p.recs
	}
	if h := l.s.hooks.placed; h != nil {
		h(l.id, groups)
	}
	var err error
	if last != nil && last.cap-last.end >= total {
		err = l.commitInPlace(last, groups, total)
	} else {
		err = l.commitNewSegment(last, groups, total)
	}
	if err != nil {
		if h := l.s.hooks.abandoned; h != nil {
			h(l.id, groups)
		}
		return err
	}
	l.mu.Lock()
	l.appends += uint64(len(batch))
	l.commits++
	l.mu.Unlock()
	return nil
}

// commitInPlace writes the frames past the published tail of seg,
// persists them, then publishes the new tail with one failure-atomic
// store. Two fences; a crash before the second leaves the old tail, and
// replay never reads past it.
func (l *Log) commitInPlace(seg *segInfo, groups [][][]byte, total uint64) error {
	r := l.s.r
	at := seg.dataOff + seg.end
	dst := r.Bytes()[at : at+total]
	off := 0
	for _, g := range groups {
		for _, rec := range g {
			n := putFrame(dst[off:], seg.salt, rec)
			if l.s.mut == mutPublishPerRecord {
				if err := r.Persist(at+uint64(off), uint64(n)); err != nil {
					return err
				}
				if err := r.Store8(seg.endOff, seg.end+uint64(off+n)); err != nil {
					return err
				}
			}
			off += n
		}
	}
	end := seg.end + total
	persist := func() error {
		if l.s.mut == mutSkipRecordPersist {
			return nil
		}
		if err := r.Persist(at, total); err != nil {
			return fmt.Errorf("plog: %v: persisting records: %w", l.id, err)
		}
		return nil
	}
	publish := func() error {
		if l.s.mut == mutUnflushedTail {
			atomic.StoreUint64((*uint64)(unsafe.Pointer(&r.Bytes()[seg.endOff])), end)
			return nil
		}
		if err := r.Store8(seg.endOff, end); err != nil {
			return fmt.Errorf("plog: %v: publishing the tail: %w", l.id, err)
		}
		return nil
	}
	steps := []func() error{persist, publish}
	if l.s.mut == mutPublishFirst {
		steps = []func() error{publish, persist}
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.segs[len(l.segs)-1].end = end
	l.bytes += total
	l.mu.Unlock()
	return nil
}

// commitNewSegment puts the batch into a new segment and links it after
// last (or as the first) in one transaction.
func (l *Log) commitNewSegment(last *segInfo, groups [][][]byte, total uint64) error {
	l.mu.Lock()
	epoch := l.epoch
	l.mu.Unlock()
	seq := uint64(0)
	if last != nil {
		seq = last.seq + 1
	}
	b := l.newBuilder(epoch, seq, last)
	b.start(total)
	for _, g := range groups {
		for _, rec := range g {
			b.add(rec)
		}
	}
	var si segInfo
	for {
		var err error
		si, err = l.linkSegment(b, last)
		if err == nil {
			break
		}
		// A region whose free space is fragmented may have no run of
		// the chain's next size but one of a smaller size: a smaller
		// segment that still holds the batch beats refusing it.
		if !errors.Is(err, pmem.ErrNoSpace) || !b.shrink() {
			return err
		}
	}
	l.mu.Lock()
	l.segs = append(l.segs, si)
	l.bytes += total
	l.mu.Unlock()
	return nil
}

// linkSegment writes b's segment and links it after last (or as the
// log's first) in one transaction.
func (l *Log) linkSegment(b *builder, last *segInfo) (segInfo, error) {
	tx, err := l.s.r.Begin(context.Background())
	if err != nil {
		return segInfo{}, fmt.Errorf("plog: %v: %w", l.id, err)
	}
	defer tx.Abort()
	si, err := b.write(tx)
	if err != nil {
		return segInfo{}, err
	}
	if last == nil {
		err = tx.Write8(l.headOff+offFirst, uint64(si.id))
	}
	if err == nil {
		err = tx.Write8(l.headOff+offLast, uint64(si.id))
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return segInfo{}, l.s.wrap(err, "%v: linking a new segment", l.id)
	}
	return si, nil
}

// builder fills new segments: the frames go into a buffer that one
// transaction writes into a fresh extent.
type builder struct {
	l     *Log
	epoch uint64
	seq   uint64   // of the segment being filled
	prev  *segInfo // the segment before it, nil for the first
	buf   []byte
	used  uint64
	salt  uint32
	// rewrite marks a Rewrite's chain (for the test mutation only).
	rewrite bool
}

func (l *Log) newBuilder(epoch, seq uint64, prev *segInfo) *builder {
	return &builder{l: l, epoch: epoch, seq: seq, prev: prev}
}

// start begins a segment that holds at least need bytes.
func (b *builder) start(need uint64) {
	s := b.l.s
	bs := uint64(s.g.BlockSize)
	// A chain starts with a small segment and doubles, up to the store's
	// segment size: the hundreds of partition logs of a node hold little
	// at first and must not take a full segment each.
	grown := min(s.minSegBlocks, s.segBlocks)
	if b.prev != nil {
		grown = min(s.segBlocks, max(grown, 2*b.prev.cap/bs))
	}
	// Nor may one segment take more than an eighth of the region's
	// free blocks: a nearly full region is shared by every log on it.
	st := s.r.Stats()
	grown = min(grown, max(1, (st.Blocks-st.BlocksUsed)/8))
	blocks := max(grown, (need+bs-1)/bs)
	if uint64(cap(b.buf)) >= blocks*bs {
		b.buf = b.buf[:blocks*bs]
	} else {
		b.buf = make([]byte, blocks*bs)
	}
	b.used = 0
	b.salt = segmentSalt(b.l.id, b.l.head, b.epoch, b.seq)
}

// shrink halves the segment being filled, keeping what it holds; false
// when it cannot get smaller.
func (b *builder) shrink() bool {
	bs := uint64(b.l.s.g.BlockSize)
	have := uint64(len(b.buf)) / bs
	want := max(have/2, (b.used+bs-1)/bs, 1)
	if want >= have {
		return false
	}
	b.buf = b.buf[:want*bs]
	return true
}

func (b *builder) room() uint64 { return uint64(len(b.buf)) - b.used }

func (b *builder) add(rec []byte) {
	b.used += uint64(putFrame(b.buf[b.used:], b.salt, rec))
}

// write allocates the segment in tx, fills it and links it after prev.
func (b *builder) write(tx *pmem.Tx) (segInfo, error) {
	s := b.l.s
	r := s.r
	bs := uint64(s.g.BlockSize)
	id, err := tx.AllocRecord(KindSegment)
	if err != nil {
		return segInfo{}, s.wrap(err, "%v: new segment", b.l.id)
	}
	e, err := tx.AllocExtent(id, uint64(len(b.buf))/bs)
	if err != nil {
		return segInfo{}, s.wrap(err, "%v: new segment of %d blocks", b.l.id, uint64(len(b.buf))/bs)
	}
	seg := segment{ID: b.l.id, Owner: b.l.head, Epoch: b.epoch, Seq: b.seq, End: b.used}
	po := payloadOff(s.g, id)
	// The header words are logged rather than written in place with
	// WriteFresh: seven log entries, and every store plog makes to a
	// record stays an atomic word store, which the power-loss tracker can
	// snapshot while other goroutines work (see crash_test.go).
	if err := tx.Write(po, encodeSegment(seg)); err != nil {
		return segInfo{}, s.wrap(err, "%v: new segment", b.l.id)
	}
	dataOff := r.ExtentOffset(e)
	if s.mut == mutRewriteUnflushed && b.rewrite {
		copy(r.Bytes()[dataOff:], b.buf[:b.used])
	} else if err := tx.WriteFresh(dataOff, b.buf[:b.used]); err != nil {
		return segInfo{}, s.wrap(err, "%v: new segment", b.l.id)
	}
	if b.prev != nil {
		if err := tx.Write8(b.prev.nextOff, uint64(id)); err != nil {
			return segInfo{}, s.wrap(err, "%v: linking a new segment", b.l.id)
		}
	}
	return segInfo{
		id: id, seq: b.seq, ext: e, dataOff: dataOff,
		cap: e.Count * bs, end: b.used, salt: b.salt,
		nextOff: po + offNext, endOff: po + offEnd,
	}, nil
}

// Replay calls fn for every record from the log's start (its last
// rewrite) to the tail published when Replay began, in order, checking
// each record's checksum. rec is valid only until fn returns. A damaged
// record is an ErrCorrupt error saying where; an error from fn stops the
// replay and is returned as is. Appends may run while Replay does (their
// records are past the tail Replay reads to); fn must not call the
// log's Rewrite or Delete.
func (l *Log) Replay(fn func(rec []byte) error) error {
	l.rw.RLock()
	defer l.rw.RUnlock()
	l.mu.Lock()
	if l.deleted {
		l.mu.Unlock()
		return l.errDeleted()
	}
	segs := slices.Clone(l.segs)
	l.mu.Unlock()
	return replaySegments(l.s.r, l.id, segs, fn)
}

func replaySegments(r *pmem.Region, id LogID, segs []segInfo, fn func(rec []byte) error) error {
	var buf []byte
	mem := r.Bytes()
	for i, s := range segs {
		if s.end > s.cap {
			return fmt.Errorf("%w: %v: segment %d (record %d): tail %d past its %d bytes", ErrCorrupt, id, i, s.id, s.end, s.cap)
		}
		data := mem[s.dataOff : s.dataOff+s.end]
		for off := uint64(0); off < s.end; {
			rec, n, err := decodeFrame(data[off:], s.salt)
			if err != nil {
				return fmt.Errorf("%v: segment %d (record %d, %v) at byte %d of %d published: %w", id, i, s.id, s.ext, off, s.end, err)
			}
			buf = append(buf[:0], rec...)
			if err := fn(buf); err != nil {
				return err
			}
			off += uint64(n)
		}
	}
	return nil
}

// Rewrite replaces the log's records by those snapshot emits, in order,
// atomically: after a crash the log holds either its old records or the
// new ones. It builds a new chain of segments, then one transaction
// points the head at it and frees the old segments (those that do not
// fit that transaction are freed right after it, or by the next Open:
// nothing reaches them from the moment of the swap).
//
// Appends wait while Rewrite runs: it waits for the batch being
// committed, and no batch commits until it returns, so the snapshot sees
// every record whose Append has returned and no other. snapshot must
// therefore not wait for a goroutine blocked in Append on this log; see
// the package documentation for the pattern services use. If snapshot
// or building the chain fails, the log is unchanged.
func (l *Log) Rewrite(snapshot func(emit func(rec []byte) error) error) error {
	l.rw.Lock()
	defer l.rw.Unlock()
	l.mu.Lock()
	if l.deleted {
		l.mu.Unlock()
		return l.errDeleted()
	}
	epoch := l.nextEpoch
	l.nextEpoch++
	old := slices.Clone(l.segs)
	l.mu.Unlock()

	s := l.s
	ctx := context.Background()
	var chain []segInfo
	var total uint64
	b := l.newBuilder(epoch, 0, nil)
	b.rewrite = true
	flush := func() error {
		tx, err := s.r.Begin(ctx)
		if err != nil {
			return fmt.Errorf("plog: %v: rewrite: %w", l.id, err)
		}
		defer tx.Abort()
		si, err := b.write(tx)
		if err == nil {
			err = tx.Commit()
		}
		if err != nil {
			return s.wrap(err, "%v: rewrite", l.id)
		}
		chain = append(chain, si)
		b.prev = &chain[len(chain)-1]
		b.seq++
		return nil
	}
	started := false
	emit := func(rec []byte) error {
		if len(rec) > MaxRecordSize {
			return fmt.Errorf("%w: %v: rewrite: a %d-byte record (at most %d)", ErrTooLarge, l.id, len(rec), MaxRecordSize)
		}
		n := uint64(frameSize(len(rec)))
		if started && b.room() < n {
			if err := flush(); err != nil {
				return err
			}
			started = false
		}
		if !started {
			b.start(n)
			started = true
		}
		b.add(rec)
		total += n
		return nil
	}
	err := snapshot(emit)
	if err == nil && started {
		err = flush()
	}
	if err != nil {
		l.discard(chain)
		return err
	}

	// The swap: the head takes the new epoch and chain, and the old
	// segments go, as many as fit this transaction.
	var first, lastID pmem.RecordID
	if len(chain) > 0 {
		first, lastID = chain[0].id, chain[len(chain)-1].id
	}
	tx, err := s.r.Begin(ctx)
	if err != nil {
		l.discard(chain)
		return fmt.Errorf("plog: %v: rewrite: %w", l.id, err)
	}
	defer tx.Abort()
	for _, w := range []struct{ off, v uint64 }{
		{offEpoch, epoch}, {offFirst, uint64(first)}, {offLast, uint64(lastID)}, {offRewrBy, total},
	} {
		switch {
		case err != nil:
		case s.mut == mutRewriteTornSwap:
			err = s.r.Store8(l.headOff+w.off, w.v)
		default:
			err = tx.Write8(l.headOff+w.off, w.v)
		}
	}
	oldIDs := make([]pmem.RecordID, len(old))
	for i, si := range old {
		oldIDs[i] = si.id
	}
	var freed int
	if err == nil {
		freed, err = s.addFrees(tx, oldIDs)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		tx.Abort()
		l.discard(chain)
		return s.wrap(err, "%v: rewrite: swapping the new chain in", l.id)
	}
	l.mu.Lock()
	l.epoch, l.segs, l.rewriteBytes, l.bytes = epoch, chain, total, total
	l.mu.Unlock()
	if h := s.hooks.rewritten; h != nil {
		h(l.id)
	}
	if rest := oldIDs[freed:]; len(rest) > 0 {
		if err := s.freeAll(rest); err != nil {
			// The rewrite happened; the old segments are unreachable and the
			// next Open frees them.
			s.logger.Warn("plog: freeing old segments after a rewrite; the next open frees them", "log", l.id.String(), "err", err)
		}
	}
	return nil
}

// discard frees the segments of a rewrite that did not happen. If that
// fails they stay unreachable until the next Open frees them.
func (l *Log) discard(chain []segInfo) {
	if len(chain) == 0 {
		return
	}
	ids := make([]pmem.RecordID, len(chain))
	for i, si := range chain {
		ids[i] = si.id
	}
	if err := l.s.freeAll(ids); err != nil {
		l.s.logger.Warn("plog: freeing the segments of a failed rewrite; the next open frees them", "log", l.id.String(), "err", err)
	}
}

// Delete frees the log, its segments and its pools. It first marks the
// head as being deleted (one failure-atomic store), so a crash part-way
// is finished by the next Open. Appends waiting on the log fail with
// ErrDeleted; Store.Log(id) afterwards creates a new, empty log.
func (l *Log) Delete() error {
	s := l.s
	s.mu.Lock()
	if s.logs[l.id] == l {
		delete(s.logs, l.id)
	}
	s.mu.Unlock()
	l.rw.Lock()
	defer l.rw.Unlock()
	l.mu.Lock()
	if l.deleted {
		l.mu.Unlock()
		return nil
	}
	l.deleted = true
	ids := slices.Sorted(maps.Values(l.pools))
	for _, si := range l.segs {
		ids = append(ids, si.id)
	}
	l.segs, l.pools, l.bytes = nil, map[pmem.Extent]pmem.RecordID{}, 0
	l.mu.Unlock()
	if err := s.r.Store8(l.headOff+offState, stateDeleting); err != nil {
		return fmt.Errorf("plog: deleting %v: %w", l.id, err)
	}
	if err := s.freeAll(append(ids, l.head)); err != nil {
		return fmt.Errorf("plog: deleting %v (the next open finishes it): %w", l.id, err)
	}
	return nil
}
