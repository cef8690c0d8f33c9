package soft

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// The responder side of a link: it executes the requests the peer sends,
// with the checks an RC responder makes, in rxe's order, touching
// registered memory itself (no application code runs): it consumes
// receive requests and queues ACKs, NAKs, READ data and atomic results
// for the transmitter (link_tx.go).

// frameAction is what the frame being read does once its payload is in.
type frameAction uint8

const (
	actNone     frameAction = iota // discarded: dropped, refused, or its destination went away
	actSend                        // completes the receive rx.recvIdx
	actWrite                       // acknowledged
	actWriteImm                    // acknowledged, completes the receive rx.recvIdx
	actReadResp                    // part of the response to the READ at rx.sqIdx
	actAck                         // only its acknowledgement counts
)

// maxRespQueued bounds the READ and atomic responses a peer can have
// queued here: its requester keeps at most maxRdAtomic outstanding, so
// more is a broken or hostile peer.
const maxRespQueued = 4 * maxRdAtomic

// beginFrame starts applying the frame whose header was just read.
func (l *link) beginFrame() error {
	l.rx.action = actNone
	if l.rx.h.Type.isRequest() {
		return l.beginRequest()
	}
	return l.beginResponse()
}

// finishFrame applies a frame whose payload is all in; an
// acknowledgement it carries counts after the frame itself (a READ
// response can acknowledge requests behind the READ).
func (l *link) finishFrame() error {
	rx := &l.rx
	var err error
	switch rx.action {
	case actSend, actWrite, actWriteImm:
		l.finishRequest()
	case actReadResp:
		l.finishReadResponse()
	}
	if err == nil && rx.h.Flags&flagAck != 0 && !rx.ackDone {
		err = l.applyAck(rx.h.AckPSN)
	}
	return err
}

// ackNowLocked applies the current frame's acknowledgement at its start,
// under the lock already held, for a frame that is done there (one
// without payload, or placed whole): the same as applying it at its end.
func (l *link) ackNowLocked() error {
	rx, q := &l.rx, l.q
	if rx.h.Flags&flagAck == 0 || rx.ackDone {
		return nil
	}
	rx.ackDone = true
	if !l.currentLocked() || q.state != rdma.QPSRTS {
		return nil
	}
	return q.ackLocked(rx.h.AckPSN, true)
}

// beginRequest checks and starts executing a request of the peer.
func (l *link) beginRequest() error {
	rx, q := &l.rx, l.q
	h := &rx.h
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.currentLocked() || (q.state != rdma.QPSRTR && q.state != rdma.QPSRTS) {
		return nil
	}
	if h.PSN != rx.ePSN {
		if rx.rnrWait {
			// Requests after an RNR-NAKed one are dropped; the
			// requester sends them again.
			return nil
		}
		return fmt.Errorf("%w: request PSN %d, expected %d", rdma.ErrProtocol, h.PSN, rx.ePSN)
	}
	rx.rnrWait = false
	access := q.access
	var err error
	switch h.Type {
	case frameSend, frameSendImm:
		l.beginSendLocked()
	case frameWrite, frameWriteImm:
		if access&rdma.AccessRemoteWrite == 0 {
			l.nakLocked(nakInvalidRequest)
			return nil
		}
		l.beginWriteLocked()
	case frameRead:
		if access&rdma.AccessRemoteRead == 0 {
			l.nakLocked(nakInvalidRequest)
			return nil
		}
		err = l.readLocked()
	default:
		if access&rdma.AccessRemoteAtomic == 0 {
			l.nakLocked(nakInvalidRequest)
			return nil
		}
		err = l.atomicLocked()
	}
	if err == nil && (rx.left == 0 || rx.ackDone) {
		err = l.ackNowLocked()
	}
	return err
}

// nextPSN moves on to the next request.
func (rx *rxState) nextPSN() { rx.ePSN = (rx.ePSN + 1) & 0xffffff }

// nakLocked refuses the current request, which puts both queue pairs in
// error (an IB class C error). The NAK goes out before anything of the
// request's payload is read: the link parts, flushing it (link.partLocked).
func (l *link) nakLocked(code nakCode) {
	l.pushRespLocked(respItem{kind: respNak, psn: l.rx.h.PSN, code: uint8(code)})
	l.rx.action = actNone
	l.q.failLocked(rdma.WCWRFlushErr)
}

// rnrLocked tells the requester no receive is posted for the current
// request; it sends it again after the timer.
func (l *link) rnrLocked() {
	l.pushRespLocked(respItem{kind: respRNR, psn: l.rx.h.PSN, code: uint8(l.q.minRNR)})
	l.rx.rnrWait = true
	l.rx.action = actNone
	l.dev.rnrNAKs.Add(1)
}

// beginSendLocked sets a SEND's payload to fill the oldest receive. The
// receive stays posted while it fills: if the link breaks meanwhile, it
// is flushed with the others.
func (l *link) beginSendLocked() {
	rx, q := &l.rx, l.q
	if q.rqHead == q.rqTail {
		l.rnrLocked()
		return
	}
	r := &q.rq[q.rqHead%uint64(len(q.rq))]
	var st rdma.WCStatus
	rx.spans, rx.owners, st = q.dev.localSpans(q.pd, r.sgl, true, rx.spans[:0], rx.owners[:0])
	capacity := 0
	for _, s := range rx.spans {
		capacity += len(s)
	}
	switch {
	case st != rdma.WCSuccess:
		l.failRecvLocked(st, nakRemoteOp)
		return
	case capacity < int(rx.h.Length):
		l.failRecvLocked(rdma.WCLocLenErr, nakInvalidRequest)
		return
	}
	rx.sink, rx.recvIdx, rx.action = sinkRecv, q.rqHead, actSend
	rx.nextPSN()
	if b, ok := rx.buffered(); ok {
		// Arrived whole: place and complete it now, under this lock.
		if !acquireAll(rx.owners) {
			rx.sink = sinkDiscard
			l.failRecvLocked(rdma.WCLocProtErr, nakRemoteOp)
			return
		}
		scatter(rx.spans, b)
		releaseAll(rx.owners)
		rx.sink = sinkDiscard
		l.completeRecvLocked()
		rx.took()
		rx.ackDone = false // ackNowLocked applies it
	}
}

// completeRecvLocked completes the receive a SEND filled.
func (l *link) completeRecvLocked() {
	rx, q := &l.rx, l.q
	h := &rx.h
	r := &q.rq[q.rqHead%uint64(len(q.rq))]
	q.rqHead++
	wc := rdma.WorkCompletion{ID: r.id, Opcode: rdma.WCRecv, QPN: q.qpn, ByteLen: h.Length}
	if h.Type == frameSendImm {
		wc.Imm, wc.HasImm = h.Imm, true
	}
	l.executedLocked(h.PSN, true)
	q.recvCQ.push(wc)
}

// failRecvLocked completes the oldest receive with status and NAKs the
// current request with code.
func (l *link) failRecvLocked(status rdma.WCStatus, code nakCode) {
	q := l.q
	r := &q.rq[q.rqHead%uint64(len(q.rq))]
	q.rqHead++
	q.recvCQ.push(rdma.WorkCompletion{ID: r.id, Status: status, Opcode: rdma.WCRecv, QPN: q.qpn})
	l.nakLocked(code)
}

// beginWriteLocked checks a WRITE's target and sets its payload to go
// there. A bad target is NAKed at once, before the payload is read.
func (l *link) beginWriteLocked() {
	rx, q := &l.rx, l.q
	h := &rx.h
	withImm := h.Type == frameWriteImm
	if withImm && q.rqHead == q.rqTail {
		l.rnrLocked()
		return
	}
	if h.Length > 0 {
		// A zero-length write checks no key.
		m, span, ok := q.dev.remoteSpan(q.pd, h.RKey, h.RemoteAddr, h.Length, rdma.AccessRemoteWrite)
		if !ok {
			l.nakLocked(nakRemoteAccess)
			return
		}
		rx.spans = append(rx.spans[:0], span)
		rx.owners = append(rx.owners[:0], m)
		rx.sink = sinkMR
		// Watched while its payload arrives: Dereg fails it at once.
		m.watch(l)
		l.rxMR, l.rxMRPSN = m, h.PSN
	}
	rx.action = actWrite
	if withImm {
		rx.action, rx.recvIdx = actWriteImm, q.rqHead
	}
	rx.nextPSN()
}

// writeRevoked fails a WRITE whose target region was deregistered while
// its payload arrived: a remote access error, NAKed at once.
func (l *link) writeRevoked() {
	q := l.q
	q.mu.Lock()
	if l.currentLocked() {
		l.nakLocked(nakRemoteAccess)
	}
	l.rx.action = actNone
	q.mu.Unlock()
}

// placeRevoked fails a SEND or a READ response whose local buffers were
// deregistered while its payload arrived.
func (l *link) placeRevoked(sink sinkKind) {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	l.rx.action = actNone
	if !l.currentLocked() {
		return
	}
	switch sink {
	case sinkRecv:
		if q.rqHead == l.rx.recvIdx && q.rqHead < q.rqTail {
			l.failRecvLocked(rdma.WCLocProtErr, nakRemoteOp)
			return
		}
		q.failLocked(rdma.WCWRFlushErr)
	case sinkRead:
		q.failLocked(rdma.WCLocProtErr)
	}
}

// finishRequest completes a SEND or WRITE whose payload is all placed:
// its receive completes, and it is owed an acknowledgement (before the
// receiver can see the completion: it may destroy its queue pair at
// once, see link.partLocked).
func (l *link) finishRequest() {
	rx, q := &l.rx, l.q
	h := &rx.h
	q.mu.Lock()
	defer q.mu.Unlock()
	l.endWriteLocked()
	if !l.currentLocked() || (q.state != rdma.QPSRTR && q.state != rdma.QPSRTS) {
		return
	}
	switch rx.action {
	case actSend:
		if q.rqHead != rx.recvIdx {
			return
		}
		l.completeRecvLocked()
	case actWriteImm:
		if q.rqHead != rx.recvIdx {
			return
		}
		r := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.rqHead++
		l.executedLocked(h.PSN, true)
		q.recvCQ.push(rdma.WorkCompletion{ID: r.id, Opcode: rdma.WCRecvWriteWithImm, QPN: q.qpn, ByteLen: h.Length, Imm: h.Imm, HasImm: true})
	case actWrite:
		l.executedLocked(h.PSN, false)
	}
}

// endWriteLocked forgets the region of a WRITE whose frame ended, one
// way or another.
func (l *link) endWriteLocked() {
	if l.rxMR != nil {
		l.rxMR.unwatch(l)
		l.rxMR = nil
	}
}

// executedLocked records that the request at psn executed and is owed an
// acknowledgement. One that completed a receive may wait for a frame to
// ride on while the application answers messages (link.pingpong).
func (l *link) executedLocked(psn uint32, completedRecv bool) {
	if d := l.dev.responseDelay(); d > 0 && !l.ackOwed {
		l.ackDue = time.Now().Add(d)
	}
	l.ackOwed = true
	l.ackPSN = psn
	l.ackUnsent++
	l.ackSeq++
	if completedRecv {
		l.recvSinceTx = true
	}
	l.ackDelay = completedRecv && l.pingpong && l.ackUnsent == 1
}

// readLocked queues the response to a READ, whose data is read from
// memory when it is transmitted (link_tx.go).
func (l *link) readLocked() error {
	rx, q := &l.rx, l.q
	h := &rx.h
	if l.respQueuedLocked() >= maxRespQueued {
		return fmt.Errorf("%w: more than %d READs and atomics outstanding", rdma.ErrProtocol, maxRespQueued)
	}
	item := respItem{kind: respRead, psn: h.PSN}
	if h.Length > 0 {
		m, span, ok := q.dev.remoteSpan(q.pd, h.RKey, h.RemoteAddr, h.Length, rdma.AccessRemoteRead)
		if !ok {
			l.nakLocked(nakRemoteAccess)
			return nil
		}
		item.mr, item.data, item.watched = m, span, true
		m.watch(l)
	}
	l.pushRespLocked(item)
	rx.nextPSN()
	return nil
}

// atomicLocked executes an atomic on its 8-byte word, with sync/atomic,
// so that it is atomic against every other atomic in the process and the
// host CPU's, and queues the original value.
func (l *link) atomicLocked() error {
	rx, q := &l.rx, l.q
	h := &rx.h
	if l.respQueuedLocked() >= maxRespQueued {
		return fmt.Errorf("%w: more than %d READs and atomics outstanding", rdma.ErrProtocol, maxRespQueued)
	}
	m, span, ok := q.dev.remoteSpan(q.pd, h.RKey, h.RemoteAddr, 8, rdma.AccessRemoteAtomic)
	if !ok {
		l.nakLocked(nakRemoteAccess)
		return nil
	}
	if h.RemoteAddr%8 != 0 {
		l.nakLocked(nakInvalidRequest)
		return nil
	}
	if !m.acquire() {
		l.nakLocked(nakRemoteAccess)
		return nil
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
	l.pushRespLocked(respItem{kind: respAtomic, psn: h.PSN, val: old})
	rx.nextPSN()
	return nil
}
