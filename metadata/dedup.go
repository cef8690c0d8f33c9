package metadata

import (
	"context"
	"sync"
	"time"

	"github.com/octofs/octofs/metadata/wire"
)

// clientKey names a client process: its id and incarnation.
type clientKey struct{ id, inc uint64 }

// dedupEntry is one mutating request of a client: in flight until done
// is closed, then its answer (stored) or nothing (the request ended
// without an answer to keep, e.g. a redirect, and a repeat executes).
type dedupEntry struct {
	done      chan struct{}
	stored    bool
	status    wire.Status
	reply     []byte
	durable   bool // the answer is in partition's log
	partition uint32
}

// dedupTable keeps the answers of recent mutating requests per client,
// node-wide (a request is executed by one partition, whose log holds
// the answer's RequestRecord; replay puts it back here).
type dedupTable struct {
	now     func() time.Time
	mu      sync.Mutex
	clients map[clientKey]*clientReqs
}

type clientReqs struct {
	bySeq    map[uint64]*dedupEntry
	low      uint64
	lastSeen time.Time
}

func newDedup(now func() time.Time) *dedupTable {
	return &dedupTable{now: now, clients: map[clientKey]*clientReqs{}}
}

func (t *dedupTable) client(k clientKey) *clientReqs {
	c := t.clients[k]
	if c == nil {
		c = &clientReqs{bySeq: map[uint64]*dedupEntry{}, lastSeen: t.now()}
		t.clients[k] = c
	}
	return c
}

// begin registers request seq of k, or finds it: first says the caller
// executes it; otherwise the caller waits for e.done and uses e's answer
// if stored (else it calls begin again).
func (t *dedupTable) begin(k clientKey, seq, low uint64, now time.Time) (e *dedupEntry, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.client(k)
	c.lastSeen = now
	if low > c.low {
		c.low = low
		for s, x := range c.bySeq {
			if s < low && x.isDone() {
				delete(c.bySeq, s)
			}
		}
	}
	if e = c.bySeq[seq]; e != nil && (!e.isDone() || e.stored) {
		return e, false
	}
	e = &dedupEntry{done: make(chan struct{})}
	c.bySeq[seq] = e
	return e, true
}

func (e *dedupEntry) isDone() bool { return isClosed(e.done) }

// finish ends e: with keep, its answer is what repeats get.
func (t *dedupTable) finish(k clientKey, seq uint64, e *dedupEntry, status wire.Status, reply []byte, keep bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if keep {
		e.stored = true
		e.status, e.reply = status, reply
	} else if c := t.clients[k]; c != nil && c.bySeq[seq] == e {
		delete(c.bySeq, seq)
	}
	close(e.done)
}

// await waits for e to finish; it reports whether e holds an answer.
func (e *dedupEntry) await(ctx context.Context) (bool, error) {
	select {
	case <-e.done:
		return e.stored, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// store records a RequestRecord (at replay, or as the apply of a live
// append, in which case the handler's entry gets the answer now and is
// finished by the handler).
func (t *dedupTable) store(partition uint32, r *wire.RequestRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.client(clientKey{r.ClientID, r.Incarnation})
	if r.Seq < c.low {
		return
	}
	e := c.bySeq[r.Seq]
	if e == nil {
		e = &dedupEntry{done: make(chan struct{})}
		close(e.done)
		c.bySeq[r.Seq] = e
	}
	e.stored = true
	e.status, e.reply = r.Status, r.Reply
	e.durable, e.partition = true, partition
}

// recordsOf returns the durable answers partition holds, for its
// snapshot.
func (t *dedupTable) recordsOf(partition uint32) []*wire.RequestRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*wire.RequestRecord
	for k, c := range t.clients {
		for seq, e := range c.bySeq {
			if e.durable && e.partition == partition {
				out = append(out, &wire.RequestRecord{ClientID: k.id, Incarnation: k.inc, Seq: seq, Status: e.status, Reply: e.reply})
			}
		}
	}
	return out
}

// forgetIdle drops the answers of clients not heard from since before.
func (t *dedupTable) forgetIdle(before time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.clients {
		if c.lastSeen.Before(before) {
			delete(t.clients, k)
		}
	}
}
