package soft

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/octofs/octofs/rdma"
)

// A link is the one TCP connection between a queue pair and its peer. It
// carries both directions of the RC connection: this side's requests and
// its responses to the peer's requests go out interleaved, frame by frame
// (link_tx.go), and the peer's come in the same way (link_rx.go). An
// acknowledgement rides on whatever goes the other way (wire.go).
//
// Reading. A frame is applied by whoever holds the link's read turn, and
// the turn passes, under qp.mu, between:
//
//   - the link's background goroutine (rxBackground), which reads when
//     nobody else will: from the start, and whenever the link has been
//     idle for idleGrace;
//   - a goroutine in CQ.Wait on a CQ of this queue pair alone (rxDriven),
//     which reads the socket itself rather than sleep and be woken by the
//     background goroutine: a READ's response, or a SEND that completes a
//     receive, reaches the goroutine waiting for it with no hand-off in
//     between. CQ.Poll drives the link the same way without blocking;
//   - nobody (rxIdle), between a driver's turns. The device's janitor
//     (janitor.go) gives the turn back to the background goroutine if no
//     driver comes back within idleGrace, so a peer's requests are never
//     left unread for long.
//
// A driver that finds the background goroutine holding the turn evicts
// it (interrupting its read), which costs one wake-up; that happens only
// after the link sat idle for idleGrace. Reading is resumable at any byte
// (link_rx.go), so a driver whose context ends, or that is evicted,
// leaves a frame half read for the next reader.
//
// Writing never waits for the peer on an application's goroutine: posters
// and readers write what the socket takes at once, without blocking, and
// the link's writer goroutine writes the rest (link_tx.go).
//
// Memory. Neither a read nor a write holds a memory region across a wait
// for the network: a region is acquired for one copy or one non-blocking
// system call at a time (mr.go), so Dereg returns promptly whatever the
// peer does.
type link struct {
	q   *qp
	dev *Device
	nc  net.Conn
	raw syscall.RawConn

	closed    chan struct{} // closed when the connection is closed
	closeOnce sync.Once
	broken    atomic.Bool // the connection failed: nothing more to send

	// Guarded by q.mu:
	detached  bool // no longer its queue pair's link
	mode      rxMode
	gen       uint64        // counts driver turns
	evicting  bool          // a driver waits for the background goroutine to yield
	watched   bool          // on the device's janitor list (janitor.go)
	grace     time.Duration // janitor ticks an idle link waits (tests lengthen it)
	idleTicks time.Duration // how long the janitor has seen it idle
	janGen    uint64        // gen at the janitor's last look

	// The responder's output, guarded by q.mu (link_tx.go).
	resp        []respItem // responses in PSN order; resp[respHead:] are unsent
	respHead    int
	respSeq     uint64    // the next response's seq
	ackDue      time.Time // with Faults.SetDelay: the owed ACK is not sent before
	ackOwed     bool
	ackPSN      uint32 // the last executed request to acknowledge
	ackDelay    bool   // the owed ACK may wait for a frame to ride on
	ackUnsent   int    // requests executed since the last ACK went out
	pingpong    bool   // the application answers messages: delay ACKs
	recvSinceTx bool   // a receive completed since this side last sent a request
	ackSeq      uint64 // counts requests executed (janitor)
	janAckSeq   uint64 // ackSeq at the janitor's last look
	draining    bool   // parting: flush responses and ACKs, then close
	rxMR        *mr    // the region a WRITE being received targets (watched)
	rxMRPSN     uint32 // that WRITE's PSN

	bgWake  chan struct{} // wakes the background goroutine
	evicted chan struct{} // the background goroutine yielded to a driver
	wrWake  chan struct{} // wakes the writer goroutine
	txAgain atomic.Bool   // a transmitter found txMu taken: look again
	// respSent is the seq after the last response completely written
	// (set by the writer without q.mu, so that Dereg never revokes a
	// response that is out already: mrRevoked).
	respSent atomic.Uint64

	// intrMu guards parked and interrupted: a reader parked waiting for
	// the socket can be interrupted (by a read deadline in the past).
	intrMu      sync.Mutex
	parked      bool
	interrupted bool

	rx     rxState            // the read turn's holder's
	readFn func(uintptr) bool // l.readOnce, bound once

	// The driver holding the turn, for driverStop (bound once).
	drvCQ        *cq
	drvCtx       context.Context
	driverStopFn func() bool

	// The context whose end interrupts a parked driver (watchCtxLocked),
	// guarded by q.mu.
	ctx     context.Context
	ctxStop func() bool

	txMu    sync.Mutex
	tx      txState            // guarded by txMu
	writeFn func(uintptr) bool // l.writeOnce, bound once
}

type rxMode uint8

const (
	rxBackground rxMode = iota // the background goroutine reads
	rxIdle                     // nobody reads
	rxDriven                   // a goroutine in CQ.Wait or CQ.Poll reads
)

// idleGrace is how long a link may sit unread between a driver's turns
// before its background goroutine reads it (give or take a janitor tick;
// longer while the janitor backs off, see janitor.go).
const idleGrace = janitorTick

// partTimeout bounds how long a parting link flushes what it owes the
// peer (a NAK may come after megabytes of READ data), and waits for it to
// close.
const partTimeout = 5 * time.Second

// attachLinkLocked makes nc the queue pair's link and starts its
// goroutines.
func (q *qp) attachLinkLocked(nc net.Conn) {
	l := &link{
		q:        q,
		dev:      q.dev,
		nc:       nc,
		closed:   make(chan struct{}),
		mode:     rxBackground,
		pingpong: true,
		bgWake:   make(chan struct{}, 1),
		evicted:  make(chan struct{}, 1),
		wrWake:   make(chan struct{}, 1),
	}
	if sc, ok := nc.(syscall.Conn); ok {
		l.raw, _ = sc.SyscallConn()
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	l.rx.init(q)
	l.readFn = l.readOnce
	l.writeFn = l.writeOnce
	l.driverStopFn = l.driverStop
	l.grace = idleGrace
	q.link = l
	q.progress.Add(1)
	q.dev.wg.Add(2)
	go l.background()
	go l.writer()
	if q.sqNext < q.sqTail {
		kick(l.wrWake) // requests posted before the link was up
	}
}

// kick wakes a goroutine waiting on ch.
func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// current reports whether l is still its queue pair's link; the caller
// holds q.mu.
func (l *link) currentLocked() bool { return l.q.link == l && !l.detached }

// partLocked ends the queue pair's use of the link (Reset, Close, Err).
// What the link owes the peer (queued responses, such as a NAK that put
// the queue pair in error, and acknowledgements of requests already
// executed, which the peer's application may have seen complete) is
// flushed by the writer within partTimeout; then the link closes. A
// broken link just closes.
func (l *link) partLocked() {
	if l.detached {
		return
	}
	l.detached = true
	l.draining = true
	if l.mode != rxDriven {
		l.mode = rxBackground // it reads what remains (drainInput)
		kick(l.bgWake)
	}
	l.interrupt() // a driver stops, and releases to it
	if l.broken.Load() {
		l.close()
		return
	}
	// A writer blocked on a peer that stopped reading gives up then.
	l.nc.SetWriteDeadline(time.Now().Add(partTimeout))
	kick(l.wrWake)
}

// mrRevoked fails at once the peer's operations in progress on m, which
// Dereg has just made unreachable: a WRITE whose payload is arriving, a
// READ whose response is queued or going out. They end with a remote
// access error and the queue pair in error (an IB class C error), however
// long the peer would take to send or read their bytes.
func (l *link) mrRevoked(m *mr) {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.currentLocked() {
		return
	}
	hit := false
	sent := l.respSent.Load()
	for i := l.respHead; i < len(l.resp); i++ {
		if l.resp[i].mr == m && l.resp[i].seq >= sent {
			l.resp[i].revoked = true
			hit = true
		}
	}
	if l.rxMR == m {
		l.pushRespLocked(respItem{kind: respNak, psn: l.rxMRPSN, code: uint8(nakRemoteAccess)})
		hit = true
	}
	if hit {
		q.failLocked(rdma.WCWRFlushErr)
	}
}

// unwatchLocked forgets the regions the link watches (mr.watch).
func (l *link) unwatchLocked() {
	if l.rxMR != nil {
		l.rxMR.unwatch(l)
		l.rxMR = nil
	}
	for i := l.respHead; i < len(l.resp); i++ {
		if it := &l.resp[i]; it.mr != nil && it.watched {
			it.mr.unwatch(l)
			it.watched = false
		}
	}
}

// close closes the connection once; the link's goroutines then end.
func (l *link) close() {
	l.closeOnce.Do(func() {
		l.broken.Store(true)
		close(l.closed)
		l.dev.untrack(l.nc)
		kick(l.bgWake)
		kick(l.wrWake)
	})
}

// ioFailed handles a failed read or write: the connection is gone, or
// the peer broke the protocol. The queue pair fails as a NIC's does when
// its retries run out (or, for a malformed response, with a bad response
// status).
func (l *link) ioFailed(err error) {
	q := l.q
	l.broken.Store(true)
	q.mu.Lock()
	if l.currentLocked() {
		status := rdma.WCRetryExcErr
		if errors.Is(err, rdma.ErrProtocol) {
			q.dev.log.Warn("closing link: peer broke the protocol", "qpn", q.qpn, "err", err)
			status = rdma.WCBadRespErr
		} else {
			q.dev.connsLost.Add(1)
		}
		q.failLocked(status)
	}
	q.mu.Unlock()
	l.close()
}

// background is the link's background reader.
func (l *link) background() {
	defer l.dev.wg.Done()
	q := l.q
	defer func() {
		q.mu.Lock()
		l.unwatchLocked()
		l.unwatchCtxLocked()
		q.mu.Unlock()
	}()
	for {
		q.mu.Lock()
		for {
			if l.broken.Load() {
				q.mu.Unlock()
				return
			}
			if l.evicting && l.mode == rxBackground && !l.detached {
				l.evicting = false
				l.mode = rxIdle
				kick(l.evicted)
			}
			if l.mode == rxBackground {
				break
			}
			q.mu.Unlock()
			select {
			case <-l.bgWake:
			case <-l.closed:
				return
			}
			q.mu.Lock()
		}
		draining := l.detached
		q.mu.Unlock()
		if draining {
			l.drainInput()
			return
		}
		if err := l.pump(true, l.bgShouldStop); err != nil && !errors.Is(err, errTurnOver) {
			l.ioFailed(err)
			return
		}
	}
}

// bgShouldStop tells the background goroutine to give up the turn.
func (l *link) bgShouldStop() bool {
	l.q.mu.Lock()
	defer l.q.mu.Unlock()
	return l.evicting || l.mode != rxBackground || l.detached
}

// drainInput reads and discards what a parting link still receives, so
// that the peer can read what was flushed to it (closing a socket with
// unread input resets the connection), until the peer closes or
// partTimeout passes.
func (l *link) drainInput() {
	l.nc.SetReadDeadline(time.Now().Add(partTimeout))
	var buf [16 << 10]byte
	for {
		if _, err := l.nc.Read(buf[:]); err != nil {
			l.close()
			return
		}
	}
}

// toBackgroundLocked gives an idle link's read turn to its background
// goroutine.
func (l *link) toBackgroundLocked() {
	if l.mode != rxIdle {
		return
	}
	l.mode = rxBackground
	kick(l.bgWake)
}

// releaseLocked ends a driver's turn. The link stays idle for the next
// driver, and the janitor hands it over if none comes within idleGrace;
// but a frame left half read by a driver that gives up (its context
// ended: abandon) goes to the background goroutine at once. (A driver
// that returns with a completion comes back for the next one: handing a
// half-read frame over to the background goroutine, to be evicted by the
// next Wait, cost two wake-ups per completion of a stream of large READs.)
func (l *link) releaseLocked(abandon bool) {
	if l.mode != rxDriven {
		return
	}
	l.mode = rxIdle
	l.endTurnWatch()
	if l.detached || (abandon && l.rx.inFrame) {
		l.toBackgroundLocked()
		return
	}
	l.q.sendCQ.idleHint.Store(true)
	l.q.recvCQ.idleHint.Store(true)
	l.watchLocked()
}

// releaseIdle gives an idle link's read turn to its background
// goroutine: a waiter on one of the queue pair's CQs is going to sleep.
func (q *qp) releaseIdle() {
	q.mu.Lock()
	if l := q.link; l != nil {
		l.toBackgroundLocked()
	}
	q.mu.Unlock()
}

// errTurnOver ends a reader's turn: it was told to stop.
var errTurnOver = errors.New("turn over")

// drive reads q's link on the calling goroutine, which waits on c, until
// c has a completion, ctx ends or the link fails. It reports false,
// having done nothing, if the link cannot be driven now (none yet,
// another driver, or parting).
func (q *qp) drive(ctx context.Context, c *cq) bool {
	l := q.takeTurn(ctx, true)
	if l == nil {
		return false
	}
	c.setDriver(l)
	l.drvCQ, l.drvCtx = c, ctx
	err := l.pump(true, l.driverStopFn)
	l.drvCQ, l.drvCtx = nil, nil
	c.setDriver(nil)
	q.endTurn(l, err, ctx.Err() != nil)
	return true
}

// driverStop tells a driver to give up the turn: its CQ has something,
// its context ended, or the link parted. (Bound once, as driverStopFn,
// so that a Wait allocates nothing.)
func (l *link) driverStop() bool {
	return l.drvCQ.pending() || l.drvCtx.Err() != nil || l.turnTaken()
}

// watchCtxLocked makes the end of ctx interrupt a parked driver. A
// context without a deadline (a dispatcher's, which waits with one
// context for its whole life) stays registered for the next driver with
// the same context, so that it costs an allocation per context, not per
// Wait; one with a deadline (a call's) only for the driver's turn
// (endTurnWatch). A context's end interrupts whoever is parked then: a
// driver with another context looks at its own and parks again.
func (l *link) watchCtxLocked(ctx context.Context) {
	if ctx.Done() == nil || ctx == l.ctx {
		return
	}
	l.unwatchCtxLocked()
	l.ctx, l.ctxStop = ctx, context.AfterFunc(ctx, l.interrupt)
}

// endTurnWatch forgets a context with a deadline at the end of its
// driver's turn: such a context is usually a call's, which ends right
// after the call, and a watch left in place would then start a goroutine
// to interrupt whoever reads next, for nothing.
func (l *link) endTurnWatch() {
	if l.ctx == nil {
		return
	}
	if _, ok := l.ctx.Deadline(); ok {
		l.unwatchCtxLocked()
	}
}

// unwatchCtxLocked forgets the context watchCtxLocked registered.
func (l *link) unwatchCtxLocked() {
	if l.ctxStop != nil {
		l.ctxStop()
		l.ctx, l.ctxStop = nil, nil
	}
}

// What pollDrive did.
const (
	pollDrove   = iota // read what the link had
	pollUseless        // nothing: the link cannot give the CQ a completion
	pollBusy           // nothing: the link is not idle (or gone)
)

// pollDrive applies what has arrived on q's link without blocking, for
// CQ.Poll on c, if the link is idle and could give c a completion:
// requests in flight for a send CQ, receives posted for a receive CQ. (An
// application that reaps its send CQ now and then, with nothing in
// flight, would otherwise pay a read that finds nothing every time; and
// it must not hand the link to the background goroutine either, which
// the next Wait would have to evict.) A peer's requests that arrive
// meanwhile are read by the next Wait or useful Poll, or by the
// background goroutine once the janitor finds the link left idle.
func (q *qp) pollDrive(c *cq) int {
	q.mu.Lock()
	useful := (c == q.sendCQ && q.sqHead < q.sqNext) || (c == q.recvCQ && q.rqHead < q.rqTail)
	q.mu.Unlock()
	if !useful {
		return pollUseless
	}
	l := q.takeTurn(context.Background(), false)
	if l == nil {
		return pollBusy
	}
	err := l.pump(false, nil)
	if errors.Is(err, errWouldBlock) {
		err = nil
	}
	q.endTurn(l, err, false)
	return pollDrove
}

// takeTurn gives the calling goroutine the read turn of q's link if it is
// idle. If the background goroutine holds it, the goroutine is evicted:
// with wait, takeTurn waits (within ctx) for it to yield and takes the
// turn; without (Poll, which never waits), the next call finds it idle.
func (q *qp) takeTurn(ctx context.Context, wait bool) *link {
	q.mu.Lock()
	l := q.link
	if l == nil || l.detached || l.broken.Load() {
		q.mu.Unlock()
		return nil
	}
	if l.mode == rxBackground {
		if !wait {
			if !l.evicting {
				l.evicting = true
				q.mu.Unlock()
				l.interrupt()
				return nil
			}
			q.mu.Unlock()
			return nil
		}
		select {
		case <-l.evicted: // a stale token
		default:
		}
		l.evicting = true
		q.mu.Unlock()
		l.interrupt()
		select {
		case <-l.evicted:
		case <-ctx.Done():
		case <-l.closed:
		}
		q.mu.Lock()
		l.evicting = false
		if q.link != l || l.detached || ctx.Err() != nil {
			l.toBackgroundLocked()
			q.mu.Unlock()
			return nil
		}
	}
	if l.mode != rxIdle {
		q.mu.Unlock()
		return nil
	}
	l.mode = rxDriven
	l.gen++
	if wait {
		l.watchCtxLocked(ctx)
	}
	q.mu.Unlock()
	return l
}

// turnTaken reports whether a driver lost its turn (the link parted).
func (l *link) turnTaken() bool {
	l.q.mu.Lock()
	defer l.q.mu.Unlock()
	return l.mode != rxDriven || l.detached
}

// endTurn ends a driver's turn after err (nil if the link is fine);
// abandon says the driver gives up waiting (see releaseLocked).
func (q *qp) endTurn(l *link, err error, abandon bool) {
	if err != nil && !errors.Is(err, errTurnOver) {
		l.ioFailed(err)
		return
	}
	q.mu.Lock()
	l.releaseLocked(abandon)
	q.mu.Unlock()
}

// park marks the turn's holder as about to block for input, then reports
// whether it should: parked first, so that an interrupt racing with the
// check is not lost.
func (l *link) park(stop func() bool) bool {
	l.intrMu.Lock()
	l.parked = true
	l.intrMu.Unlock()
	if stop != nil && stop() {
		l.unpark()
		return false
	}
	return true
}

// unpark ends a parked read, clearing the deadline an interrupt set.
func (l *link) unpark() {
	l.intrMu.Lock()
	l.parked = false
	if l.interrupted {
		l.interrupted = false
		l.nc.SetReadDeadline(time.Time{})
	}
	l.intrMu.Unlock()
}

// aLongTimeAgo is a read deadline that interrupts a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// interrupt makes a parked read return at once; an unparked reader sees
// the reason when it next looks.
func (l *link) interrupt() {
	l.intrMu.Lock()
	if l.parked && !l.interrupted {
		l.interrupted = true
		l.nc.SetReadDeadline(aLongTimeAgo)
	}
	l.intrMu.Unlock()
}
