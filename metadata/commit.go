package metadata

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/metadata/wire"
)

// Commits. A mutation holds its partition's lock exclusively while it
// checks, applies its records to the DRAM state and queues them for the
// log (commit); the lock is released before the records are durable, so
// the next mutation of the partition checks and applies meanwhile, and
// whole queues become durable with one plog append (group commit). The
// append is made by the first request that waits for its records (no
// hand-off to another goroutine on a request's path) or, if no request
// comes first, by the partition's flusher, which the commit that found
// the queue idle arms to run shortly after (flushDelay). Nothing that depends on a record leaves the node
// before the record is durable:
//
//   - every reply waits until the partitions the request touched are
//     durable up to what they had applied when the handler returned
//     (serve calls awaitTouched), so a reply never reports, and a read
//     never shows, state a crash could take back;
//   - a protocol step waits for its intent, lock or decision to be
//     durable before it sends a message to another partition or calls the
//     data service (p.sync).
//
// The log's order is the order of the applies (the queue is filled under
// the lock), so replay rebuilds exactly the state the applies built.

// committer is a partition's group-commit queue.
type committer struct {
	mu      sync.Mutex
	cond    *sync.Cond
	queue   [][]byte
	queued  uint64 // sequence of the last queued commit
	durable uint64 // sequence of the last durable commit
	err     error  // a failed append: the partition is unusable
	// busy: the flusher is due (armed by the commit that found the
	// queue idle) or runs; it ends once the queue is empty.
	busy    bool
	flusher *time.Timer // runs flush flushDelay after it is armed
	// appendAvg: a moving average of append times, in nanoseconds
	// (noteAppend); appendStart: when the append under way began, in
	// Unix nanoseconds, 0 for none. Written under appending, read by
	// anyone (slowAppends).
	appendAvg, appendStart atomic.Int64
	// appending: the flusher or a waiter (awaitDurable) is
	// appending a batch; one at a time, so that the log's order is the
	// queue's.
	appending bool
}

// commit applies recs to the DRAM state and queues them for the log as
// one group. The caller holds p.mu exclusively; the records are durable
// once p.sync (or the request's awaitTouched) returns.
func (p *partition) commit(recs ...wire.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if p.log == nil {
		// The empty stand-in of a partition without a log (see
		// Service.partition): a handler tried to change state it
		// never found. A bug; refuse rather than lose the records.
		return fmt.Errorf("%w: a change of partition %d, which has no log", ErrCorrupt, p.id)
	}
	if err := p.failed(); err != nil {
		return err
	}
	if p.svc.ctx.Err() != nil {
		return ErrClosed
	}
	bufs := make([][]byte, len(recs))
	for i, r := range recs {
		bufs[i] = wire.EncodeRecord(r)
		p.sinceCheck += uint64(len(bufs[i]))
	}
	for _, r := range recs {
		ino, usage := p.usageChangeOf(r)
		if err := p.apply(r); err != nil {
			// DRAM refuses what the handler built: a bug. The state may
			// be half changed, so stop using the partition rather than
			// diverge from the log.
			p.svc.log.Error("a record was refused; the partition stops until the node restarts", "partition", p.id, "err", err)
			p.fail(err)
			return err
		}
		p.noteUsage(ino, usage)
	}
	p.svc.noteLive(p.live)
	c := &p.cm
	c.mu.Lock()
	c.queue = append(c.queue, bufs...)
	c.queued++
	if !c.busy {
		c.busy = true
		if c.flusher == nil {
			c.flusher = time.AfterFunc(flushDelay, p.flush)
		} else {
			c.flusher.Reset(flushDelay)
		}
	}
	c.mu.Unlock()
	if p.sinceCheck >= max(p.svc.cfg.RewriteMinBytes/8, 512) {
		p.sinceCheck = 0
		p.maybeRewrite()
	}
	return nil
}

// flushDelay is how long the flusher lets records wait for a request to
// append them. A request that replies waits for its records and appends
// them itself, at once; the flusher is for the records no one waits for
// (background work), so it only has to come eventually. Started at once,
// it would take the append from under the request that is about to make
// it, which then sleeps until the flusher is done: two thread switches
// on every lone change.
const flushDelay = time.Millisecond

// flush appends queued records until the queue is empty, leaving the
// appends to waiters that take them first.
func (p *partition) flush() {
	c := &p.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		switch {
		case c.appending:
			c.cond.Wait()
		case len(c.queue) == 0 || c.err != nil:
			c.busy = false
			c.cond.Broadcast()
			return
		default:
			p.appendQueuedLocked()
		}
	}
}

// appendQueuedLocked appends the queued records as one batch. The caller
// holds c.mu, which is released during the append, and no one else is
// appending.
func (p *partition) appendQueuedLocked() {
	c := &p.cm
	batch, upto := c.queue, c.queued
	c.queue = nil
	c.appending = true
	c.mu.Unlock()
	start := time.Now()
	c.appendStart.Store(start.UnixNano())
	err := p.appendBatch(batch)
	c.appendStart.Store(0)
	p.noteAppend(time.Since(start))
	c.mu.Lock()
	c.appending = false
	if err != nil {
		c.err = fmt.Errorf("metadata: partition %d: append: %w", p.id, err)
		p.svc.log.Error("a log append failed; the partition stops until the node restarts", "partition", p.id, "err", err)
	} else {
		c.durable = upto
	}
	c.cond.Broadcast()
}

// appendBatch appends records in groups plog accepts. One group is all
// or nothing; a batch split over several groups keeps each commit whole,
// since a commit is never larger than a group.
func (p *partition) appendBatch(batch [][]byte) error {
	const limit = 8 << 20
	start, size := 0, 0
	for i, b := range batch {
		if size+len(b)+16 > limit && i > start {
			if err := p.log.Append(batch[start:i]...); err != nil {
				return err
			}
			start, size = i, 0
		}
		size += len(b) + 16
	}
	return p.log.Append(batch[start:]...)
}

// slowAppend is an append time past which a partition's appends count as
// slow: a region on storage that msync writes back (a few hundred
// microseconds or more), not memory (a few microseconds).
const slowAppend = 200 * time.Microsecond

// noteAppend folds the time of an append into the partition's average
// (weight 1/8).
func (p *partition) noteAppend(d time.Duration) {
	avg := p.cm.appendAvg.Load()
	p.cm.appendAvg.Store(avg + (int64(d)-avg)/8)
}

// slowAppends reports whether the partition's appends have been slow
// lately, or the one under way is (a disk that stopped answering
// msync): its changes then run on goroutines, not on RPC workers
// (inline.go), which would wait for that append.
func (p *partition) slowAppends() bool {
	if time.Duration(p.cm.appendAvg.Load()) > slowAppend {
		return true
	}
	start := p.cm.appendStart.Load()
	return start != 0 && time.Since(time.Unix(0, start)) > slowAppend
}

// applied is the sequence of the last commit applied.
func (p *partition) applied() uint64 {
	c := &p.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queued
}

// awaitDurable waits until commit seq is durable.
func (p *partition) awaitDurable(ctx context.Context, seq uint64) error {
	c := &p.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.durable >= seq {
		return nil
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() {
			c.mu.Lock()
			c.cond.Broadcast()
			c.mu.Unlock()
		})
		defer stop()
	}
	for c.durable < seq && c.err == nil && ctx.Err() == nil {
		if !c.appending && len(c.queue) > 0 {
			p.appendQueuedLocked()
			continue
		}
		c.cond.Wait()
	}
	switch {
	case c.err != nil:
		return c.err
	case c.durable >= seq:
		return nil
	}
	return ctx.Err()
}

// sync waits until everything the partition applied so far is durable.
// The committer never takes p.mu, so a holder of it may wait too.
func (p *partition) sync(ctx context.Context) error {
	return p.awaitDurable(ctx, p.applied())
}

// fail marks the partition unusable.
func (p *partition) fail(err error) {
	c := &p.cm
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.cond.Broadcast()
	c.mu.Unlock()
}

func (p *partition) failed() error {
	c := &p.cm
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// touched records the partitions a request used, so that its reply waits
// for their durability.
type touched struct {
	mu    sync.Mutex
	parts []*partition
}

type touchedKey struct{}

func withTouched(ctx context.Context) (context.Context, *touched) {
	t := &touched{}
	return context.WithValue(ctx, touchedKey{}, t), t
}

func touch(ctx context.Context, p *partition) {
	if t, ok := ctx.Value(touchedKey{}).(*touched); ok {
		t.mu.Lock()
		for _, q := range t.parts {
			if q == p {
				t.mu.Unlock()
				return
			}
		}
		t.parts = append(t.parts, p)
		t.mu.Unlock()
	}
}

// durable reports whether every touched partition is durable up to what
// it has applied (await would return at once).
func (t *touched) durable() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.parts {
		c := &p.cm
		c.mu.Lock()
		ok := c.durable >= c.queued || c.err != nil
		c.mu.Unlock()
		if !ok {
			return false
		}
	}
	return true
}

// await waits until every touched partition is durable up to what it had
// applied now.
func (t *touched) await(ctx context.Context) error {
	t.mu.Lock()
	parts := append([]*partition(nil), t.parts...)
	t.mu.Unlock()
	for _, p := range parts {
		if err := p.sync(ctx); err != nil {
			return err
		}
	}
	return nil
}

// syncThenPeer makes the partition's applied records durable (the
// intent that a message depends on), then sends the message. The caller
// does not hold p.mu.
func (p *partition) syncThenPeer(op wire.Op, part uint32, cred wire.Cred, body, reply wire.Body) (wire.ReplyHeader, error) {
	s := p.svc
	if err := p.sync(s.ctx); err != nil {
		return wire.ReplyHeader{}, err
	}
	return s.peer(s.ctx, op, part, cred, body, reply)
}
