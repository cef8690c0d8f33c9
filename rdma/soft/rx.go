package soft

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Who reads a requester connection's responses.
//
// A READ's round trip ends when its response has been read and its
// completion pushed. If one goroutine read the socket and another waited
// on the CQ, every round trip would pay a goroutine hand-off: a wake-up
// of the waiter, and of an idle thread to run it, which on a two-core
// machine doubled an 8-byte READ's latency. So the goroutine waiting in
// CQ.Wait reads the socket itself whenever it can, as a TCP client reads
// its own replies, and a background goroutine reads only when nobody else
// will. The read turn passes between them under the queue pair's lock:
//
//   - rxBackground: the connection's goroutine reads (readResponses). It
//     starts so when the connection is dialed and keeps the turn while
//     requests are in flight; once none is left it goes idle.
//   - rxIdle: nobody reads. PostSend transmits requests directly; a
//     CQ.Wait that then finds its queue empty drives the connection
//     (drive) instead of sleeping.
//   - rxDriven: a goroutine in CQ.Wait reads, until its CQ has a
//     completion, its context ends or nothing is in flight; then the
//     connection is idle again. CQ.Poll also drives an idle connection,
//     without blocking: it applies the responses that have arrived whole,
//     as polling a hardware CQ finds what the NIC has done.
//
// An idle connection with requests in flight must not stay unread: RNR
// NAKs, errors and FENCEd requests need their responses read even if
// nobody waits on the send CQ. So the turn goes back to the background
// goroutine when requests are posted behind ones in flight (the
// background goroutine clocks batches, see transmitQueued), when the
// sender goroutine transmits or the application sleeps on another CQ
// (whoReadsLocked),
// when a Poll that cannot drive or a Wait that will sleep finds a CQ of
// the queue pair empty, when a Poll finds a response too large to take
// without blocking, when the transport timer fires, when the device's
// connections are dropped, and when the device's janitor finds the
// connection idle with work in flight for a whole tick without a driver.
type rxMode uint8

const (
	rxNone       rxMode = iota // no requester connection
	rxBackground               // readResponses reads
	rxIdle                     // nobody reads
	rxDriven                   // a goroutine in CQ.Wait reads
)

// janitorTick is how long a connection may stay idle, with requests in
// flight and nobody driving it, before its background goroutine reads
// again: a tick at least, two at most.
const janitorTick = 2 * time.Millisecond

// aLongTimeAgo is a read deadline that interrupts a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// readResponses is the background goroutine of requester connection r: it
// reads and applies responses whenever the read turn is its own, until the
// connection fails or stops being the queue pair's.
func (q *qp) readResponses(r *responseReader) {
	defer q.dev.wg.Done()
	for q.awaitTurn(r) {
		if r.br.Buffered() == 0 {
			r.transmitQueued()
		}
		if err := r.next(); err != nil {
			r.failed(err)
			return
		}
		if r.br.Buffered() == 0 {
			q.mu.Lock()
			if q.rxMode == rxBackground && q.out == r.c && q.sqHead == q.sqTail {
				q.rxMode = rxIdle
			}
			q.mu.Unlock()
		}
	}
}

// awaitTurn waits until the background goroutine of r is to read. It
// reports false once r's connection is no longer the queue pair's.
func (q *qp) awaitTurn(r *responseReader) bool {
	for {
		q.mu.Lock()
		current, turn := q.out == r.c, q.rxMode == rxBackground
		q.mu.Unlock()
		if !current {
			return false
		}
		if turn {
			return true
		}
		<-r.wake
	}
}

// toBackgroundLocked gives an idle connection's read turn to its
// background goroutine.
func (q *qp) toBackgroundLocked() {
	if q.rxMode != rxIdle {
		return
	}
	q.rxMode = rxBackground
	q.rx.kick()
}

// whoReadsLocked decides who will read the responses to requests just
// transmitted on an idle connection. A goroutine asleep in Wait on the
// send CQ is woken to drive it; if the application sleeps on the receive
// CQ instead, or the sender goroutine transmitted, the background
// goroutine reads; otherwise the poster is likely to wait or poll next,
// and the janitor covers it if not.
func (q *qp) whoReadsLocked(poster bool) {
	switch {
	case !poster:
		q.toBackgroundLocked()
	case q.sendCQ.sleepers.Load() > 0:
		q.listIdleLocked()
		q.sendCQ.wake(nil)
	case q.recvCQ != q.sendCQ && q.recvCQ.sleepers.Load() > 0:
		q.toBackgroundLocked()
	default:
		q.listIdleLocked()
	}
}

// releaseIdle gives the read turn back to the background goroutine if the
// connection is idle with requests in flight.
func (q *qp) releaseIdle() {
	q.mu.Lock()
	if q.sqHead < q.sqTail {
		q.toBackgroundLocked()
	}
	q.mu.Unlock()
}

// drive reads q's requester connection on the calling goroutine, which
// waits on c, until c has a completion, ctx ends, nothing is in flight
// or the connection fails. It reports false, having done nothing, unless
// the connection was idle with requests in flight.
func (q *qp) drive(ctx context.Context, c *cq) bool {
	r := q.takeTurn(false)
	if r == nil {
		return false
	}
	c.setDriver(&r.readTurn)
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, r.interrupt)
	}
	err := r.driveUntil(ctx, c)
	if stop != nil {
		stop()
	}
	c.setDriver(nil)
	q.endTurn(r, false, err)
	return true
}

// takeTurn gives the read turn to the calling goroutine if the connection
// is idle with requests in flight, and, with nonblock, can be read without
// blocking. It returns the connection's reader, or nil.
func (q *qp) takeTurn(nonblock bool) *responseReader {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rxMode != rxIdle || q.sqHead == q.sqNext || (nonblock && q.rx.src.raw == nil) {
		return nil
	}
	q.rxMode = rxDriven
	q.rxGen++
	return q.rx
}

// endTurn ends the calling goroutine's read turn after err (nil if the
// connection is fine). The connection is idle again unless requests wait
// for responses to clock them out, or stuck says a response waits to be
// read by a goroutine that may block: then the background goroutine reads.
func (q *qp) endTurn(r *responseReader, stuck bool, err error) {
	if err != nil {
		r.failed(err)
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.out != r.c || q.rxMode != rxDriven {
		return
	}
	q.rxMode = rxIdle
	switch {
	case stuck || q.sqNext < q.sqTail:
		q.toBackgroundLocked()
	case q.sqHead < q.sqNext:
		q.listIdleLocked()
	}
}

// driveUntil reads and applies responses until c has a completion, ctx
// ends or nothing is in flight. Only a read error is returned.
func (r *responseReader) driveUntil(ctx context.Context, c *cq) error {
	for r.park(ctx, c) {
		_, err := r.br.Peek(1)
		r.unpark()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue // interrupted: look again
		}
		if err != nil {
			return err
		}
		for {
			if err := r.next(); err != nil {
				return err
			}
			if r.br.Buffered() == 0 {
				break
			}
		}
		r.transmitQueued()
	}
	return nil
}

// park marks r's driver as about to block for the next response, then
// reports whether it should: parked first, so that a completion pushed
// after the check interrupts the read (see interrupt).
func (r *responseReader) park(ctx context.Context, c *cq) bool {
	r.setParked()
	q := r.q
	q.mu.Lock()
	inFlight := q.out == r.c && q.sqHead < q.sqNext
	q.mu.Unlock()
	if !inFlight || c.pending() || ctx.Err() != nil {
		r.unpark()
		return false
	}
	return true
}

// listIdleLocked notes that the connection is idle with requests in
// flight: its CQs' next Poll or sleeping Wait, or else the janitor, gives
// the read turn back to the background goroutine.
func (q *qp) listIdleLocked() {
	q.sendCQ.idleHint.Store(true)
	q.recvCQ.idleHint.Store(true)
	if q.janListed {
		return
	}
	d := q.dev
	d.janMu.Lock()
	defer d.janMu.Unlock()
	if d.janClosed {
		return
	}
	q.janListed = true
	d.janList[q] = janEntry{}
	if !d.janRunning {
		d.janRunning = true
		d.wg.Add(1)
		go d.janitor()
	}
}

// janEntry is what the janitor saw of a listed queue pair at its last
// tick.
type janEntry struct {
	seen bool
	gen  uint64 // the queue pair's rxGen then
}

// janitor gives the read turn back to the background goroutines of idle
// connections that nobody drove for a whole tick while requests were in
// flight. It runs while any queue pair is listed.
func (d *Device) janitor() {
	defer d.wg.Done()
	t := time.NewTimer(janitorTick)
	defer t.Stop()
	var qps []*qp
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.janMu.Lock()
		if len(d.janList) == 0 {
			d.janRunning = false
			d.janMu.Unlock()
			return
		}
		qps = qps[:0]
		for q := range d.janList {
			qps = append(qps, q)
		}
		d.janMu.Unlock()
		for _, q := range qps {
			d.sweep(q)
		}
		clear(qps)
		t.Reset(janitorTick)
	}
}

// sweep is the janitor's look at one listed queue pair.
func (d *Device) sweep(q *qp) {
	q.mu.Lock()
	defer q.mu.Unlock()
	d.janMu.Lock()
	defer d.janMu.Unlock()
	e := d.janList[q]
	switch {
	case q.rxMode != rxIdle || q.sqHead == q.sqTail:
		delete(d.janList, q)
		q.janListed = false
	case !e.seen || e.gen != q.rxGen:
		d.janList[q] = janEntry{seen: true, gen: q.rxGen}
	default:
		delete(d.janList, q)
		q.janListed = false
		q.toBackgroundLocked()
	}
}

// pollDrive applies, without blocking, the responses that have arrived on
// q's requester connection, for Poll. It reports false, having done
// nothing, unless the connection was idle with requests in flight and
// can be read without blocking.
func (q *qp) pollDrive() bool {
	r := q.takeTurn(true)
	if r == nil {
		return false
	}
	r.src.nonblock = true
	stuck, err := r.drain()
	r.src.nonblock = false
	if err == nil {
		r.transmitQueued()
	}
	q.endTurn(r, stuck, err)
	return true
}

// drain applies every response that has arrived whole. stuck reports one
// larger than the read buffer that has only partly arrived: taking the
// rest could block.
func (r *responseReader) drain() (stuck bool, err error) {
	for {
		b, err := r.br.Peek(frameHeaderSize)
		if errors.Is(err, errWouldBlock) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		var h frameHeader
		if err := h.decode(b); err != nil {
			return false, err
		}
		need := frameHeaderSize
		if h.Type == frameReadResp {
			need += int(h.Length)
		}
		if need > r.br.Size() {
			return true, nil
		}
		if _, err := r.br.Peek(need); errors.Is(err, errWouldBlock) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		if err := r.next(); err != nil {
			return false, err
		}
	}
}

// errWouldBlock is a non-blocking read finding no data.
var errWouldBlock = errors.New("would block")

// rxSource is what a requester connection's reader reads: the connection,
// or with nonblock only what the socket holds already.
type rxSource struct {
	c        *wireConn
	raw      syscall.RawConn // nil if the connection is not a socket
	nonblock bool

	// A non-blocking read's buffer and result, with readFD bound once, so
	// that an empty Poll allocates nothing.
	p      []byte
	n      int
	err    error
	readFD func(fd uintptr) bool
}

func newRxSource(c *wireConn) *rxSource {
	s := &rxSource{c: c}
	if sc, ok := c.Conn.(syscall.Conn); ok {
		s.raw, _ = sc.SyscallConn()
	}
	s.readFD = s.readOnce
	return s
}

// readOnce reads what the socket holds into s.p, never waiting for more.
func (s *rxSource) readOnce(fd uintptr) bool {
	for {
		s.n, s.err = unix.Read(int(fd), s.p)
		if s.err != unix.EINTR {
			return true
		}
	}
}

func (s *rxSource) Read(p []byte) (int, error) {
	if !s.nonblock {
		return s.c.Read(p)
	}
	s.p = p
	rerr := s.raw.Read(s.readFD)
	n, err := s.n, s.err
	s.p, s.err = nil, nil
	switch {
	case rerr != nil:
		return 0, rerr
	case err == unix.EAGAIN:
		return 0, errWouldBlock
	case err != nil:
		return 0, err
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// readTurn is what the goroutines taking turns at reading one connection
// share: the background goroutine's wake-up, and the interruptible park
// of a driver.
type readTurn struct {
	c *wireConn
	// wake rouses the background goroutine when the read turn becomes
	// its, or when the connection stops being the queue pair's.
	wake chan struct{}

	// intrMu guards parked and interrupted: a driver parked waiting for
	// the next frame can be interrupted (by a read deadline in the past)
	// when a completion arrives from elsewhere or its context ends.
	intrMu      sync.Mutex
	parked      bool
	interrupted bool
}

func newReadTurn(c *wireConn) readTurn {
	return readTurn{c: c, wake: make(chan struct{}, 1)}
}

// kick wakes the background goroutine.
func (t *readTurn) kick() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// setParked marks the reader as about to block for the next frame. The
// caller checks whether it still should after this, so that an interrupt
// racing with the check is not lost.
func (t *readTurn) setParked() {
	t.intrMu.Lock()
	t.parked = true
	t.intrMu.Unlock()
}

// unpark ends a parked read, clearing the deadline an interrupt set.
func (t *readTurn) unpark() {
	t.intrMu.Lock()
	t.parked = false
	if t.interrupted {
		t.interrupted = false
		t.c.SetReadDeadline(time.Time{})
	}
	t.intrMu.Unlock()
}

// interrupt makes a parked read return at once. It does nothing to a read
// in the middle of a frame, which stays whole.
func (t *readTurn) interrupt() {
	t.intrMu.Lock()
	if t.parked && !t.interrupted {
		t.interrupted = true
		t.c.SetReadDeadline(aLongTimeAgo)
	}
	t.intrMu.Unlock()
}
