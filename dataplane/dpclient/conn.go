package dpclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/rdma"
)

// dataConn is the client's data connection to one node: one RC queue pair
// with a completion queue of its own, on which many requests are in flight
// at once. Whoever waits for a request polls the completion queue itself
// when nobody else does (and hands completions of others to them), so a
// lone request costs no goroutine hand-off: the soft provider then reads
// the response on the waiting goroutine.
type dataConn struct {
	node  cluster.NodeID
	conn  *rdma.Conn
	cq    rdma.CQ
	grant dataplane.Grant

	// slots bounds the work requests outstanding on the send queue.
	slots chan struct{}
	// taking is held by the post taking slots (see acquire).
	taking chan struct{}

	pollMu   sync.Mutex
	pollTurn chan struct{}
	// pollCtx ends when the connection fails, waking a poller.
	pollCtx    context.Context
	pollCancel context.CancelFunc

	mu      sync.Mutex
	pending map[uint64]*request
	nextID  uint64
	err     error // set once the connection failed

	closeOnce sync.Once
	broken    atomic.Bool
}

// request is one group of work requests posted together; the last one is
// signaled and ends it.
type request struct {
	nwr  int
	done chan struct{}
	err  error
}

var errConnLost = errors.New("dpclient: data connection lost")

func newDataConn(node cluster.NodeID, conn *rdma.Conn, cq rdma.CQ, grant dataplane.Grant, depth int) *dataConn {
	c := &dataConn{node: node, conn: conn, cq: cq, grant: grant, slots: make(chan struct{}, depth),
		taking: make(chan struct{}, 1), pollTurn: make(chan struct{}, 1), pending: make(map[uint64]*request)}
	c.pollCtx, c.pollCancel = context.WithCancel(context.Background())
	go func() {
		select {
		case <-conn.Done():
			c.fail(fmt.Errorf("%w to node %s: peer closed it", errConnLost, node))
		case <-c.pollCtx.Done():
		}
	}()
	return c
}

// post posts wrs as one request; the caller waits for it with wait.
func (c *dataConn) post(ctx context.Context, wrs []rdma.SendWR) (*request, error) {
	if len(wrs) == 0 {
		return nil, nil
	}
	if len(wrs) > cap(c.slots) {
		return nil, fmt.Errorf("dpclient: %d work requests in one request, the queue holds %d", len(wrs), cap(c.slots))
	}
	if err := c.acquire(ctx, len(wrs)); err != nil {
		return nil, err
	}
	r := &request{nwr: len(wrs), done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		c.release(len(wrs))
		return nil, err
	}
	c.nextID++
	id := c.nextID
	c.pending[id] = r
	for i := range wrs {
		wrs[i].ID = id << 1
		wrs[i].Flags &^= rdma.SendSignaled
	}
	wrs[len(wrs)-1].ID |= 1
	wrs[len(wrs)-1].Flags |= rdma.SendSignaled
	err := c.conn.QP.PostSend(wrs)
	c.mu.Unlock()
	if err != nil {
		// A partial post leaves requests the queue pair owns: the
		// connection cannot be trusted any more.
		c.fail(fmt.Errorf("%w: post: %w", errConnLost, err))
		<-r.done
		return nil, r.err
	}
	return r, nil
}

// acquire takes n slots, one post at a time, and none if it fails. Posts
// taking slots in turn could each hold part of the queue and wait for the
// rest, which only posted requests give back: with none posted, they
// waited for each other until their contexts ended, and returned without
// giving back what they held, so that every later post on the connection
// waited in vain (the mount hung on a fragmented file: two 1 MiB writes of
// over 128 extents each).
func (c *dataConn) acquire(ctx context.Context, n int) error {
	select {
	case c.taking <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.pollCtx.Done():
		return c.failure()
	}
	defer func() { <-c.taking }()
	for i := range n {
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			c.release(i)
			return ctx.Err()
		case <-c.pollCtx.Done():
			c.release(i)
			return c.failure()
		}
	}
	return nil
}

func (c *dataConn) release(n int) {
	for range n {
		<-c.slots
	}
}

func (c *dataConn) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// finish ends r with err (nil: success); c.mu is held.
func (c *dataConn) finish(id uint64, r *request, err error) {
	delete(c.pending, id)
	if r.err == nil {
		r.err = err
	}
	close(r.done)
	c.release(r.nwr)
}

// dispatch applies completions to their requests.
func (c *dataConn) dispatch(wcs []rdma.WorkCompletion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range wcs {
		wc := &wcs[i]
		id := wc.ID >> 1
		r := c.pending[id]
		if r == nil {
			continue
		}
		if wc.Status != rdma.WCSuccess && r.err == nil {
			r.err = wc.Err()
		}
		if wc.ID&1 == 1 {
			c.finish(id, r, nil)
		}
	}
}

// wait returns once r is finished. A context that ends first breaks the
// connection, since the memory r names must not be written after wait
// returns.
func (c *dataConn) wait(ctx context.Context, r *request) error {
	var wcs [32]rdma.WorkCompletion
	for {
		select {
		case <-r.done:
			return r.err
		default:
		}
		if c.pollMu.TryLock() {
			for {
				select {
				case <-r.done:
				default:
					n, err := c.cq.Wait(c.pollCtx, wcs[:])
					if err == nil {
						c.dispatch(wcs[:n])
						continue
					}
					if c.pollCtx.Err() == nil {
						c.fail(fmt.Errorf("%w: completion queue: %w", errConnLost, err))
					}
				}
				break
			}
			c.pollMu.Unlock()
			select {
			case c.pollTurn <- struct{}{}:
			default:
			}
			continue
		}
		select {
		case <-r.done:
			return r.err
		case <-c.pollTurn:
		case <-ctx.Done():
			c.fail(fmt.Errorf("%w: %w", errConnLost, ctx.Err()))
		}
	}
}

// fail marks the connection dead, closes its queue pair (no more access to
// the memory of its requests) and ends every pending request with err.
func (c *dataConn) fail(err error) {
	c.closeOnce.Do(func() {
		c.broken.Store(true)
		c.mu.Lock()
		c.err = err
		c.conn.Close()
		for id, r := range c.pending {
			c.finish(id, r, err)
		}
		c.mu.Unlock()
		c.pollCancel()
		go func() {
			// The completion queue goes once no poller uses it.
			c.pollMu.Lock()
			c.cq.Close()
			c.pollMu.Unlock()
		}()
	})
}

// alive reports whether the connection still works.
func (c *dataConn) alive() bool { return !c.broken.Load() }
