package soft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/octofs/octofs/rdma"
)

// cq is a completion queue: a ring of depth entries. Completions beyond
// depth overrun it, which puts the CQ and every queue pair using it in
// error, as on hardware.
type cq struct {
	mu      sync.Mutex
	ring    []rdma.WorkCompletion
	head, n int
	overrun bool
	closed  bool
	users   map[*qp]struct{}
	// notify holds a token when completions may be waiting, to wake Wait.
	notify chan struct{}
	// driver is the link a goroutine in Wait reads (link.go), to be
	// interrupted when a completion arrives from elsewhere.
	driver atomic.Pointer[link]
	// idleHint is set when a link of a queue pair of the CQ went idle
	// (link.releaseLocked): a Wait that is going to sleep hands such
	// links to their background goroutines.
	idleHint atomic.Bool
}

var _ rdma.CQ = (*cq)(nil)

func newCQ(depth int) *cq {
	return &cq{
		ring:   make([]rdma.WorkCompletion, depth),
		users:  make(map[*qp]struct{}),
		notify: make(chan struct{}, 1),
	}
}

// push appends a completion. When the CQ overruns it reports false, and the
// first overrun puts every queue pair of the CQ in error.
func (c *cq) push(wc rdma.WorkCompletion) bool {
	c.mu.Lock()
	if c.overrun || c.closed {
		c.mu.Unlock()
		return false
	}
	d := c.driver.Load()
	if c.n == len(c.ring) {
		c.overrun = true
		c.mu.Unlock()
		c.wake(d)
		c.failUsers()
		return false
	}
	i := c.head + c.n
	if i >= len(c.ring) {
		i -= len(c.ring)
	}
	c.ring[i] = wc
	c.n++
	c.mu.Unlock()
	c.wake(d)
	return true
}

// wake wakes a goroutine sleeping in Wait, and interrupts d, the driver
// of a link (nil if none): a completion it did not read itself has
// arrived.
func (c *cq) wake(d *link) {
	select {
	case c.notify <- struct{}{}:
	default:
	}
	if d != nil {
		d.interrupt()
	}
}

func (c *cq) setDriver(r *link) { c.driver.Store(r) }

// pending reports whether Poll would return something: a completion or
// an error.
func (c *cq) pending() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n > 0 || c.overrun || c.closed
}

// drivable returns the queue pair whose link a waiter on the CQ may
// drive: the CQ's only queue pair. (A CQ shared by several queue pairs
// is fed by their links' background goroutines.)
func (c *cq) drivable() *qp {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.users) != 1 {
		return nil
	}
	for q := range c.users {
		return q
	}
	return nil
}

// releaseIdle gives the read turn of the CQ's queue pairs' idle links
// back to their background goroutines: the caller is about to sleep and
// rely on them.
func (c *cq) releaseIdle() {
	if !c.idleHint.Swap(false) {
		return
	}
	var buf [4]*qp
	qps := buf[:0]
	c.mu.Lock()
	for q := range c.users {
		qps = append(qps, q)
	}
	c.mu.Unlock()
	for _, q := range qps {
		q.releaseIdle()
	}
}

// failUsers moves every queue pair of the CQ to the error state, on its
// own goroutine, since the caller may hold a queue pair's lock.
func (c *cq) failUsers() {
	c.mu.Lock()
	qps := make([]*qp, 0, len(c.users))
	for q := range c.users {
		qps = append(qps, q)
	}
	c.mu.Unlock()
	go func() {
		for _, q := range qps {
			q.Modify(rdma.QPAttr{State: rdma.QPSErr})
		}
	}()
}

func (c *cq) Poll(wc []rdma.WorkCompletion) (int, error) {
	n, _, err := c.poll(wc)
	if n == 0 && err == nil {
		switch q := c.drivable(); {
		case q == nil:
			c.releaseIdle()
		default:
			switch q.pollDrive(c) {
			case pollDrove:
				n, _, err = c.poll(wc)
			case pollBusy:
				c.releaseIdle()
			}
		}
	}
	return n, err
}

// poll is Poll that also says how many completions remain.
func (c *cq) poll(wc []rdma.WorkCompletion) (n, remaining int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, 0, rdma.ErrClosed
	}
	if c.overrun {
		return 0, 0, rdma.ErrCQOverrun
	}
	n = min(len(wc), c.n)
	for i := 0; i < n; i++ {
		wc[i] = c.ring[c.head]
		c.head++
		if c.head == len(c.ring) {
			c.head = 0
		}
	}
	c.n -= n
	return n, c.n, nil
}

func (c *cq) Wait(ctx context.Context, wc []rdma.WorkCompletion) (int, error) {
	for {
		n, remaining, err := c.poll(wc)
		if n > 0 || err != nil {
			if remaining > 0 {
				// Pass the wake-up on to another waiter.
				c.wake(nil)
			}
			return n, err
		}
		if q := c.drivable(); q != nil && q.drive(ctx, c) {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			continue
		}
		c.releaseIdle()
		select {
		case <-c.notify:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// attach records that q uses the CQ.
func (c *cq) attach(q *qp) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("%w: completion queue", rdma.ErrClosed)
	}
	c.users[q] = struct{}{}
	return nil
}

func (c *cq) detach(q *qp) {
	c.mu.Lock()
	delete(c.users, q)
	c.mu.Unlock()
}

// Close destroys the CQ; like ibv_destroy_cq it refuses while queue pairs
// use it.
func (c *cq) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.users) > 0 {
		return fmt.Errorf("%w: %d queue pairs use the completion queue", rdma.ErrBusy, len(c.users))
	}
	c.closed = true
	c.wake(nil)
	return nil
}
