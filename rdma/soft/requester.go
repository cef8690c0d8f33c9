package soft

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/octofs/octofs/rdma"
)

// The requester side of a queue pair: the connection it dials, the frames
// it transmits, and the responses that complete its send queue.

// txScratch is reused by every transmission; txMu guards it. hdrs and
// inline are allocated once with room for a whole batch, so that slices of
// them stay valid while a batch is assembled.
type txScratch struct {
	hdrs   []byte
	inline []byte
	bufs   net.Buffers
	out    net.Buffers // what WriteTo consumes of bufs, a field so as not to allocate
	spans  [][]byte
	held   []*mr
}

// Bounds of one batch of frames written with a single writev.
const (
	maxBatchFrames = 64
	maxBatchBytes  = 256 << 10
)

// errStale means a connection or response no longer belongs to the queue
// pair's current connection.
var errStale = errors.New("stale")

// connect dials the peer if there is work and no connection yet. It
// returns whether a connection is ready. Dialing retries while the peer is
// not ready, within the transport budget, as hardware retries requests.
func (q *qp) connect(stop chan struct{}) bool {
	q.mu.Lock()
	if q.state != rdma.QPSRTS || q.senderStop != stop {
		q.mu.Unlock()
		return false
	}
	if q.out != nil {
		q.mu.Unlock()
		return true
	}
	if q.sqNext == q.sqTail {
		q.mu.Unlock()
		return false
	}
	remote, budget := q.remote, q.budget
	q.mu.Unlock()

	var deadline time.Time
	if budget > 0 {
		deadline = time.Now().Add(budget)
	}
	backoff := time.Millisecond
	for {
		c, err := q.dial(remote, deadline)
		if err == nil {
			q.mu.Lock()
			if q.state != rdma.QPSRTS || q.senderStop != stop || q.out != nil {
				q.mu.Unlock()
				c.Close()
				return false
			}
			q.useConnLocked(c)
			q.mu.Unlock()
			return true
		}
		q.dev.log.Debug("dial", "qpn", q.qpn, "remote", remote.Addr, "err", err)
		if !deadline.IsZero() && time.Now().Add(backoff).After(deadline) {
			q.mu.Lock()
			if q.senderStop == stop && q.state == rdma.QPSRTS {
				q.failLocked(rdma.WCRetryExcErr)
			}
			q.mu.Unlock()
			return false
		}
		select {
		case <-stop:
			return false
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// useConnLocked makes c the requester connection, read at first by its
// background goroutine.
func (q *qp) useConnLocked(c *wireConn) {
	q.out = c
	q.rx = newResponseReader(q, c)
	q.rxMode = rxBackground
	q.dev.wg.Add(1)
	go q.readResponses(q.rx)
}

// dial opens a requester connection to the remote queue pair.
func (q *qp) dial(remote rdma.Endpoint, deadline time.Time) (*wireConn, error) {
	timeout := 5 * time.Second
	if !deadline.IsZero() {
		timeout = min(timeout, time.Until(deadline))
	}
	nc, err := net.DialTimeout("tcp", remote.Addr, max(timeout, time.Millisecond))
	if err != nil {
		return nil, err
	}
	c := q.dev.track(nc)
	if c == nil {
		return nil, rdma.ErrClosed
	}
	nc.SetDeadline(time.Now().Add(helloTimeout))
	h := hello{SrcQPN: q.qpn, DstQPN: remote.QPN, SrcAddr: q.dev.addr}
	if _, err := nc.Write(h.marshal()); err != nil {
		c.Close()
		return nil, err
	}
	status, err := readHelloAnswer(nc)
	if err != nil {
		c.Close()
		return nil, err
	}
	if status != helloOK {
		c.Close()
		return nil, fmt.Errorf("peer queue pair %d: %v", remote.QPN, status)
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

// transmit sends queued requests in order, batching frames into one
// writev, until none remain or the next one's payload exceeds limit. It
// reports whether requests were left for the sender goroutine. The caller
// holds txMu. poster says whether the caller is a goroutine of the
// application, which may drive the connection in CQ.Wait; if not (the
// sender goroutine), an idle connection's responses are left to its
// background goroutine, since the application may be asleep already.
func (q *qp) transmit(limit int, poster bool) (more bool) {
	tx := &q.tx
	if tx.hdrs == nil {
		tx.hdrs = make([]byte, 0, maxBatchFrames*frameHeaderSize)
		tx.inline = make([]byte, 0, maxBatchFrames*q.maxInline)
	}
	for {
		tx.hdrs = tx.hdrs[:0]
		tx.inline = tx.inline[:0]
		tx.bufs = tx.bufs[:0]
		tx.spans = tx.spans[:0]
		batch, bytes := 0, 0
		q.mu.Lock()
		c := q.out
		if q.state != rdma.QPSRTS || c == nil {
			q.mu.Unlock()
			return false
		}
		for batch < maxBatchFrames && q.sqNext < q.sqTail && !q.rnrPaused && !q.txStopped {
			w := &q.sq[q.sqNext%uint64(len(q.sq))]
			if w.flags&rdma.SendFence != 0 && q.rdAtomicInFlight > 0 {
				break
			}
			payload := 0
			if hasOutgoingPayload(w.op) {
				payload = int(w.length)
			}
			if payload > limit {
				more = true
				break
			}
			if batch > 0 && bytes+payload > maxBatchBytes {
				break
			}
			nspans := len(tx.spans)
			if hasOutgoingPayload(w.op) {
				if w.isInline {
					// Copied: once the lock is released a flush may
					// free the slot for a new request.
					off := len(tx.inline)
					tx.inline = append(tx.inline, w.inline...)
					tx.spans = append(tx.spans, tx.inline[off:])
				} else {
					var st rdma.WCStatus
					tx.spans, tx.held, st = q.dev.localSpans(q.pd, w.sgl, false, tx.spans, tx.held)
					if st != rdma.WCSuccess {
						w.localErr = st
						q.txStopped = true
						tx.spans = tx.spans[:nspans]
						q.failLocalLocked()
						break
					}
				}
			}
			off := len(tx.hdrs)
			tx.hdrs = tx.hdrs[:off+frameHeaderSize]
			h := requestHeader(w)
			h.encode(tx.hdrs[off:])
			tx.bufs = append(tx.bufs, tx.hdrs[off:])
			tx.bufs = append(tx.bufs, tx.spans[nspans:]...)
			batch++
			bytes += frameHeaderSize + payload
			q.sqNext++
			if w.op == rdma.OpRead || w.op.IsAtomic() {
				q.rdAtomicInFlight++
			}
		}
		if batch > 0 && q.rxMode == rxIdle {
			q.whoReadsLocked(poster)
		}
		q.mu.Unlock()
		if batch == 0 {
			tx.held = releaseAll(tx.held)
			return more
		}
		tx.out = tx.bufs                 // WriteTo consumes its receiver
		_, err := tx.out.WriteTo(c.Conn) // the net.Conn itself, which writes with writev
		tx.held = releaseAll(tx.held)
		if err != nil {
			q.connFailed(c)
			return false
		}
	}
}

func hasOutgoingPayload(op rdma.Opcode) bool {
	switch op {
	case rdma.OpSend, rdma.OpSendWithImm, rdma.OpWrite, rdma.OpWriteWithImm:
		return true
	}
	return false
}

// requestHeader builds the frame header of a send work request.
func requestHeader(w *sendWQE) frameHeader {
	h := frameHeader{PSN: w.psn, Length: w.length, RKey: w.rkey, RemoteAddr: w.raddr}
	switch w.op {
	case rdma.OpSend:
		h.Type = frameSend
	case rdma.OpSendWithImm:
		h.Type, h.Imm, h.Flags = frameSendImm, w.imm, flagHasImm
	case rdma.OpWrite:
		h.Type = frameWrite
	case rdma.OpWriteWithImm:
		h.Type, h.Imm, h.Flags = frameWriteImm, w.imm, flagHasImm
	case rdma.OpRead:
		h.Type = frameRead
	case rdma.OpAtomicCmpAndSwp:
		h.Type, h.CompareAdd, h.Swap = frameCmpSwp, w.cmp, w.swap
	case rdma.OpAtomicFetchAndAdd:
		h.Type, h.CompareAdd = frameFetchAdd, w.cmp
	}
	if w.flags&rdma.SendSolicited != 0 {
		h.Flags |= flagSolicited
	}
	return h
}

// failLocalLocked fails the queue pair if the oldest request failed
// locally and everything before it has completed: errors complete in
// order, like everything else.
func (q *qp) failLocalLocked() {
	if q.sqHead == q.sqNext && q.sqHead < q.sqTail {
		if st := q.sq[q.sqHead%uint64(len(q.sq))].localErr; st != rdma.WCSuccess {
			q.failLocked(st)
		}
	}
}

// connFailed handles the loss of the requester connection c: outstanding
// work fails with WCRetryExcErr, as when hardware exhausts its retries.
func (q *qp) connFailed(c *wireConn) {
	c.Close()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.out != c {
		return
	}
	q.dev.connsLost.Add(1)
	q.failLocked(rdma.WCRetryExcErr)
}

// responseReader applies the responses arriving on a requester
// connection to its queue pair's send queue. Whoever holds the
// connection's read turn (see rx.go) uses it; nobody else touches it.
type responseReader struct {
	readTurn
	q   *qp
	src *rxSource // what br reads
	br  *bufio.Reader

	hdr   [frameHeaderSize]byte
	sgl   []rdma.SGE
	spans [][]byte
	held  []*mr
}

func newResponseReader(q *qp, c *wireConn) *responseReader {
	src := newRxSource(c)
	return &responseReader{readTurn: newReadTurn(c), q: q, src: src, br: bufio.NewReaderSize(src, 64<<10)}
}

// failed ends the connection after a read or a response failed.
func (r *responseReader) failed(err error) {
	q, c := r.q, r.c
	switch {
	case errors.Is(err, rdma.ErrProtocol):
		q.dev.log.Warn("closing requester connection", "qpn", q.qpn, "err", err)
		q.mu.Lock()
		if q.out == c {
			q.failLocked(rdma.WCBadRespErr)
		}
		q.mu.Unlock()
		c.Close()
	case errors.Is(err, errStale):
		c.Close()
	default:
		// The connection broke, perhaps in the middle of a response.
		q.connFailed(c)
	}
}

// transmitQueued runs once all responses that have arrived are applied:
// it sends what was queued meanwhile (see PostSend). Like Nagle's
// algorithm, it waits until the batch is as large as what is in flight:
// each batch then costs the two sides one system call each way, however
// small its requests, and a request queued behind a deep pipeline waits
// at most for the responses already due.
func (r *responseReader) transmitQueued() {
	q := r.q
	q.mu.Lock()
	queued, inFlight := q.sqTail-q.sqNext, q.sqNext-q.sqHead
	current := q.out == r.c
	q.mu.Unlock()
	if current && queued > 0 && queued >= inFlight {
		q.transmitPending()
	}
}

// next reads one response and applies it.
func (r *responseReader) next() error {
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return err
	}
	var h frameHeader
	if err := h.decode(r.hdr[:]); err != nil {
		return err
	}
	if h.Type.isRequest() {
		return fmt.Errorf("%w: request frame on a requester connection", rdma.ErrProtocol)
	}
	q := r.q
	q.mu.Lock()
	if q.out != r.c {
		q.mu.Unlock()
		return errStale
	}
	// Every response acknowledges the requests before its PSN.
	inclusive := h.Type == frameAck
	if err := q.ackLocked(h.PSN, inclusive); err != nil {
		q.failLocked(rdma.WCBadRespErr)
		q.mu.Unlock()
		return err
	}
	if inclusive {
		q.mu.Unlock()
		return nil
	}
	if q.sqHead == q.sqNext {
		q.mu.Unlock()
		return fmt.Errorf("%w: response for PSN %d with nothing outstanding", rdma.ErrProtocol, h.PSN)
	}
	head := q.sqHead
	w := &q.sq[head%uint64(len(q.sq))]
	if w.psn != h.PSN {
		q.mu.Unlock()
		return fmt.Errorf("%w: response for PSN %d, expected %d", rdma.ErrProtocol, h.PSN, w.psn)
	}
	switch h.Type {
	case frameNak:
		q.failLocked(nakCode(h.Code).status())
		q.mu.Unlock()
		return nil
	case frameRNRNak:
		if !w.op.ConsumesRecv() {
			q.mu.Unlock()
			return fmt.Errorf("%w: RNR NAK for %v", rdma.ErrProtocol, w.op)
		}
		q.rnrLocked(w, rdma.RNRTimer(h.Code))
		q.mu.Unlock()
		return nil
	case frameReadResp:
		if w.op != rdma.OpRead || h.Length != w.length {
			q.mu.Unlock()
			return fmt.Errorf("%w: READ response of %d bytes for %v of %d", rdma.ErrProtocol, h.Length, w.op, w.length)
		}
	case frameAtomicResp:
		if !w.op.IsAtomic() {
			q.mu.Unlock()
			return fmt.Errorf("%w: atomic response for %v", rdma.ErrProtocol, w.op)
		}
	}
	r.sgl = append(r.sgl[:0], w.sgl...)
	q.mu.Unlock()

	// Place READ data or the atomic's original value in local memory,
	// outside the lock: the payload may be large.
	st, err := r.place(&h)
	if err != nil {
		return err
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.out != r.c || q.sqHead != head {
		// The queue pair was flushed meanwhile.
		return errStale
	}
	if st != rdma.WCSuccess {
		q.failLocked(st)
		return nil
	}
	q.rdAtomicInFlight--
	q.completeHeadLocked(w)
	if q.rdAtomicInFlight == 0 && q.sqNext < q.sqTail {
		q.kick() // a FENCEd request may be waiting for this one
	}
	return nil
}

// place writes a READ response's data or an atomic's original value into
// the request's local buffers (r.sgl). A local protection error is its
// status; an error means the connection failed.
func (r *responseReader) place(h *frameHeader) (rdma.WCStatus, error) {
	var st rdma.WCStatus
	r.spans, r.held, st = r.q.dev.localSpans(r.q.pd, r.sgl, true, r.spans[:0], r.held[:0])
	defer func() { r.held = releaseAll(r.held) }()
	switch {
	case st != rdma.WCSuccess:
		if h.Type == frameReadResp {
			return st, discard(r.br, h.Length)
		}
	case h.Type == frameReadResp:
		for _, s := range r.spans {
			if _, err := io.ReadFull(r.br, s); err != nil {
				return st, err
			}
		}
	default:
		var old [8]byte
		binary.NativeEndian.PutUint64(old[:], h.CompareAdd)
		rest := old[:]
		for _, s := range r.spans {
			rest = rest[copy(s, rest):]
		}
	}
	return st, nil
}

// ackLocked completes the transmitted SEND and WRITE requests before psn
// (through psn if inclusive). Reaching a READ or atomic is a protocol
// error: those complete only with their own response.
func (q *qp) ackLocked(psn uint32, inclusive bool) error {
	for q.sqHead < q.sqNext {
		w := &q.sq[q.sqHead%uint64(len(q.sq))]
		if psnBefore(psn, w.psn) || (!inclusive && w.psn == psn) {
			break
		}
		if w.op == rdma.OpRead || w.op.IsAtomic() {
			return fmt.Errorf("%w: acknowledgement of PSN %d passes %v at PSN %d", rdma.ErrProtocol, psn, w.op, w.psn)
		}
		q.completeHeadLocked(w)
	}
	return nil
}

// completeHeadLocked completes the oldest request successfully.
func (q *qp) completeHeadLocked(w *sendWQE) {
	if w.signaled {
		wc := rdma.WorkCompletion{ID: w.id, Opcode: rdma.WCOpcodeOf(w.op), QPN: q.qpn}
		if w.op == rdma.OpRead || w.op.IsAtomic() {
			wc.ByteLen = w.length
		}
		q.sendCQ.push(wc)
	}
	q.sqHead++
	q.lastProgress = time.Now()
	q.failLocalLocked()
}

// rnrLocked handles an RNR NAK for the oldest request w: after the
// responder's timer, everything from w on is transmitted again (the
// responder dropped what followed w), until w's RNR retries run out.
func (q *qp) rnrLocked(w *sendWQE, timer rdma.RNRTimer) {
	if w.rnrLeft == 0 {
		q.failLocked(rdma.WCRNRRetryExcErr)
		return
	}
	if w.rnrLeft > 0 {
		w.rnrLeft--
	}
	q.lastProgress = time.Now()
	q.dev.resent.Add(q.sqNext - q.sqHead)
	q.sqNext = q.sqHead
	q.rdAtomicInFlight = 0
	q.txStopped = false
	for i := q.sqHead; i < q.sqTail; i++ {
		q.sq[i%uint64(len(q.sq))].localErr = rdma.WCSuccess
	}
	q.rnrPaused = true
	stop := q.senderStop
	time.AfterFunc(time.Duration(timer.Micros())*time.Microsecond, func() {
		q.mu.Lock()
		if q.senderStop == stop {
			q.rnrPaused = false
		}
		q.mu.Unlock()
		q.kick()
	})
}
