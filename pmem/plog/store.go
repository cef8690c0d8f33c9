package plog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"

	"github.com/octofs/octofs/pmem"
)

// Options configure a Store. Zero fields take the defaults.
type Options struct {
	// Logger receives recovery notes; nil discards them.
	Logger *slog.Logger
	// SegmentSize is the size of a new segment's extent in bytes, rounded
	// up to whole blocks (default 1 MiB). A group of records larger than
	// this gets a segment of its own size.
	SegmentSize uint64
	// PoolBlocks is the size of a pool when AllocPool is asked for 0
	// blocks (default 4096).
	PoolBlocks uint64
}

const (
	defaultSegmentSize = 1 << 20
	// firstSegmentSize is a chain's first segment; each next one is twice
	// the last, up to SegmentSize.
	firstSegmentSize  = 16 << 10
	defaultPoolBlocks = 4096
)

// Store is the set of logs in one region. Its methods are safe for
// concurrent use.
type Store struct {
	r            *pmem.Region
	g            pmem.Geometry
	logger       *slog.Logger
	segBlocks    uint64 // blocks in a full-size segment
	minSegBlocks uint64 // blocks in a chain's first segment
	poolSize     uint64

	mu     sync.Mutex
	logs   map[LogID]*Log
	broken map[LogID]error // logs whose structures are damaged

	// For tests only: a mutation that removes a durability step, and
	// hooks that let a crash test follow the order of the log.
	mut   mutation
	hooks hooks
}

// mutation names a durability step a test removes to prove the crash
// tests notice (see docs/plog.md). Production code runs mutNone.
type mutation int

const (
	mutNone mutation = iota
	// mutSkipRecordPersist publishes the tail without flushing and
	// fencing the records first.
	mutSkipRecordPersist
	// mutUnflushedTail publishes the tail with a store that is never
	// flushed, so Append acknowledges what is not durable.
	mutUnflushedTail
	// mutPublishFirst publishes the tail before persisting the records.
	mutPublishFirst
	// mutPublishPerRecord publishes the tail after each record, so a
	// crash can keep part of a group.
	mutPublishPerRecord
	// mutRewriteTornSwap points the head at the new chain with one
	// store per word instead of one transaction.
	mutRewriteTornSwap
	// mutRewriteUnflushed writes a rewrite's segments without
	// Tx.WriteFresh, so their bytes are not flushed before the swap.
	mutRewriteUnflushed
)

// hooks let a crash test see, in log order, the groups a committer is
// about to publish, and the ones it failed to.
type hooks struct {
	placed    func(id LogID, groups [][][]byte)
	abandoned func(id LogID, groups [][][]byte)
	rewritten func(id LogID)
}

// Open finds every log in the region and recovers it: it walks each
// log's chain from its head, frees segments an interrupted Rewrite left
// behind, and finishes interrupted Deletes. A log whose structures are
// damaged does not stop the others: Log returns its error (ErrCorrupt,
// saying where), and Check describes it. Open changes nothing on a
// read-only region.
func Open(r *pmem.Region, o Options) (*Store, error) {
	g := r.Geometry()
	if err := checkGeometry(g); err != nil {
		return nil, err
	}
	bs := uint64(g.BlockSize)
	s := &Store{
		r: r, g: g,
		logger:       o.Logger,
		segBlocks:    max(1, (cmp.Or(o.SegmentSize, defaultSegmentSize)+bs-1)/bs),
		minSegBlocks: max(1, (firstSegmentSize+bs-1)/bs),
		poolSize:     cmp.Or(o.PoolBlocks, defaultPoolBlocks),
		logs:         map[LogID]*Log{},
		broken:       map[LogID]error{},
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	sc, err := scanRegion(r)
	if err != nil {
		return nil, err
	}
	var garbage, deleting []pmem.RecordID
	for _, hid := range sc.order {
		sh := sc.heads[hid]
		if sh.err != nil {
			if id, err := decodeLogID(r.Load8(payloadOff(g, hid) + offID)); err == nil {
				s.broken[id] = fmt.Errorf("%v: head record %d: %w", id, hid, sh.err)
			}
			s.logger.Warn("plog: damaged log head; run octoctl fsck", "record", hid, "err", sh.err)
			continue
		}
		h := sh.h
		if h.State == stateDeleting {
			deleting = append(deleting, hid)
			continue
		}
		if _, dup := s.logs[h.ID]; dup || s.broken[h.ID] != nil {
			delete(s.logs, h.ID)
			s.broken[h.ID] = fmt.Errorf("%w: %v has two heads (records %d and another): run octoctl fsck", ErrCorrupt, h.ID, hid)
			s.logger.Warn("plog: two heads for one log", "log", h.ID.String(), "record", hid)
			continue
		}
		if sh.chainErr != nil {
			s.broken[h.ID] = sh.chainErr
			s.logger.Warn("plog: damaged log chain; run octoctl fsck", "log", h.ID.String(), "err", sh.chainErr)
			continue
		}
		l := s.newLog(h.ID, hid, h)
		l.segs = sh.chain
		for _, si := range sh.chain {
			l.bytes += si.end
		}
		l.nextEpoch = sc.maxEpoch(hid) + 1
		segs, pools := sc.owned(hid)
		for _, sid := range segs {
			if sc.garbage(sid, hid) {
				garbage = append(garbage, sid)
			} else if _, ok := sc.reached[sid]; !ok {
				s.logger.Warn("plog: segment of the current epoch outside its chain; run octoctl fsck", "log", h.ID.String(), "record", sid)
			}
		}
		for _, pid := range pools {
			if sp := sc.pools[pid]; sp.p.ID == h.ID {
				l.pools[sp.rec.Extents[0]] = pid
			}
		}
		s.logs[h.ID] = l
	}
	for id, ss := range sc.segs {
		if ss.err == nil && sc.heads[ss.s.Owner] == nil {
			s.logger.Warn("plog: segment without a log head; run octoctl fsck", "record", id, "log", ss.s.ID.String())
		}
	}
	if err := s.collect(garbage, deleting, sc); err != nil {
		if errors.Is(err, pmem.ErrReadOnly) {
			return s, nil
		}
		return nil, err
	}
	return s, nil
}

// collect frees the segments interrupted rewrites left and finishes
// interrupted deletes.
func (s *Store) collect(garbage, deleting []pmem.RecordID, sc *scan) error {
	if len(garbage) > 0 {
		s.logger.Info("plog: freeing segments left by an interrupted rewrite", "segments", len(garbage))
		if err := s.freeAll(garbage); err != nil {
			return fmt.Errorf("plog: freeing unreachable segments: %w", err)
		}
	}
	for _, hid := range deleting {
		owned, pools := sc.owned(hid)
		// A segment a live chain reaches stays, whatever owner it names.
		var segs []pmem.RecordID
		for _, sid := range owned {
			if _, ok := sc.reached[sid]; !ok {
				segs = append(segs, sid)
			}
		}
		s.logger.Info("plog: finishing an interrupted delete", "log", sc.heads[hid].h.ID.String(), "segments", len(segs), "pools", len(pools))
		if err := s.freeAll(append(append(pools, segs...), hid)); err != nil {
			return fmt.Errorf("plog: finishing the delete of %v: %w", sc.heads[hid].h.ID, err)
		}
	}
	return nil
}

func (s *Store) newLog(id LogID, hid pmem.RecordID, h head) *Log {
	return &Log{
		s: s, id: id, head: hid,
		headOff:      payloadOff(s.g, hid),
		epoch:        h.Epoch,
		nextEpoch:    h.Epoch + 1,
		rewriteBytes: h.RewriteBytes,
		pools:        map[pmem.Extent]pmem.RecordID{},
	}
}

// Log opens the log id, creating an empty one if the region has none.
// Every call for one id returns the same *Log until it is deleted.
func (s *Store) Log(id LogID) (*Log, error) {
	if err := id.valid(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.logs[id]; l != nil {
		return l, nil
	}
	if err := s.broken[id]; err != nil {
		return nil, fmt.Errorf("%w; the log cannot be used until it is repaired or its partition restored from a replica", err)
	}
	tx, err := s.r.Begin(context.Background())
	if err != nil {
		return nil, fmt.Errorf("plog: creating %v: %w", id, err)
	}
	defer tx.Abort()
	hid, err := tx.AllocRecord(KindHead)
	if err != nil {
		return nil, s.wrap(err, "creating %v", id)
	}
	h := head{ID: id, Epoch: 1}
	if err := tx.Write(payloadOff(s.g, hid), encodeHead(h)); err != nil {
		return nil, s.wrap(err, "creating %v", id)
	}
	if err := tx.Commit(); err != nil {
		return nil, s.wrap(err, "creating %v", id)
	}
	l := s.newLog(id, hid, h)
	s.logs[id] = l
	return l, nil
}

// IDs lists the logs in the region, damaged ones included, in order.
func (s *Store) IDs() []LogID {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := slices.Collect(maps.Keys(s.logs))
	for id := range s.broken {
		if s.logs[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b LogID) int { return cmp.Compare(a.word(), b.word()) })
	return ids
}

// Region is the region the store lives in.
func (s *Store) Region() *pmem.Region { return s.r }

// wrap turns pmem's errors into plog's: no space becomes ErrNoSpace
// (still matching pmem.ErrNoSpace), a transaction that does not fit a
// log slot ErrTooLarge.
func (s *Store) wrap(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	switch {
	case errors.Is(err, pmem.ErrNoSpace):
		return fmt.Errorf("%w: %s: %w", ErrNoSpace, what, err)
	case errors.Is(err, pmem.ErrTxTooLarge):
		return fmt.Errorf("%w: %s: %w", ErrTooLarge, what, err)
	}
	return fmt.Errorf("plog: %s: %w", what, err)
}

// freeCost bounds the log entries Tx.FreeRecord needs for rec: its
// header word, its record-bitmap word, and per extent two slot words and
// one entry per block-bitmap word.
func freeCost(rec pmem.Record) int {
	n := 2
	for _, e := range rec.Extents {
		n += 2 + int((e.End()-1)/64-e.Start/64+1)
	}
	return n
}

// addFrees frees the records of ids in tx while they fit its log slot
// and returns how many it freed.
func (s *Store) addFrees(tx *pmem.Tx, ids []pmem.RecordID) (int, error) {
	for i, id := range ids {
		rec, err := s.r.Record(id)
		if err != nil {
			return i, err
		}
		if tx.Len()+freeCost(rec) > tx.Cap() {
			return i, nil
		}
		if err := tx.FreeRecord(id); err != nil {
			return i, err
		}
	}
	return len(ids), nil
}

// freeAll frees unreachable records in as many transactions as their
// size needs. Each step frees records nothing points to, so a crash
// between steps leaves the rest for the next Open.
func (s *Store) freeAll(ids []pmem.RecordID) error {
	for len(ids) > 0 {
		tx, err := s.r.Begin(context.Background())
		if err != nil {
			return err
		}
		n, err := s.addFrees(tx, ids)
		if err == nil && n == 0 {
			err = fmt.Errorf("%w: record %d cannot be freed in one transaction", ErrTooLarge, ids[0])
		}
		if err != nil {
			tx.Abort()
			return err
		}
		if err := tx.Commit(); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}
