package soft

import (
	"fmt"
	"sync"
	"time"

	"github.com/octofs/octofs/rdma"
)

// qp is an RC queue pair. Its lock guards the state machine and both work
// queues; transmission holds txMu instead, so that posting never waits for
// the network.
//
// Lock order: qp.mu, then cq.mu or Device.mu. txMu is never taken while
// holding qp.mu.
type qp struct {
	dev    *Device
	pd     *pd
	qpn    uint32
	psn    uint32 // the first PSN this side sends
	sendCQ *cq
	recvCQ *cq

	maxSendWR, maxRecvWR   int
	maxSendSGE, maxRecvSGE int
	maxInline              int
	signalAll              bool

	mu        sync.Mutex
	state     rdma.QPState
	destroyed bool
	access    rdma.Access
	remote    rdma.Endpoint
	minRNR    rdma.RNRTimer
	rnrRetry  uint8
	budget    time.Duration // transport timeout × (retries+1); 0 is infinite

	// The send queue is a ring; the counters only grow. Requests in
	// [sqHead, sqNext) were transmitted and await their response, those
	// in [sqNext, sqTail) wait to be transmitted.
	sq                     []sendWQE
	sqHead, sqNext, sqTail uint64
	nextPSN                uint32
	rdAtomicInFlight       int  // transmitted READs and atomics (for FENCE)
	rnrPaused              bool // waiting out an RNR NAK's timer
	txStopped              bool // a request failed locally; send nothing after it

	rq             []recvWQE
	rqHead, rqTail uint64

	out        *wireConn       // requester connection, dialed by this side
	rx         *responseReader // reads out's responses, by turns (rx.go)
	rxMode     rxMode
	rxGen      uint64     // counts drives of out, for the janitor
	janListed  bool       // on the device's janitor list
	resp       *responder // responder of the peer's connection, if any
	senderStop chan struct{}
	wake       chan struct{}

	watchdog      *time.Timer
	watchdogArmed bool
	lastProgress  time.Time

	txMu sync.Mutex
	tx   txScratch // guarded by txMu
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
		dev:        p.dev,
		pd:         p,
		psn:        rdma.RandomPSN(),
		sendCQ:     sendCQ,
		recvCQ:     recvCQ,
		maxSendWR:  orDefault(cfg.MaxSendWR, defaultMaxWR),
		maxRecvWR:  orDefault(cfg.MaxRecvWR, defaultMaxWR),
		maxSendSGE: orDefault(cfg.MaxSendSGE, defaultMaxSGE),
		maxRecvSGE: orDefault(cfg.MaxRecvSGE, defaultMaxSGE),
		maxInline:  orDefault(cfg.MaxInline, defaultMaxInline),
		signalAll:  cfg.SignalAll,
		wake:       make(chan struct{}, 1),
	}
	switch {
	case q.maxSendWR < 0 || q.maxSendWR > softCaps.MaxQPWR || q.maxRecvWR < 0 || q.maxRecvWR > softCaps.MaxQPWR:
		return nil, fmt.Errorf("%w: work requests per queue (at most %d)", rdma.ErrInvalid, softCaps.MaxQPWR)
	case q.maxSendSGE < 0 || q.maxSendSGE > softCaps.MaxSGE || q.maxRecvSGE < 0 || q.maxRecvSGE > softCaps.MaxSGE:
		return nil, fmt.Errorf("%w: SGEs per request (at most %d)", rdma.ErrInvalid, softCaps.MaxSGE)
	case q.maxInline < 0 || q.maxInline > softCaps.MaxInline:
		return nil, fmt.Errorf("%w: inline data (at most %d bytes)", rdma.ErrInvalid, softCaps.MaxInline)
	}
	q.sq = make([]sendWQE, q.maxSendWR)
	for i := range q.sq {
		q.sq[i].sgl = make([]rdma.SGE, 0, q.maxSendSGE)
		q.sq[i].inline = make([]byte, 0, q.maxInline)
	}
	q.rq = make([]recvWQE, q.maxRecvWR)
	for i := range q.rq {
		q.rq[i].sgl = make([]rdma.SGE, 0, q.maxRecvSGE)
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
	for {
		d.nextQPN = (d.nextQPN + 1) & 0xffffff
		if _, used := d.qps[d.nextQPN]; !used && d.nextQPN > 1 {
			break
		}
	}
	q.qpn = d.nextQPN
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

func (q *qp) State() rdma.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.state
}

// Endpoint tells the peer this queue pair's number, first PSN and the
// device's address.
func (q *qp) Endpoint() rdma.Endpoint {
	return rdma.Endpoint{QPN: q.qpn, PSN: q.psn, Addr: q.dev.addr}
}

// Modify moves the queue pair to attr.State, following the verbs state
// machine: Reset→Init→RTR→RTS, Init→Init, RTS→RTS, anything→Err or Reset.
func (q *qp) Modify(attr rdma.QPAttr) error {
	q.mu.Lock()
	var parting *responder
	defer func() {
		q.mu.Unlock()
		parting.part()
	}()
	if q.destroyed {
		return rdma.ErrClosed
	}
	from, to := q.state, attr.State
	bad := func() error {
		return fmt.Errorf("%w: transition %v→%v", rdma.ErrBadState, from, to)
	}
	switch to {
	case rdma.QPSReset:
		parting = q.resetLocked()
	case rdma.QPSInit:
		if from != rdma.QPSReset && from != rdma.QPSInit {
			return bad()
		}
		if attr.Access&^rdma.AccessAll != 0 {
			return fmt.Errorf("%w: unknown access bits %#x", rdma.ErrInvalid, uint32(attr.Access))
		}
		q.access = attr.Access
		q.state = rdma.QPSInit
	case rdma.QPSRTR:
		if from != rdma.QPSInit {
			return bad()
		}
		if attr.Remote.Addr == "" {
			return fmt.Errorf("%w: remote endpoint has no soft device address", rdma.ErrInvalid)
		}
		q.remote = attr.Remote
		q.minRNR = attr.MinRNRTimer
		q.state = rdma.QPSRTR
	case rdma.QPSRTS:
		if from != rdma.QPSRTR && from != rdma.QPSRTS {
			return bad()
		}
		if attr.RetryCount > 7 || attr.RNRRetry > 7 || attr.Timeout > 31 {
			return fmt.Errorf("%w: retry count and RNR retry are 0-7, timeout 0-31", rdma.ErrInvalid)
		}
		q.rnrRetry = attr.RNRRetry
		q.budget = 0
		if attr.Timeout > 0 {
			q.budget = (4096 * time.Nanosecond << attr.Timeout) * time.Duration(attr.RetryCount+1)
		}
		if from == rdma.QPSRTR {
			q.state = rdma.QPSRTS
			q.startSenderLocked()
		}
	case rdma.QPSErr:
		q.failLocked(rdma.WCWRFlushErr)
	default:
		return fmt.Errorf("%w: unknown state %v", rdma.ErrInvalid, to)
	}
	return nil
}

// Close destroys the queue pair. Outstanding requests are dropped without
// completions and the peer sees its connections close.
func (q *qp) Close() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return nil
	}
	parting := q.resetLocked()
	q.destroyed = true
	q.mu.Unlock()
	parting.part()
	q.dev.mu.Lock()
	delete(q.dev.qps, q.qpn)
	q.dev.mu.Unlock()
	q.detachCQs()
	q.pd.release(0, 1)
	return nil
}

// resetLocked returns to Reset: queues emptied without completions,
// connections closed, sender stopped. The responder it returns must be
// parted with (responder.part) once the lock is released.
func (q *qp) resetLocked() *responder {
	q.state = rdma.QPSReset
	parting := q.resp
	q.resp = nil
	q.stopTransportLocked()
	q.sqHead, q.sqNext, q.sqTail = 0, 0, 0
	q.rqHead, q.rqTail = 0, 0
	q.nextPSN = q.psn
	q.rdAtomicInFlight = 0
	q.rnrPaused = false
	q.txStopped = false
	return parting
}

// stopTransportLocked closes both connections and stops the sender and
// the watchdog.
func (q *qp) stopTransportLocked() {
	if q.out != nil {
		q.out.Close()
		q.out = nil
		q.rx.kick() // its background goroutine exits
		q.rx = nil
		q.rxMode = rxNone
	}
	if q.resp != nil {
		q.resp.c.Close()
		q.resp = nil
	}
	if q.senderStop != nil {
		close(q.senderStop)
		q.senderStop = nil
	}
	if q.watchdog != nil {
		q.watchdog.Stop()
	}
	q.watchdogArmed = false
}

// failLocked moves the queue pair to Err. The oldest outstanding send
// request completes with status (unless status is WCWRFlushErr), every
// other posted request on both queues with WCWRFlushErr.
func (q *qp) failLocked(status rdma.WCStatus) {
	if q.state == rdma.QPSErr || q.state == rdma.QPSReset {
		q.state = rdma.QPSErr
		return
	}
	q.state = rdma.QPSErr
	q.stopTransportLocked()
	for ; q.sqHead < q.sqTail; q.sqHead++ {
		w := &q.sq[q.sqHead%uint64(len(q.sq))]
		q.sendCQ.push(rdma.WorkCompletion{ID: w.id, Status: status, Opcode: rdma.WCOpcodeOf(w.op), QPN: q.qpn})
		status = rdma.WCWRFlushErr
	}
	q.sqNext = q.sqHead
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.recvCQ.push(rdma.WorkCompletion{ID: r.id, Status: rdma.WCWRFlushErr, Opcode: rdma.WCRecv, QPN: q.qpn})
	}
}

// fail is failLocked for callers without the lock.
func (q *qp) fail(status rdma.WCStatus) {
	q.mu.Lock()
	q.failLocked(status)
	q.mu.Unlock()
}

// PostSend queues send work requests and starts their transmission.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	q.mu.Lock()
	err := q.postSendLocked(wrs)
	pending := q.sqNext < q.sqTail && q.state == rdma.QPSRTS
	inFlight := q.sqHead < q.sqNext
	connected := q.out != nil
	if pending {
		q.armWatchdogLocked()
		if inFlight {
			// Queued behind requests in flight: the background
			// goroutine transmits them as responses arrive.
			q.toBackgroundLocked()
		}
	}
	q.mu.Unlock()
	switch {
	case !pending:
	case !connected:
		q.kick()
	case inFlight:
		// Transmission is clocked by responses, as TCP's is by ACKs:
		// a response to a request in flight is still to be processed,
		// and the response reader transmits whatever is queued then,
		// in one batch. This saves a system call per request.
	default:
		q.transmitPending()
	}
	return err
}

// transmitPending transmits queued small requests on the calling
// goroutine if nobody else is transmitting, and leaves the rest to the
// sender goroutine, so that it never blocks on a large payload.
func (q *qp) transmitPending() {
	if !q.txMu.TryLock() {
		// The holder may have finished looking before this request
		// was queued: make sure somebody looks again.
		q.kick()
		return
	}
	more := q.transmit(inlineTxLimit, true)
	q.txMu.Unlock()
	if more {
		q.kick()
	}
}

// postSendLocked queues wrs up to the first one refused.
func (q *qp) postSendLocked(wrs []rdma.SendWR) error {
	for i := range wrs {
		wr := &wrs[i]
		switch q.state {
		case rdma.QPSRTS:
		case rdma.QPSErr:
			// Verbs accepts requests in the error state and flushes them.
			q.sendCQ.push(rdma.WorkCompletion{ID: wr.ID, Status: rdma.WCWRFlushErr, Opcode: rdma.WCOpcodeOf(wr.Opcode), QPN: q.qpn})
			continue
		default:
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: post send in state %v", rdma.ErrBadState, q.state)}
		}
		if q.sqTail-q.sqHead == uint64(len(q.sq)) {
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: %d send requests outstanding", rdma.ErrQueueFull, len(q.sq))}
		}
		w := &q.sq[q.sqTail%uint64(len(q.sq))]
		if err := q.fillSendWQE(w, wr); err != nil {
			return &rdma.PostError{Index: i, Err: err}
		}
		w.psn = q.nextPSN
		q.nextPSN++
		q.sqTail++
	}
	return nil
}

// inlineTxLimit is the largest payload PostSend transmits itself.
const inlineTxLimit = 16 << 10

// fillSendWQE validates wr and copies it into w, with everything that can
// be rejected at post time rejected here.
func (q *qp) fillSendWQE(w *sendWQE, wr *rdma.SendWR) error {
	if wr.Opcode > rdma.OpAtomicFetchAndAdd {
		return fmt.Errorf("%w: opcode %v", rdma.ErrInvalid, wr.Opcode)
	}
	if wr.Flags&^(rdma.SendSignaled|rdma.SendFence|rdma.SendInline|rdma.SendSolicited) != 0 {
		return fmt.Errorf("%w: send flags %#x", rdma.ErrInvalid, uint8(wr.Flags))
	}
	if len(wr.SGL) > q.maxSendSGE {
		return fmt.Errorf("%w: %d SGEs, queue pair allows %d", rdma.ErrInvalid, len(wr.SGL), q.maxSendSGE)
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
	case inline && total > uint64(q.maxInline):
		return fmt.Errorf("%w: %d bytes of inline data, queue pair allows %d", rdma.ErrInvalid, total, q.maxInline)
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
			q.recvCQ.push(rdma.WorkCompletion{ID: wr.ID, Status: rdma.WCWRFlushErr, Opcode: rdma.WCRecv, QPN: q.qpn})
			continue
		}
		if len(wr.SGL) > q.maxRecvSGE {
			return &rdma.PostError{Index: i, Err: fmt.Errorf("%w: %d SGEs, queue pair allows %d", rdma.ErrInvalid, len(wr.SGL), q.maxRecvSGE)}
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
// when no response arrives within the timeout × retries budget.
func (q *qp) armWatchdogLocked() {
	if q.budget == 0 || q.watchdogArmed {
		return
	}
	q.watchdogArmed = true
	q.lastProgress = time.Now()
	if q.watchdog == nil {
		q.watchdog = time.AfterFunc(q.budget, q.checkTimeout)
	} else {
		q.watchdog.Reset(q.budget)
	}
}

func (q *qp) checkTimeout() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.watchdogArmed = false
	if q.state != rdma.QPSRTS || q.sqHead == q.sqTail {
		return
	}
	idle := time.Since(q.lastProgress)
	if q.rxMode == rxIdle {
		// Nobody has read the responses: read them before judging.
		q.toBackgroundLocked()
		q.lastProgress = time.Now()
		idle = 0
	}
	if idle >= q.budget {
		q.dev.log.Warn("transport timeout: no response from the peer", "qpn", q.qpn, "peer", q.remote.Addr, "peer_qpn", q.remote.QPN,
			"idle", idle, "outstanding", q.sqNext-q.sqHead, "queued", q.sqTail-q.sqNext, "rnr_paused", q.rnrPaused)
		q.dev.timeouts.Add(1)
		q.failLocked(rdma.WCRetryExcErr)
		return
	}
	q.watchdogArmed = true
	q.watchdog.Reset(q.budget - idle)
}

// kick wakes the sender goroutine.
func (q *qp) kick() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *qp) startSenderLocked() {
	stop := make(chan struct{})
	q.senderStop = stop
	q.dev.wg.Add(1)
	go q.sender(stop)
}

// sender dials the peer when there is work and transmits what the posting
// goroutines left, until stop closes.
func (q *qp) sender(stop chan struct{}) {
	defer q.dev.wg.Done()
	for {
		select {
		case <-q.wake:
		case <-stop:
			return
		}
		if !q.connect(stop) {
			continue
		}
		q.txMu.Lock()
		q.transmit(maxMsgSize, false)
		q.txMu.Unlock()
	}
}

// psnBefore reports whether a comes before b in sequence-number order.
func psnBefore(a, b uint32) bool { return int32(a-b) < 0 }
