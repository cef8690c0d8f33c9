package rpc

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
)

// fullQP is a queue pair whose send queue takes `room` work requests, then
// refuses with ErrQueueFull until freed.
type fullQP struct {
	rdma.QP
	mu     sync.Mutex
	room   int
	posted []uint64
	freed  chan struct{}
}

func (q *fullQP) PostSend(wrs []rdma.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	select {
	case <-q.freed:
		q.room = len(wrs)
	default:
	}
	for i, wr := range wrs {
		if q.room == 0 {
			return &rdma.PostError{Index: i, Err: rdma.ErrQueueFull}
		}
		q.room--
		q.posted = append(q.posted, wr.ID)
	}
	return nil
}

// TestPostPendingFullQueue: the replies a worker made in a batch that do
// not fit the send queue are posted by a goroutine once it has room, in
// order, and the worker never waits for it (teardown does, through the
// connection's handler count).
func TestPostPendingFullQueue(t *testing.T) {
	q := &fullQP{room: 2, freed: make(chan struct{})}
	c := &serverConn{qp: q, failed: make(chan struct{})}
	for i := range 5 {
		c.pending = append(c.pending, rdma.SendWR{ID: uint64(i)})
	}
	c.postPending() // returns at once: the queue took two
	require.Empty(t, c.pending)
	q.mu.Lock()
	require.Equal(t, []uint64{0, 1}, q.posted)
	q.mu.Unlock()
	close(q.freed)
	c.handlers.Wait()
	require.Equal(t, []uint64{0, 1, 2, 3, 4}, q.posted)
	select {
	case <-c.failed:
		t.Fatalf("the connection failed: %v", c.failErr)
	default:
	}
}
