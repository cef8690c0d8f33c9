package soft

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// responder executes the requests a peer sends on its connection to one
// queue pair: it checks them as an RC responder does, touches registered
// memory itself (no application code runs), consumes receive requests and
// answers with ACKs, NAKs, READ data and atomic results.
type responder struct {
	q  *qp
	c  *wireConn
	br *bufio.Reader

	ePSN    uint32 // the next request's PSN
	rnrWait bool   // an RNR NAK was sent: drop requests until ePSN returns

	// wmu guards the response stream, so that part can send the last
	// acknowledgement from another goroutine.
	wmu        sync.Mutex
	bw         *bufio.Writer
	ackPending bool
	ackPSN     uint32
	rhdr       [frameHeaderSize]byte // a large READ response's header
	rbufs      net.Buffers
	rout       net.Buffers           // what WriteTo consumes of rbufs
	whdr       [frameHeaderSize]byte // writeHeader's scratch

	hdr   [frameHeaderSize]byte
	sgl   []rdma.SGE
	spans [][]byte
	held  []*mr
}

// errStop ends the responder after it has answered: the queue pair is in
// error or the connection is unusable.
var errStop = errors.New("stop")

// attachResponder binds an incoming connection to q if q expects it.
func (q *qp) attachResponder(c *wireConn, h *hello) (helloStatus, *responder) {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case q.destroyed:
		return helloNoQP, nil
	case q.state != rdma.QPSRTR && q.state != rdma.QPSRTS:
		return helloNotReady, nil
	case q.remote.QPN != h.SrcQPN || q.remote.Addr != h.SrcAddr:
		return helloWrongPeer, nil
	case q.resp != nil:
		return helloBusy, nil
	}
	r := &responder{
		q:    q,
		c:    c,
		br:   bufio.NewReaderSize(c, 64<<10),
		bw:   bufio.NewWriterSize(c, 64<<10),
		ePSN: q.remote.PSN,
	}
	q.resp = r
	return helloOK, r
}

func (q *qp) detachResponder(r *responder) {
	q.mu.Lock()
	if q.resp == r {
		q.resp = nil
	}
	q.mu.Unlock()
}

// run serves requests until the connection ends.
func (r *responder) run() {
	defer r.q.detachResponder(r)
	defer r.c.Close()
	for {
		// Coalesce acknowledgements: answer once the requests that
		// have already arrived are all executed.
		if r.br.Buffered() == 0 {
			if err := r.flush(); err != nil {
				return
			}
		}
		if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
			return
		}
		var h frameHeader
		err := h.decode(r.hdr[:])
		if err == nil && !h.Type.isRequest() {
			err = fmt.Errorf("%w: response frame on a responder connection", rdma.ErrProtocol)
		}
		if err == nil {
			err = r.handle(&h)
		}
		if err != nil {
			if errors.Is(err, rdma.ErrProtocol) {
				// The stream cannot be trusted past a bad frame: the
				// queue pair cannot receive from this peer any more.
				r.q.dev.log.Warn("closing responder connection", "qpn", r.q.qpn, "err", err)
				r.q.mu.Lock()
				if r.q.resp == r {
					r.q.failLocked(rdma.WCWRFlushErr)
				}
				r.q.mu.Unlock()
			}
			return
		}
	}
}

// part ends the responder when its queue pair is destroyed or reset:
// requests it executed are acknowledged first, so that a peer whose SEND
// completed here does not see it fail because the receiver closed at once
// (a NIC acknowledges on its own; the soft provider defers ACKs to batch
// them). It is a no-op on a nil responder.
func (r *responder) part() {
	if r == nil {
		return
	}
	r.c.SetWriteDeadline(time.Now().Add(partTimeout))
	r.wmu.Lock()
	r.flushLocked()
	r.wmu.Unlock()
	r.c.Close()
}

// partTimeout bounds the last acknowledgement to a peer that stopped
// reading.
const partTimeout = time.Second

func (r *responder) flush() error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.flushLocked()
}

func (r *responder) flushLocked() error {
	if r.ackPending {
		r.writeHeader(frameHeader{Type: frameAck, PSN: r.ackPSN})
		r.ackPending = false
	}
	if r.bw.Buffered() == 0 {
		return nil
	}
	r.q.dev.responseDelay()
	return r.bw.Flush()
}

// writeHeader buffers a response header; the caller holds wmu.
func (r *responder) writeHeader(h frameHeader) {
	h.encode(r.whdr[:])
	r.bw.Write(r.whdr[:])
}

// done records that the request at h.PSN executed; with ack, it is to be
// acknowledged (a READ or atomic response acknowledges by itself).
func (r *responder) done(h *frameHeader, ack bool) {
	r.ePSN = h.PSN + 1
	r.wmu.Lock()
	r.ackPending = ack
	r.ackPSN = h.PSN
	r.wmu.Unlock()
}

// respond buffers a response to h, which acknowledges everything before.
func (r *responder) respond(h frameHeader) {
	r.wmu.Lock()
	r.ackPending = false
	r.writeHeader(h)
	r.wmu.Unlock()
}

// handle executes one request.
func (r *responder) handle(h *frameHeader) error {
	q := r.q
	if h.PSN != r.ePSN {
		if r.rnrWait {
			// Requests after an RNR-NAKed one are dropped; the
			// requester sends them again.
			return r.skipPayload(h)
		}
		return fmt.Errorf("%w: request PSN %d, expected %d", rdma.ErrProtocol, h.PSN, r.ePSN)
	}
	r.rnrWait = false
	q.mu.Lock()
	state, access, current := q.state, q.access, q.resp == r
	q.mu.Unlock()
	if !current || (state != rdma.QPSRTR && state != rdma.QPSRTS) {
		return errStop
	}
	switch h.Type {
	case frameSend, frameSendImm:
		return r.send(h)
	case frameWrite, frameWriteImm:
		if access&rdma.AccessRemoteWrite == 0 {
			return r.nak(h, nakInvalidRequest)
		}
		return r.write(h)
	case frameRead:
		if access&rdma.AccessRemoteRead == 0 {
			return r.nak(h, nakInvalidRequest)
		}
		return r.read(h)
	default:
		if access&rdma.AccessRemoteAtomic == 0 {
			return r.nak(h, nakInvalidRequest)
		}
		return r.atomic(h)
	}
}

func (r *responder) skipPayload(h *frameHeader) error {
	if h.Type.hasPayload() {
		return discard(r.br, h.Length)
	}
	return nil
}

// nak refuses the request at h.PSN, which puts both queue pairs in error
// (an IB class C error).
func (r *responder) nak(h *frameHeader, code nakCode) error {
	if err := r.skipPayload(h); err != nil {
		return err
	}
	r.respond(frameHeader{Type: frameNak, PSN: h.PSN, Code: uint8(code)})
	r.flush()
	r.q.fail(rdma.WCWRFlushErr)
	return errStop
}

// rnr tells the requester no receive is posted for h; it retries later.
func (r *responder) rnr(h *frameHeader) error {
	if err := r.skipPayload(h); err != nil {
		return err
	}
	r.q.mu.Lock()
	timer := r.q.minRNR
	r.q.mu.Unlock()
	r.respond(frameHeader{Type: frameRNRNak, PSN: h.PSN, Code: uint8(timer)})
	r.rnrWait = true
	r.q.dev.rnrNAKs.Add(1)
	return r.flush()
}

// popRecv takes the oldest receive request, copying its SGL into the
// responder's scratch. ok is false when none is posted.
func (r *responder) popRecv() (id uint64, ok bool) {
	q := r.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rqHead == q.rqTail {
		return 0, false
	}
	w := &q.rq[q.rqHead%uint64(len(q.rq))]
	q.rqHead++
	r.sgl = append(r.sgl[:0], w.sgl...)
	return w.id, true
}

func (r *responder) hasRecv() bool {
	r.q.mu.Lock()
	defer r.q.mu.Unlock()
	return r.q.rqHead < r.q.rqTail
}

// completeRecv reports a consumed receive request. If the queue pair left
// RTR/RTS meanwhile, the request is reported flushed instead.
func (r *responder) completeRecv(wc rdma.WorkCompletion) {
	q := r.q
	q.mu.Lock()
	defer q.mu.Unlock()
	wc.QPN = q.qpn
	if q.state != rdma.QPSRTR && q.state != rdma.QPSRTS {
		wc = rdma.WorkCompletion{ID: wc.ID, Status: rdma.WCWRFlushErr, Opcode: rdma.WCRecv, QPN: q.qpn}
	}
	q.recvCQ.push(wc)
}

func (r *responder) send(h *frameHeader) error {
	id, ok := r.popRecv()
	if !ok {
		return r.rnr(h)
	}
	q := r.q
	var st rdma.WCStatus
	r.spans, r.held, st = q.dev.localSpans(q.pd, r.sgl, true, r.spans[:0], r.held[:0])
	capacity := 0
	for _, s := range r.spans {
		capacity += len(s)
	}
	code := nakCode(0)
	switch {
	case st != rdma.WCSuccess:
		code = nakRemoteOp
	case capacity < int(h.Length):
		st, code = rdma.WCLocLenErr, nakInvalidRequest
	}
	if code != 0 {
		r.held = releaseAll(r.held)
		r.completeRecv(rdma.WorkCompletion{ID: id, Status: st, Opcode: rdma.WCRecv})
		return r.nak(h, code)
	}
	rest := int(h.Length)
	for _, s := range r.spans {
		n := min(rest, len(s))
		if _, err := io.ReadFull(r.br, s[:n]); err != nil {
			r.held = releaseAll(r.held)
			return err
		}
		rest -= n
	}
	r.held = releaseAll(r.held)
	wc := rdma.WorkCompletion{ID: id, Opcode: rdma.WCRecv, ByteLen: h.Length}
	if h.Type == frameSendImm {
		wc.Imm, wc.HasImm = h.Imm, true
	}
	// Owe the acknowledgement before the receiver can see the
	// completion: it may destroy its queue pair at once (see part).
	r.done(h, true)
	r.completeRecv(wc)
	return nil
}

func (r *responder) write(h *frameHeader) error {
	withImm := h.Type == frameWriteImm
	if withImm && !r.hasRecv() {
		return r.rnr(h)
	}
	if h.Length > 0 {
		// A zero-length write checks no key.
		m, span, ok := r.q.dev.remoteSpan(r.q.pd, h.RKey, h.RemoteAddr, h.Length, rdma.AccessRemoteWrite)
		if !ok {
			return r.nak(h, nakRemoteAccess)
		}
		_, err := io.ReadFull(r.br, span)
		m.release()
		if err != nil {
			return err
		}
	}
	r.done(h, true) // before the completion, as in send
	if withImm {
		id, _ := r.popRecv()
		r.completeRecv(rdma.WorkCompletion{ID: id, Opcode: rdma.WCRecvWriteWithImm, ByteLen: h.Length, Imm: h.Imm, HasImm: true})
	}
	return nil
}

func (r *responder) read(h *frameHeader) error {
	var span []byte
	var m *mr
	if h.Length > 0 {
		var ok bool
		m, span, ok = r.q.dev.remoteSpan(r.q.pd, h.RKey, h.RemoteAddr, h.Length, rdma.AccessRemoteRead)
		if !ok {
			return r.nak(h, nakRemoteAccess)
		}
	}
	r.done(h, false)
	r.wmu.Lock()
	defer r.wmu.Unlock()
	resp := frameHeader{Type: frameReadResp, PSN: h.PSN, Length: h.Length}
	if m == nil {
		r.writeHeader(resp)
		return nil
	}
	defer m.release()
	if frameHeaderSize+len(span) > r.bw.Available() {
		// Large data goes straight from registered memory to the
		// socket, after what is buffered: header and data in one
		// writev.
		if err := r.flushLocked(); err != nil {
			return err
		}
		r.q.dev.responseDelay()
		resp.encode(r.rhdr[:])
		r.rbufs = append(r.rbufs[:0], r.rhdr[:], span)
		r.rout = r.rbufs                   // WriteTo consumes its receiver
		_, err := r.rout.WriteTo(r.c.Conn) // the net.Conn itself, which writes with writev
		clear(r.rbufs[:2])
		return err
	}
	r.writeHeader(resp)
	_, err := r.bw.Write(span)
	return err
}

func (r *responder) atomic(h *frameHeader) error {
	m, span, ok := r.q.dev.remoteSpan(r.q.pd, h.RKey, h.RemoteAddr, 8, rdma.AccessRemoteAtomic)
	if !ok {
		return r.nak(h, nakRemoteAccess)
	}
	if h.RemoteAddr%8 != 0 {
		m.release()
		return r.nak(h, nakInvalidRequest)
	}
	word := (*uint64)(unsafe.Pointer(unsafe.SliceData(span)))
	var old uint64
	if h.Type == frameCmpSwp {
		for {
			old = atomic.LoadUint64(word)
			if old != h.CompareAdd || atomic.CompareAndSwapUint64(word, old, h.Swap) {
				break
			}
		}
	} else {
		old = atomic.AddUint64(word, h.CompareAdd) - h.CompareAdd
	}
	m.release()
	r.done(h, false)
	r.respond(frameHeader{Type: frameAtomicResp, PSN: h.PSN, CompareAdd: old})
	return nil
}
