package plog

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/octofs/octofs/pmem"
)

// AllocPool allocates a pool of blocks data blocks (0: Options.PoolBlocks)
// owned by the log: one extent the log's user sub-allocates, kept across
// restarts with the log and freed by Delete or FreePool. The blocks hold
// whatever they held before. Until pmem logs allocations as ranges, one
// pool can have at most about 250 block-bitmap words' worth of blocks
// (about 15,000 with the default log slot); larger ones fail with
// ErrTooLarge.
func (l *Log) AllocPool(blocks uint64) (pmem.Extent, error) {
	s := l.s
	blocks = cmp.Or(blocks, s.poolSize)
	l.rw.RLock()
	defer l.rw.RUnlock()
	l.mu.Lock()
	deleted := l.deleted
	l.mu.Unlock()
	if deleted {
		return pmem.Extent{}, l.errDeleted()
	}
	tx, err := s.r.Begin(context.Background())
	if err != nil {
		return pmem.Extent{}, fmt.Errorf("plog: %v: pool: %w", l.id, err)
	}
	defer tx.Abort()
	id, err := tx.AllocRecord(KindPool)
	var e pmem.Extent
	if err == nil {
		e, err = tx.AllocExtent(id, blocks)
	}
	if err == nil {
		err = tx.Write(payloadOff(s.g, id), encodePool(pool{ID: l.id, Owner: l.head}))
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		return pmem.Extent{}, s.wrap(err, "%v: pool of %d blocks", l.id, blocks)
	}
	l.mu.Lock()
	l.pools[e] = id
	l.mu.Unlock()
	return e, nil
}

// Pools lists the log's pools in block order.
func (l *Log) Pools() []pmem.Extent {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.SortedFunc(maps.Keys(l.pools), func(a, b pmem.Extent) int { return cmp.Compare(a.Start, b.Start) })
}

// FreePool frees pool e, which must be one of the log's pools, in one
// transaction.
func (l *Log) FreePool(e pmem.Extent) error {
	l.rw.RLock()
	defer l.rw.RUnlock()
	l.mu.Lock()
	id, ok := l.pools[e]
	if ok {
		delete(l.pools, e) // claimed: a concurrent FreePool of e fails
	}
	deleted := l.deleted
	l.mu.Unlock()
	switch {
	case deleted:
		return l.errDeleted()
	case !ok:
		return fmt.Errorf("%w: %v has no pool %v", ErrNotFound, l.id, e)
	}
	tx, err := l.s.r.Begin(context.Background())
	if err == nil {
		defer tx.Abort()
		err = tx.FreeRecord(id)
	}
	if err == nil {
		err = tx.Commit()
	}
	if err != nil {
		l.mu.Lock()
		l.pools[e] = id
		l.mu.Unlock()
		return l.s.wrap(err, "%v: freeing pool %v", l.id, e)
	}
	return nil
}

// ShrinkPool gives the blocks of pool e past its first blocks back to the
// region (0 < blocks < e.Count), in one transaction, and returns the pool
// that remains. The blocks given back must hold nothing the log's user
// still needs.
func (l *Log) ShrinkPool(e pmem.Extent, blocks uint64) (pmem.Extent, error) {
	l.rw.RLock()
	defer l.rw.RUnlock()
	l.mu.Lock()
	id, ok := l.pools[e]
	if ok {
		delete(l.pools, e) // claimed: a concurrent FreePool or ShrinkPool of e fails
	}
	deleted := l.deleted
	l.mu.Unlock()
	switch {
	case deleted:
		return e, l.errDeleted()
	case !ok:
		return e, fmt.Errorf("%w: %v has no pool %v", ErrNotFound, l.id, e)
	}
	kept := pmem.Extent{Start: e.Start, Count: blocks}
	tx, err := l.s.r.Begin(context.Background())
	if err == nil {
		defer tx.Abort()
		err = tx.ShrinkExtent(id, e, blocks)
	}
	if err == nil {
		err = tx.Commit()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.pools[e] = id
		return e, l.s.wrap(err, "%v: shrinking pool %v to %d blocks", l.id, e, blocks)
	}
	l.pools[kept] = id
	return kept, nil
}
