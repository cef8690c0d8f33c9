package metadata

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/pmem/plog"
)

// ServiceID is the namespace service's plog service number.
const ServiceID = 1

// txnReserve is how many transaction sequence numbers a CountersRecord
// reserves at a time; a restart skips what the last one reserved.
const txnReserve = 1 << 16

// partition is the state of one partition this node owns: everything its
// log says, in DRAM. mu orders everything: readers hold it shared;
// a mutation holds it exclusively across its checks, its log append and
// the application of its records, so the state always equals the replay
// of the log; Rewrite holds it exclusively too.
type partition struct {
	id  uint32
	svc *Service
	log *plog.Log

	mu      sync.RWMutex
	changed chan struct{} // closed and replaced when a lock, busy flag or pending inode is released

	inodes   map[uint64]*inode
	orphans  map[uint64]bool // inodes flagged InodeOrphan
	nextIno  uint64          // next partition-local inode number
	txnNext  uint64          // next transaction sequence
	txnLimit uint64          // sequences below it may have been handed out (durable)
	// Counts of files' blocks (blocks.go), under countMu (taken after
	// mu, never before): counting holds the files being counted, true if
	// a change arrived during the count; countFailed is when a count last
	// failed.
	countMu     sync.Mutex
	counting    map[uint64]bool
	countFailed time.Time

	intents   map[wire.TxnID]*wire.IntentRecord
	decisions map[wire.TxnID]*wire.DecisionRecord
	// active: rename transactions this process coordinates that have no
	// decision yet (memory only: after a restart none is active, so every
	// undecided transaction of this partition is aborted).
	active map[wire.TxnID]bool

	// Rename locks held here.
	locks      map[wire.TxnID]*txLocks
	entryLocks map[entryKey]wire.TxnID
	inodeLocks map[uint64]wire.TxnID
	dirLocks   map[uint64]int // entry locks per directory
	renameLock wire.TxnID

	// txResults: answers to conditional entry operations, by coordinator
	// partition and sequence, kept until the coordinator's watermark
	// passes them.
	txResults map[uint32]map[uint64]txResult

	live       int64  // estimate of the snapshot's size in bytes
	sinceCheck uint64 // bytes appended since the last look at the log's size
	rewriting  bool

	adv advisory // advisory locks (memory only)

	cm committer // group commit of the records applied (commit.go)
}

type entryKey struct {
	dir  uint64
	name string
}

type txLocks struct {
	items []wire.LockItem
	since time.Time
}

type txResult struct {
	status wire.Status
	reply  []byte
}

func newPartition(svc *Service, id uint32, log *plog.Log) *partition {
	p := &partition{
		id: id, svc: svc, log: log,
		changed:    make(chan struct{}),
		inodes:     map[uint64]*inode{},
		orphans:    map[uint64]bool{},
		nextIno:    1,
		intents:    map[wire.TxnID]*wire.IntentRecord{},
		decisions:  map[wire.TxnID]*wire.DecisionRecord{},
		active:     map[wire.TxnID]bool{},
		locks:      map[wire.TxnID]*txLocks{},
		entryLocks: map[entryKey]wire.TxnID{},
		inodeLocks: map[uint64]wire.TxnID{},
		dirLocks:   map[uint64]int{},
		txResults:  map[uint32]map[uint64]txResult{},
		adv:        advisory{byIno: map[uint64][]heldLock{}},
	}
	p.cm.cond = sync.NewCond(&p.cm.mu)
	return p
}

// broadcast wakes every waiter. Callers hold mu exclusively.
func (p *partition) broadcast() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait releases the exclusive lock, waits for a broadcast (or ctx), and
// takes the lock again. It returns ctx's error if ctx ended.
func (p *partition) wait(ctx context.Context) error {
	if mustNotWait(ctx) {
		return errWouldWait
	}
	ch := p.changed
	p.mu.Unlock()
	defer p.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.svc.ctx.Done():
		return ErrClosed
	}
}

// rwait is wait for a holder of the shared lock.
func (p *partition) rwait(ctx context.Context) error {
	if mustNotWait(ctx) {
		return errWouldWait
	}
	ch := p.changed
	p.mu.RUnlock()
	defer p.mu.RLock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.svc.ctx.Done():
		return ErrClosed
	}
}

// apply changes the DRAM state as rec says. It is the only code that
// does, at replay and in commit.
func (p *partition) apply(rec wire.Record) error {
	switch r := rec.(type) {
	case *wire.InodeRecord:
		if cluster.PartitionOf(r.Ino) != p.id {
			return fmt.Errorf("%w: inode %#x in partition %d's log", ErrCorrupt, r.Ino, p.id)
		}
		n := p.inodes[r.Ino]
		if n == nil {
			n = &inode{}
			if r.Mode&wire.ModeType == wire.ModeDir {
				n.dir = newDir()
			}
			p.inodes[r.Ino] = n
		} else {
			p.live -= inodeSize(&n.rec)
			if (n.rec.Mode^r.Mode)&wire.ModeType != 0 {
				return fmt.Errorf("%w: inode %#x changes type", ErrCorrupt, r.Ino)
			}
		}
		wasPending := n.pending()
		if r.Size < n.rec.Size {
			n.placed = 0 // appends placed before a truncate go to the new end
		}
		n.rec = *r
		if r.Flags&wire.InodeOrphan != 0 {
			p.orphans[r.Ino] = true
		} else {
			delete(p.orphans, r.Ino)
		}
		p.live += inodeSize(r)
		if l := cluster.LocalOf(r.Ino); l >= p.nextIno {
			p.nextIno = l + 1
		}
		if wasPending && !n.pending() {
			p.broadcast()
		}
	case *wire.InodeFreeRecord:
		n := p.inodes[r.Ino]
		if n == nil {
			return fmt.Errorf("%w: free of unknown inode %#x", ErrCorrupt, r.Ino)
		}
		if n.dir != nil && n.dir.len() != 0 {
			return fmt.Errorf("%w: free of directory %#x with %d entries", ErrCorrupt, r.Ino, n.dir.len())
		}
		p.live -= inodeSize(&n.rec) + int64(n.xbytes)
		delete(p.inodes, r.Ino)
		delete(p.orphans, r.Ino)
		p.broadcast()
	case *wire.EntryAddRecord:
		d := p.inodes[r.Dir]
		if d == nil || d.dir == nil {
			return fmt.Errorf("%w: entry %q in missing directory %#x", ErrCorrupt, r.Name, r.Dir)
		}
		if old := d.dir.get(r.Name); old != nil {
			p.live -= entrySize(old.name)
		}
		d.dir.put(r.Name, r.Ino, r.Type, r.Cookie)
		p.live += entrySize(r.Name)
	case *wire.EntryRemoveRecord:
		d := p.inodes[r.Dir]
		if d == nil || d.dir == nil || !d.dir.remove(r.Name) {
			return fmt.Errorf("%w: removal of missing entry %q of %#x", ErrCorrupt, r.Name, r.Dir)
		}
		p.live -= entrySize(r.Name)
	case *wire.XattrSetRecord:
		n := p.inodes[r.Ino]
		if n == nil {
			return fmt.Errorf("%w: xattr of missing inode %#x", ErrCorrupt, r.Ino)
		}
		if n.xattrs == nil {
			n.xattrs = map[string][]byte{}
		}
		if old, ok := n.xattrs[r.Name]; ok {
			n.xbytes -= len(r.Name) + len(old)
			p.live -= int64(len(r.Name) + len(old) + 16)
		}
		n.xattrs[r.Name] = r.Value
		n.xbytes += len(r.Name) + len(r.Value)
		p.live += int64(len(r.Name) + len(r.Value) + 16)
	case *wire.XattrRemoveRecord:
		n := p.inodes[r.Ino]
		if n == nil {
			return fmt.Errorf("%w: xattr of missing inode %#x", ErrCorrupt, r.Ino)
		}
		if old, ok := n.xattrs[r.Name]; ok {
			n.xbytes -= len(r.Name) + len(old)
			p.live -= int64(len(r.Name) + len(old) + 16)
			delete(n.xattrs, r.Name)
		}
	case *wire.CountersRecord:
		p.nextIno = max(p.nextIno, r.NextIno)
		p.txnLimit = max(p.txnLimit, r.TxnLimit)
	case *wire.RequestRecord:
		p.svc.dedup.store(p.id, r)
	case *wire.IntentRecord:
		p.intents[r.Txn] = r
		p.txnNext = max(p.txnNext, r.Txn.Seq+1)
		if n := p.inodes[r.Ino]; n != nil {
			n.busy = true
		}
	case *wire.IntentDoneRecord:
		if in := p.intents[r.Txn]; in != nil {
			if n := p.inodes[in.Ino]; n != nil {
				n.busy = false
			}
			delete(p.intents, r.Txn)
			p.broadcast()
		}
	case *wire.TxResultRecord:
		m := p.txResults[r.Txn.Partition]
		if m == nil {
			m = map[uint64]txResult{}
			p.txResults[r.Txn.Partition] = m
		}
		m[r.Txn.Seq] = txResult{status: r.Status, reply: r.Reply}
	case *wire.LockRecord:
		p.addLocks(r.Txn, r.Items)
	case *wire.UnlockRecord:
		p.dropLocks(r.Txn)
	case *wire.DecisionRecord:
		p.decisions[r.Txn] = r
		p.txnNext = max(p.txnNext, r.Txn.Seq+1)
	case *wire.TxDoneRecord:
		delete(p.decisions, r.Txn)
	default:
		return fmt.Errorf("%w: record kind %d", ErrCorrupt, rec.Kind())
	}
	return nil
}

func inodeSize(r *wire.InodeRecord) int64 { return 130 + int64(len(r.Target)) }
func entrySize(name string) int64         { return 40 + int64(len(name)) }

func (p *partition) addLocks(txn wire.TxnID, items []wire.LockItem) {
	tl := p.locks[txn]
	if tl == nil {
		tl = &txLocks{since: p.svc.now()}
		p.locks[txn] = tl
	}
	for _, it := range items {
		if slices.Contains(tl.items, it) {
			continue
		}
		tl.items = append(tl.items, it)
		switch it.Kind {
		case wire.LockItemEntry:
			p.entryLocks[entryKey{it.Ino, it.Name}] = txn
			p.dirLocks[it.Ino]++
		case wire.LockItemInode:
			p.inodeLocks[it.Ino] = txn
		case wire.LockItemRename:
			p.renameLock = txn
		}
	}
}

func (p *partition) dropLocks(txn wire.TxnID) {
	tl := p.locks[txn]
	if tl == nil {
		return
	}
	for _, it := range tl.items {
		switch it.Kind {
		case wire.LockItemEntry:
			delete(p.entryLocks, entryKey{it.Ino, it.Name})
			if p.dirLocks[it.Ino]--; p.dirLocks[it.Ino] <= 0 {
				delete(p.dirLocks, it.Ino)
			}
		case wire.LockItemInode:
			delete(p.inodeLocks, it.Ino)
		case wire.LockItemRename:
			p.renameLock = wire.TxnID{}
		}
	}
	delete(p.locks, txn)
	p.broadcast()
}

// entryLocked reports whether a rename transaction other than txn locks
// name in dir, or dir itself.
func (p *partition) entryLocked(dir uint64, name string, txn wire.TxnID) bool {
	if t, ok := p.entryLocks[entryKey{dir, name}]; ok && t != txn {
		return true
	}
	if t, ok := p.inodeLocks[dir]; ok && t != txn {
		return true
	}
	return false
}

// inodeLocked reports whether a rename transaction other than txn locks
// inode ino.
func (p *partition) inodeLocked(ino uint64, txn wire.TxnID) bool {
	t, ok := p.inodeLocks[ino]
	return ok && t != txn
}

// replay rebuilds the partition from its log.
func (p *partition) replay() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	err := p.log.Replay(func(b []byte) error {
		n++
		rec, err := wire.DecodeRecord(b)
		if err != nil {
			return fmt.Errorf("metadata: partition %d record %d: %w", p.id, n, err)
		}
		return p.apply(rec)
	})
	if err != nil {
		return err
	}
	p.txnNext = max(p.txnNext, p.txnLimit)
	return nil
}

// newTxn hands out a transaction id, reserving more sequences in the log
// when needed. The caller holds mu exclusively; extra records to append
// before the id escapes are returned (nil when none).
func (p *partition) newTxn() (wire.TxnID, wire.Record) {
	id := wire.TxnID{Partition: p.id, Seq: p.txnNext}
	p.txnNext++
	if p.txnNext <= p.txnLimit {
		return id, nil
	}
	return id, &wire.CountersRecord{NextIno: p.nextIno, TxnLimit: p.txnNext + txnReserve}
}

// watermark is the lowest sequence of a transaction this partition
// coordinates that is not finished.
func (p *partition) watermark() uint64 {
	w := p.txnNext
	for id := range p.intents {
		w = min(w, id.Seq)
	}
	for id := range p.decisions {
		w = min(w, id.Seq)
	}
	for id := range p.active {
		w = min(w, id.Seq)
	}
	return w
}

// pruneResults forgets the answers of coordinator partition from's
// transactions below its watermark. The caller holds mu exclusively.
func (p *partition) pruneResults(from uint32, watermark uint64) {
	m := p.txResults[from]
	for seq := range m {
		if seq < watermark {
			delete(m, seq)
		}
	}
}

// snapshot emits the partition's live state as records, for Rewrite.
// The caller holds mu exclusively.
func (p *partition) snapshot(emit func(rec []byte) error) error {
	put := func(r wire.Record) error { return emit(wire.EncodeRecord(r)) }
	if err := put(&wire.CountersRecord{NextIno: p.nextIno, TxnLimit: max(p.txnLimit, p.txnNext)}); err != nil {
		return err
	}
	inos := slices.Sorted(maps.Keys(p.inodes))
	for _, ino := range inos {
		if err := put(&p.inodes[ino].rec); err != nil {
			return err
		}
	}
	for _, ino := range inos {
		n := p.inodes[ino]
		if n.dir != nil {
			var err error
			n.dir.after(0, func(e *dentry) bool {
				err = put(&wire.EntryAddRecord{Dir: ino, Name: e.name, Ino: e.ino, Type: e.typ, Cookie: e.cookie})
				return err == nil
			})
			if err != nil {
				return err
			}
		}
		for _, name := range slices.Sorted(maps.Keys(n.xattrs)) {
			if err := put(&wire.XattrSetRecord{Ino: ino, Name: name, Value: n.xattrs[name]}); err != nil {
				return err
			}
		}
	}
	for _, id := range sortedTxns(p.intents) {
		if err := put(p.intents[id]); err != nil {
			return err
		}
	}
	for _, id := range sortedTxns(p.decisions) {
		if err := put(p.decisions[id]); err != nil {
			return err
		}
	}
	for _, id := range sortedTxns(p.locks) {
		if err := put(&wire.LockRecord{Txn: id, Items: p.locks[id].items}); err != nil {
			return err
		}
	}
	for _, from := range slices.Sorted(maps.Keys(p.txResults)) {
		m := p.txResults[from]
		for _, seq := range slices.Sorted(maps.Keys(m)) {
			r := m[seq]
			if err := put(&wire.TxResultRecord{Txn: wire.TxnID{Partition: from, Seq: seq}, Status: r.status, Reply: r.reply}); err != nil {
				return err
			}
		}
	}
	for _, r := range p.svc.dedup.recordsOf(p.id) {
		if err := put(r); err != nil {
			return err
		}
	}
	return nil
}

func sortedTxns[V any](m map[wire.TxnID]V) []wire.TxnID {
	ids := slices.Collect(maps.Keys(m))
	slices.SortFunc(ids, func(a, b wire.TxnID) int {
		if a.Partition != b.Partition {
			return int(a.Partition) - int(b.Partition)
		}
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	return ids
}

// maybeRewrite starts a rewrite when the log has grown well past the
// live state. The caller holds mu exclusively.
func (p *partition) maybeRewrite() {
	if !p.startRewrite(p.svc.cfg.RewriteMinBytes, p.svc.cfg.RewriteRatio) {
		return
	}
	p.svc.goBackground(func(context.Context) {
		if err := p.rewrite(); err != nil {
			p.svc.log.Warn("partition log rewrite failed; the log keeps growing until the next try", "partition", p.id, "err", err)
		}
	})
}

// startRewrite reports whether the log is at least minBytes and ratio
// times the live state, with no rewrite under way, and then marks one
// under way: the caller runs rewrite. The caller holds mu exclusively.
func (p *partition) startRewrite(minBytes uint64, ratio int64) bool {
	if p.rewriting || p.log == nil || p.failed() != nil {
		return false
	}
	st := p.log.Stats()
	if st.Bytes < minBytes || int64(st.Bytes) < ratio*max(p.live, 1) {
		return false
	}
	p.rewriting = true
	return true
}

// rewrite replaces the log by a snapshot of the live state.
func (p *partition) rewrite() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer func() { p.rewriting = false }()
	// Every applied record must be in the log before the snapshot
	// replaces it (the committer needs no p.mu to finish).
	if err := p.awaitDurable(context.Background(), p.applied()); err != nil {
		return err
	}
	before := p.log.Stats().Bytes
	if err := p.log.Rewrite(p.snapshot); err != nil {
		return err
	}
	p.svc.log.Debug("partition log rewritten", "partition", p.id, "before", before, "after", p.log.Stats().Bytes)
	return nil
}
