package soft

import (
	"crypto/rand"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/rdma"
)

// qp is an RC queue pair. Its lock guards the state machine, both work
// queues and the state its link shares with it (link.go); transmission
// holds the link's txMu, taken before qp.mu when both are needed.
//
// Lock order: link.txMu, then qp.mu, then cq.mu or Device.mu.
type qp struct {
	dev       *Device
	pd        *pd
	qpn       uint32
	psn       uint32 // the first PSN this side sends
	sendCQ    *cq
	recvCQ    *cq
	caps      rdma.QPCaps
	signalAll bool

	mu        sync.Mutex
	placed    *sync.Cond // on mu: signalled when placing drops to 0
	state     rdma.QPState
	destroyed bool
	access    rdma.Access
	remote    rdma.Endpoint
	secret    [rdma.SecretSize]byte // what a peer must present (Endpoint.Secret)
	stateCh   chan struct{}         // closed and replaced on every state change
	minRNR    rdma.RNRTimer
	rnrRetry  uint8
	budget    time.Duration // transport timeout × (retries+1); 0 is infinite

	// The send queue is a ring; the counters only grow. Slots in
	// [sqFree, sqHead) are completed requests that still hold their slot
	// (unsignaled ones, until a later signaled completion frees them, as
	// on a NIC); requests in [sqHead, sqNext) were transmitted and await
	// their response, those in [sqNext, sqTail) wait to be transmitted.
	sq                             []sendWQE
	sqFree, sqHead, sqNext, sqTail uint64
	nextPSN                        uint32
	rdAtomicInFlight               int    // transmitted READs and atomics (FENCE, maxRdAtomic)
	rdGot                          uint32 // bytes of the head READ's response placed
	rnrPaused                      bool   // waiting out an RNR NAK's timer
	txStopped                      bool   // a request failed locally; send nothing after it

	rq             []recvWQE
	rqHead, rqTail uint64

	link     *link         // the connection to the peer, once made
	linking  bool          // a hello was accepted and its answer is on the way
	connGen  uint64        // counts connections and attempts; a stale one gives up
	dialStop chan struct{} // closed to stop the dialing goroutine

	// placing counts copies into application memory in progress (a
	// receive's or a READ's buffers, link_rx.go). A failure while one is
	// in progress defers the flush completions until it ends, so that an
	// application never reuses a buffer that is still being written.
	placing      int
	failDeferred bool
	failStatus   rdma.WCStatus

	// The transport timer: it checks every quarter of the budget that
	// something moved on the link (progress counts events, a timestamp
	// per event would cost a clock read), and fails the queue pair after
	// four checks in a row without.
	watchdog      *time.Timer
	watchdogArmed bool
	progress      atomic.Uint64
	wdSeen        uint64 // progress at the last check
	wdIdle        int    // checks in a row without progress
}

var _ rdma.QP = (*qp)(nil)

type sendWQE struct {
	id       uint64
	op       rdma.Opcode
	flags    rdma.SendFlags
	sgl      []rdma.SGE
	inline   []byte
	isInline bool
	length   uint32
	imm      uint32
	raddr    uint64
	rkey     uint32
	cmp      uint64
	swap     uint64
	psn      uint32
	signaled bool
	rnrLeft  int // RNR retries left; negative is unlimited
	localErr rdma.WCStatus
}

type recvWQE struct {
	id  uint64
	sgl []rdma.SGE
}

// Defaults for zero QPConfig fields.
const (
	defaultMaxWR     = 128
	defaultMaxSGE    = 4
	defaultMaxInline = 64
)

// CreateQP creates a queue pair in the Reset state.
func (p *pd) CreateQP(cfg rdma.QPConfig) (rdma.QP, error) {
	sendCQ, ok1 := cfg.SendCQ.(*cq)
	recvCQ, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 || sendCQ == nil || recvCQ == nil {
		return nil, fmt.Errorf("%w: queue pair needs send and receive CQs of a soft device", rdma.ErrInvalid)
	}
	q := &qp{
		dev:    p.dev,
		pd:     p,
		psn:    rdma.RandomPSN(),
		sendCQ: sendCQ,
		recvCQ: recvCQ,
		caps: rdma.QPCaps{
			MaxSendWR:  orDefault(cfg.MaxSendWR, defaultMaxWR),
			MaxRecvWR:  orDefault(cfg.MaxRecvWR, defaultMaxWR),
			MaxSendSGE: orDefault(cfg.MaxSendSGE, defaultMaxSGE),
			MaxRecvSGE: orDefault(cfg.MaxRecvSGE, defaultMaxSGE),
			MaxInline:  orDefault(cfg.MaxInline, defaultMaxInline),
		},
		signalAll: cfg.SignalAll,
		stateCh:   make(chan struct{}),
	}
	q.placed = sync.NewCond(&q.mu)
	c := &q.caps
	switch {
	case c.MaxSendWR < 0 || c.MaxSendWR > softCaps.MaxQPWR || c.MaxRecvWR < 0 || c.MaxRecvWR > softCaps.MaxQPWR:
		return nil, fmt.Errorf("%w: work requests per queue (at most %d)", rdma.ErrInvalid, softCaps.MaxQPWR)
	case c.MaxSendSGE < 0 || c.MaxSendSGE > softCaps.MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > softCaps.MaxSGE:
		return nil, fmt.Errorf("%w: SGEs per request (at most %d)", rdma.ErrInvalid, softCaps.MaxSGE)
	case c.MaxInline < 0 || c.MaxInline > softCaps.MaxInline:
		return nil, fmt.Errorf("%w: inline data (at most %d bytes)", rdma.ErrInvalid, softCaps.MaxInline)
	}
	rand.Read(q.secret[:])
	q.sq = make([]sendWQE, c.MaxSendWR)
	for i := range q.sq {
		q.sq[i].sgl = make([]rdma.SGE, 0, c.MaxSendSGE)
		q.sq[i].inline = make([]byte, 0, c.MaxInline)
	}
	q.rq = make([]recvWQE, c.MaxRecvWR)
	for i := range q.rq {
		q.rq[i].sgl = make([]rdma.SGE, 0, c.MaxRecvSGE)
	}
	q.nextPSN = q.psn
	if err := p.hold(0, 1); err != nil {
		return nil, err
	}
	if err := sendCQ.attach(q); err != nil {
		p.release(0, 1)
		return nil, err
	}
	if err := recvCQ.attach(q); err != nil {
		sendCQ.detach(q)
		p.release(0, 1)
		return nil, err
	}
	d := p.dev
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		q.detachCQs()
		p.release(0, 1)
		return nil, rdma.ErrClosed
	}
	q.qpn = d.newQPNLocked()
	d.qps[q.qpn] = q
	d.mu.Unlock()
	return q, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (q *qp) detachCQs() {
	q.sendCQ.detach(q)
	q.recvCQ.detach(q)
}

func (q *qp) QPN() uint32 { return q.qpn }

// Caps returns the sizes of the queue pair: the soft provider grants
// exactly what QPConfig asked for (defaults for zero fields).
func (q *qp) Caps() rdma.QPCaps { return q.caps }

func (q *qp) State() rdma.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Endpoint tells the peer this queue pair's number, first PSN, secret and
// the device's address.
func (q *qp) Endpoint() rdma.Endpoint {
	q.mu.Lock()
	defer q.mu.Unlock()
	return rdma.Endpoint{QPN: q.qpn, PSN: q.psn, Addr: q.dev.addr, Secret: q.secret}
}

// setStateLocked changes the state and wakes hellos waiting for it.
func (q *qp) setStateLocked(s rdma.QPState) {
	if q.state == s {
		return
	}
	q.state = s
	close(q.stateCh)
	q.stateCh = make(chan struct{})
}

// Modify moves the queue pair to attr.State, following the verbs state
// machine: Reset→Init→RTR→RTS, Init→Init, RTS→RTS, anything→Err or Reset.
func (q *qp) Modify(attr rdma.QPAttr) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return rdma.ErrClosed
	}
	from, to := q.state, attr.State
	bad := func() error {
		return fmt.Errorf("%w: transition %v→%v", rdma.ErrBadState, from, to)
	}
	switch to {
	case rdma.QPSReset:
		q.resetLocked()
	case rdma.QPSInit:
		if from != rdma.QPSReset && from != rdma.QPSInit {
			return bad()
		}
		if attr.Access&^rdma.AccessAll != 0 {
			return fmt.Errorf("%w: unknown access bits %#x", rdma.ErrInvalid, uint32(attr.Access))
		}
		q.access = attr.Access
		q.setStateLocked(rdma.QPSInit)
	case rdma.QPSRTR:
		if from != rdma.QPSInit {
			return bad()
		}
		if attr.Remote.Addr == "" {
			return fmt.Errorf("%w: remote endpoint has no soft device address", rdma.ErrInvalid)
		}
		if attr.Remote.Addr == q.dev.addr && attr.Remote.QPN == q.qpn {
			return fmt.Errorf("%w: a soft queue pair cannot be connected to itself", rdma.ErrInvalid)
		}
		if attr.MinRNRTimer > 31 {
			return fmt.Errorf("%w: RNR timer %d", rdma.ErrInvalid, attr.MinRNRTimer)
		}
		q.remote = attr.Remote
		q.minRNR = attr.MinRNRTimer
		q.setStateLocked(rdma.QPSRTR)
		if q.dialsPeer() {
			q.startDialLocked()
		}
	case rdma.QPSRTS:
		if from != rdma.QPSRTR && from != rdma.QPSRTS {
			return bad()
		}
		if attr.RetryCount > 7 || attr.RNRRetry > 7 || attr.Timeout > 31 {
			return fmt.Errorf("%w: retry count and RNR retry are 0-7, timeout 0-31", rdma.ErrInvalid)
		}
		if attr.SendPSN > 0xffffff {
			return fmt.Errorf("%w: PSN %#x over 24 bits", rdma.ErrInvalid, attr.SendPSN)
		}
		if from == rdma.QPSRTR && attr.SendPSN != 0 {
			q.psn, q.nextPSN = attr.SendPSN, attr.SendPSN
		}
		q.rnrRetry = attr.RNRRetry
		q.budget = 0
		if attr.Timeout > 0 {
			q.budget = (4096 * time.Nanosecond << attr.Timeout) * time.Duration(attr.RetryCount+1)
		}
		q.setStateLocked(rdma.QPSRTS)
	case rdma.QPSErr:
		q.failLocked(rdma.WCWRFlushErr)
	default:
		return fmt.Errorf("%w: unknown state %v", rdma.ErrInvalid, to)
	}
	return nil
}

// Close destroys the queue pair. Outstanding requests are dropped without
// completions and the peer sees the connection close.
func (q *qp) Close() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	q.resetLocked()
	q.destroyed = true
	q.setStateLocked(rdma.QPSReset) // wakes waiting hellos, which find it destroyed
	close(q.stateCh)
	q.stateCh = make(chan struct{})
	q.mu.Unlock()
	q.dev.mu.Lock()
	delete(q.dev.qps, q.qpn)
	q.dev.mu.Unlock()
	q.detachCQs()
	q.pd.release(0, 1)
	return nil
}

// resetLocked returns to Reset: queues emptied without completions, the
// link closed (after what it owes the peer, see link.part) and a new
// secret, so that nobody who knew the old endpoint can connect. It
// returns once no copy into the queues' buffers is in progress.
func (q *qp) resetLocked() {
	q.setStateLocked(rdma.QPSReset)
	q.stopTransportLocked()
	for q.placing > 0 {
		q.placed.Wait()
	}
	q.failDeferred = false
	q.sqFree, q.sqHead, q.sqNext, q.sqTail = 0, 0, 0, 0
	q.rqHead, q.rqTail = 0, 0
	q.nextPSN = q.psn
	q.rdAtomicInFlight = 0
	q.rdGot = 0
	q.rnrPaused = false
	q.txStopped = false
	rand.Read(q.secret[:])
}

// stopTransportLocked parts with the link, stops dialing and the
// watchdog.
func (q *qp) stopTransportLocked() {
	q.connGen++
	if q.link != nil {
		q.link.partLocked()
		q.link = nil
	}
	q.linking = false
	if q.dialStop != nil {
		close(q.dialStop)
		q.dialStop = nil
	}
	if q.watchdog != nil {
		q.watchdog.Stop()
	}
	q.watchdogArmed = false
}

// failLocked moves the queue pair to Err. The oldest outstanding send
// request completes with status (unless status is WCWRFlushErr), every
// other posted request on both queues with WCWRFlushErr. If a copy into
// application memory is in progress, the completions wait for its end.
func (q *qp) failLocked(status rdma.WCStatus) {
	if q.state == rdma.QPSErr || q.state == rdma.QPSReset {
		q.setStateLocked(rdma.QPSErr)
		return
	}
	q.setStateLocked(rdma.QPSErr)
	q.stopTransportLocked()
	if q.placing > 0 {
		q.failDeferred = true
		q.failStatus = status
		return
	}
	q.flushLocked(status)
}

// flushLocked completes every posted request of a failed queue pair.
func (q *qp) flushLocked(status rdma.WCStatus) {
	for ; q.sqHead < q.sqTail; q.sqHead++ {
		w := &q.sq[q.sqHead%uint64(len(q.sq))]
		q.sendCQ.push(rdma.WorkCompletion{ID: w.id, Status: status, Opcode: rdma.WCOpcodeOf(w.op), QPN: q.qpn})
		status = rdma.WCWRFlushErr
	}
	q.sqFree, q.sqNext = q.sqHead, q.sqHead
	q.rdGot = 0
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.recvCQ.push(rdma.WorkCompletion{ID: r.id, Status: rdma.WCWRFlushErr, Opcode: rdma.WCRecv, QPN: q.qpn})
	}
}

// endPlacingLocked ends a copy into application memory, completing a
// failure that waited for it.
func (q *qp) endPlacingLocked() {
	q.placing--
	if q.placing > 0 {
		return
	}
	q.placed.Broadcast()
	if q.failDeferred {
		q.failDeferred = false
		if q.state == rdma.QPSErr {
			q.flushLocked(q.failStatus)
		}
	}
}

// PostSend queues send work requests and starts their transmission. It
// never waits for the network: what the socket does not take at once is
// left to the link's writer goroutine.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	q.mu.Lock()
	err := q.postSendLocked(wrs)
	l := q.link
	now := false
	if l != nil && q.sqNext < q.sqTail && q.state == rdma.QPSRTS {
		q.armWatchdogLocked()
		now = l.postedLocked()
	} else if q.sqNext < q.sqTail && q.state == rdma.QPSRTS {
		q.armWatchdogLocked() // the link is not up yet: it transmits on attach
	}
	q.mu.Unlock()
	if now {
		l.transmit(false)
	}
	return err
}

// postSendLocked queues wrs up to the first one refused.
func (q *qp) postSendLocked(wrs []rdma.SendWR) error {
	for i := range wrs {
		wr := &wrs[i]
		switch q.state {
		case rdma.QPSRTS:
		case rdma.QPSErr:
			// Verbs accepts requests in the error state and flushes
			// them, after those still waiting for their flush.
			if q.failDeferred {
				if err := q.queueFlushedSendLocked(i, wr); err != nil {
					return err
				}
				continue
			}
			q.sendCQ.push(rdma.WorkCompletion{ID: wr.ID, Status: rdma.WCWRFlushErr, Opcode: rdma.WCOpcodeOf(wr.Opcode), QPN: q.qpn})
			continue
		default:
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: post send in state %v", rdma.ErrBadState, q.state)}
		}
		if q.sqTail-q.sqFree == uint64(len(q.sq)) {
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: %d send requests outstanding (unsignaled ones hold their slot until a later signaled one completes)", rdma.ErrQueueFull, len(q.sq))}
		}
		w := &q.sq[q.sqTail%uint64(len(q.sq))]
		if err := q.fillSendWQE(w, wr); err != nil {
			return &rdma.PostError{Index: i, Err: err}
		}
		w.psn = q.nextPSN
		q.nextPSN = (q.nextPSN + 1) & 0xffffff
		q.sqTail++
	}
	return nil
}

// queueFlushedSendLocked queues a request posted in Err while earlier
// flushes wait for a copy to end, so that it completes after them.
func (q *qp) queueFlushedSendLocked(i int, wr *rdma.SendWR) error {
	if q.sqTail-q.sqFree == uint64(len(q.sq)) {
		return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: %d send requests outstanding", rdma.ErrQueueFull, len(q.sq))}
	}
	w := &q.sq[q.sqTail%uint64(len(q.sq))]
	*w = sendWQE{id: wr.ID, op: wr.Opcode, sgl: w.sgl[:0], inline: w.inline[:0]}
	q.sqTail++
	return nil
}

// fillSendWQE validates wr and copies it into w, with everything that can
// be rejected at post time rejected here.
func (q *qp) fillSendWQE(w *sendWQE, wr *rdma.SendWR) error {
	if wr.Opcode > rdma.OpAtomicFetchAndAdd {
		return fmt.Errorf("%w: opcode %v", rdma.ErrInvalid, wr.Opcode)
	}
	if wr.Flags&^(rdma.SendSignaled|rdma.SendFence|rdma.SendInline|rdma.SendSolicited) != 0 {
		return fmt.Errorf("%w: send flags %#x", rdma.ErrInvalid, uint8(wr.Flags))
	}
	if len(wr.SGL) > q.caps.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs, queue pair allows %d", rdma.ErrInvalid, len(wr.SGL), q.caps.MaxSendSGE)
	}
	var total uint64
	for _, s := range wr.SGL {
		total += uint64(s.Length)
	}
	if total > maxMsgSize {
		return fmt.Errorf("%w: message of %d bytes, at most %d", rdma.ErrInvalid, total, maxMsgSize)
	}
	inline := wr.Flags&rdma.SendInline != 0
	switch {
	case wr.Opcode.IsAtomic() && (len(wr.SGL) != 1 || total != 8):
		return fmt.Errorf("%w: %v needs one 8-byte local buffer, got %d bytes in %d SGEs", rdma.ErrInvalid, wr.Opcode, total, len(wr.SGL))
	case inline && (wr.Opcode == rdma.OpRead || wr.Opcode.IsAtomic()):
		return fmt.Errorf("%w: inline %v", rdma.ErrInvalid, wr.Opcode)
	case inline && total > uint64(q.caps.MaxInline):
		return fmt.Errorf("%w: %d bytes of inline data, queue pair allows %d", rdma.ErrInvalid, total, q.caps.MaxInline)
	}
	*w = sendWQE{
		id:       wr.ID,
		op:       wr.Opcode,
		flags:    wr.Flags,
		sgl:      append(w.sgl[:0], wr.SGL...),
		inline:   w.inline[:0],
		isInline: inline,
		length:   uint32(total),
		imm:      wr.Imm,
		raddr:    wr.RemoteAddr,
		rkey:     wr.RKey,
		cmp:      wr.CompareAdd,
		swap:     wr.Swap,
		signaled: q.signalAll || wr.Flags&rdma.SendSignaled != 0,
		rnrLeft:  int(q.rnrRetry),
	}
	if q.rnrRetry == 7 {
		w.rnrLeft = -1
	}
	if inline {
		for _, s := range wr.SGL {
			if s.Length == 0 {
				continue
			}
			// Inline data ignores lkeys, but the soft provider can
			// only reach memory registered on the device: the SGE's
			// own region if its lkey names one holding the range,
			// else any that does.
			m := q.dev.lookupMR(s.LKey)
			if m == nil {
				m = q.dev.lookupMRByAddr(s.Addr, s.Length)
			} else if _, ok := m.span(s.Addr, s.Length); !ok {
				m = q.dev.lookupMRByAddr(s.Addr, s.Length)
			}
			if m == nil || !m.acquire() {
				return fmt.Errorf("%w: inline data at %#x is not in memory registered on this device", rdma.ErrInvalid, s.Addr)
			}
			b, _ := m.span(s.Addr, s.Length)
			w.inline = append(w.inline, b...)
			m.release()
		}
	}
	return nil
}

// PostRecv queues receive work requests.
func (q *qp) PostRecv(wrs []rdma.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i := range wrs {
		wr := &wrs[i]
		switch q.state {
		case rdma.QPSReset:
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: post receive in state %v", rdma.ErrBadState, q.state)}
		case rdma.QPSErr:
			if !q.failDeferred {
				q.recvCQ.push(rdma.WorkCompletion{ID: wr.ID, Status: rdma.WCWRFlushErr, Opcode: rdma.WCRecv, QPN: q.qpn})
				continue
			}
		}
		if len(wr.SGL) > q.caps.MaxRecvSGE {
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: %d SGEs, queue pair allows %d", rdma.ErrInvalid, len(wr.SGL), q.caps.MaxRecvSGE)}
		}
		if q.rqTail-q.rqHead == uint64(len(q.rq)) {
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: %d receive requests outstanding", rdma.ErrQueueFull, len(q.rq))}
		}
		r := &q.rq[q.rqTail%uint64(len(q.rq))]
		r.id = wr.ID
		r.sgl = append(r.sgl[:0], wr.SGL...)
		q.rqTail++
	}
	return nil
}

// armWatchdogLocked starts the transport timer if work is outstanding and
// it is not running. The timer fails the queue pair with WCRetryExcErr
// when nothing moves on the link for the timeout × retries budget (give
// or take a quarter of it).
func (q *qp) armWatchdogLocked() {
	if q.budget == 0 || q.watchdogArmed {
		return
	}
	q.watchdogArmed = true
	q.wdSeen, q.wdIdle = q.progress.Load(), 0
	if q.watchdog == nil {
		q.watchdog = time.AfterFunc(q.budget/4, q.checkTimeout)
	} else {
		q.watchdog.Reset(q.budget / 4)
	}
}

func (q *qp) checkTimeout() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.watchdogArmed = false
	if q.state != rdma.QPSRTS || q.sqHead == q.sqTail {
		return
	}
	if l := q.link; l != nil && l.mode == rxIdle {
		// Nobody has read the link: read it before judging.
		l.toBackgroundLocked()
		q.wdIdle = 0
	} else if p := q.progress.Load(); p != q.wdSeen {
		q.wdSeen, q.wdIdle = p, 0
	} else {
		q.wdIdle++
	}
	if q.wdIdle >= 4 {
		q.dev.log.Warn("transport timeout: no response from the peer", "qpn", q.qpn, "peer", q.remote.Addr, "peer_qpn", q.remote.QPN,
			"budget", q.budget, "outstanding", q.sqNext-q.sqHead, "queued", q.sqTail-q.sqNext, "rnr_paused", q.rnrPaused, "connected", q.link != nil)
		q.dev.timeouts.Add(1)
		q.failLocked(rdma.WCRetryExcErr)
		return
	}
	q.watchdogArmed = true
	q.watchdog.Reset(q.budget / 4)
}

// dialsPeer reports whether this side of the connection dials the link:
// the side whose endpoint (address, then QPN) sorts first. Both sides see
// the same two endpoints, so exactly one dials.
func (q *qp) dialsPeer() bool {
	if q.dev.addr != q.remote.Addr {
		return q.dev.addr < q.remote.Addr
	}
	return q.qpn < q.remote.QPN
}

// Dialing retries, while the queue pair is in RTR or RTS without a link,
// with a backoff up to maxDialBackoff. Work waiting for the link fails by
// the transport timer, as requests to an unreachable peer do on a NIC.
const maxDialBackoff = time.Second

func (q *qp) startDialLocked() {
	stop := make(chan struct{})
	q.dialStop = stop
	gen := q.connGen
	q.dev.wg.Add(1)
	go q.dialLoop(gen, stop)
}

func (q *qp) dialLoop(gen uint64, stop chan struct{}) {
	defer q.dev.wg.Done()
	backoff := time.Millisecond
	for {
		q.mu.Lock()
		if q.connGen != gen || q.link != nil || (q.state != rdma.QPSRTR && q.state != rdma.QPSRTS) {
			q.mu.Unlock()
			return
		}
		remote, secret := q.remote, q.secret
		q.mu.Unlock()
		nc, err := q.dialOnce(remote, &secret)
		if err == nil {
			q.mu.Lock()
			if q.connGen == gen && q.link == nil && (q.state == rdma.QPSRTR || q.state == rdma.QPSRTS) {
				q.attachLinkLocked(nc)
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			q.dev.untrack(nc)
			return
		}
		q.dev.log.Debug("dial", "qpn", q.qpn, "remote", remote.Addr, "remote_qpn", remote.QPN, "err", err)
		select {
		case <-stop:
			return
		case <-q.dev.done:
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxDialBackoff)
	}
}

// dialOnce opens the link to remote: a hello presenting the remote's
// secret, answered with proof that the other side knows ours.
func (q *qp) dialOnce(remote rdma.Endpoint, secret *[rdma.SecretSize]byte) (net.Conn, error) {
	nc, err := net.DialTimeout("tcp", remote.Addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	if !q.dev.track(nc) {
		return nil, rdma.ErrClosed
	}
	// The acceptor may hold the hello until its queue pair is in RTR.
	nc.SetDeadline(time.Now().Add(helloTimeout + 5*time.Second))
	h := hello{SrcQPN: q.qpn, DstQPN: remote.QPN, DstSecret: remote.Secret, SrcAddr: q.dev.addr}
	if _, err := nc.Write(h.marshal()); err != nil {
		q.dev.untrack(nc)
		return nil, err
	}
	a, err := readHelloAnswer(nc)
	if err != nil {
		q.dev.untrack(nc)
		return nil, err
	}
	if a.Status != helloOK {
		q.dev.untrack(nc)
		return nil, fmt.Errorf("peer queue pair %d: %v", remote.QPN, a.Status)
	}
	if !secretsEqual(&a.Proof, secret) {
		q.dev.untrack(nc)
		return nil, fmt.Errorf("%w: peer queue pair %d does not know this side's secret", rdma.ErrProtocol, remote.QPN)
	}
	nc.SetDeadline(time.Time{})
	return nc, nil
}

// accept takes an incoming hello addressed to q. A hello for a queue pair
// still in Init waits (up to helloTimeout) for it to reach RTR, as the
// peer may move to RTR first. It is refused, leaving the queue pair
// alone, unless it comes from the configured peer (its QPN and address)
// with this queue pair's secret, and this side is the one that accepts.
func (q *qp) accept(nc net.Conn, h *hello) {
	deadline := time.Now().Add(helloTimeout)
	q.mu.Lock()
	for !q.destroyed && (q.state == rdma.QPSInit || q.state == rdma.QPSReset) {
		ch := q.stateCh
		q.mu.Unlock()
		wait := time.Until(deadline)
		if wait <= 0 {
			q.mu.Lock()
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ch:
		case <-t.C:
		case <-q.dev.done:
		}
		t.Stop()
		q.mu.Lock()
		if time.Now().After(deadline) {
			break
		}
	}
	status := helloOK
	switch {
	case q.destroyed:
		status = helloNoQP
	case q.state != rdma.QPSRTR && q.state != rdma.QPSRTS:
		status = helloNotReady
	case q.remote.QPN != h.SrcQPN || q.remote.Addr != h.SrcAddr || !secretsEqual(&q.secret, &h.DstSecret) || q.dialsPeer():
		status = helloWrongPeer
	case q.link != nil || q.linking:
		status = helloBusy
	}
	if status != helloOK {
		q.mu.Unlock()
		q.dev.log.Debug("refusing hello", "qpn", q.qpn, "remote", nc.RemoteAddr(), "src_qpn", h.SrcQPN, "status", status)
		refuse(nc, status)
		q.dev.untrack(nc)
		return
	}
	q.linking = true
	gen := q.connGen
	a := helloAnswer{Status: helloOK, Proof: q.remote.Secret}
	q.mu.Unlock()

	// The answer goes out before anything else on the link.
	_, err := nc.Write(a.marshal())
	q.mu.Lock()
	defer q.mu.Unlock()
	if err != nil || q.connGen != gen || q.destroyed || (q.state != rdma.QPSRTR && q.state != rdma.QPSRTS) {
		if q.connGen == gen {
			q.linking = false
		}
		q.dev.untrack(nc)
		return
	}
	q.linking = false
	nc.SetDeadline(time.Time{})
	q.attachLinkLocked(nc)
}

// psnBefore reports whether a comes before b in 24-bit sequence-number
// order.
func psnBefore(a, b uint32) bool { return (a-b)&0x800000 != 0 && a != b }
