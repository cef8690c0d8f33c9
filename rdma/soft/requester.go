package soft

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/octofs/octofs/rdma"
)

// The requester side of a link: the responses and acknowledgements that
// complete this side's send queue.

// beginResponse starts applying a response of the peer to this side's
// requests.
func (l *link) beginResponse() error {
	rx, q := &l.rx, l.q
	h := &rx.h
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.currentLocked() || q.state != rdma.QPSRTS {
		return nil
	}
	if h.Type == frameAck {
		return l.ackNowLocked()
	}
	// Every response acknowledges the requests before its PSN.
	if err := q.ackLocked(h.PSN, false); err != nil {
		return err
	}
	if q.sqHead == q.sqNext {
		return fmt.Errorf("%w: response for PSN %d with nothing outstanding", rdma.ErrProtocol, h.PSN)
	}
	w := &q.sq[q.sqHead%uint64(len(q.sq))]
	if w.psn != h.PSN {
		return fmt.Errorf("%w: response for PSN %d, expected %d", rdma.ErrProtocol, h.PSN, w.psn)
	}
	q.progress.Add(1)
	switch h.Type {
	case frameNak:
		q.failLocked(nakCode(h.Code).status())
	case frameRNRNak:
		if !w.op.ConsumesRecv() {
			return fmt.Errorf("%w: RNR NAK for %v", rdma.ErrProtocol, w.op)
		}
		q.rnrLocked(w, rdma.RNRTimer(h.Code))
	case frameReadResp:
		if w.op != rdma.OpRead || h.RemoteAddr != uint64(q.rdGot) || uint64(h.Length) > uint64(w.length-q.rdGot) {
			return fmt.Errorf("%w: READ response of %d bytes at %d for %v of %d with %d in", rdma.ErrProtocol, h.Length, h.RemoteAddr, w.op, w.length, q.rdGot)
		}
		var st rdma.WCStatus
		rx.spans, rx.owners, st = q.dev.localSpans(q.pd, w.sgl, true, rx.spans[:0], rx.owners[:0])
		if st != rdma.WCSuccess {
			q.failLocked(st) // a local protection error of the READ
			return nil
		}
		rx.advance(int(q.rdGot))
		rx.sink, rx.sqIdx, rx.action = sinkRead, q.sqHead, actReadResp
		if b, ok := rx.buffered(); ok {
			// Arrived whole: place it now, under this lock.
			if !acquireAll(rx.owners) {
				rx.sink = sinkDiscard
				q.failLocked(rdma.WCLocProtErr)
				return nil
			}
			scatterFrom(rx.spans, rx.si, rx.spanOff, b)
			releaseAll(rx.owners)
			rx.sink = sinkDiscard
			rx.took()
			q.rdGot += h.Length
			if q.rdGot == w.length {
				q.rdGot = 0
				q.rdAtomicInFlight--
				q.completeHeadLocked(w)
			}
			rx.ackDone = false
			return l.ackNowLocked()
		}
		return nil
	case frameAtomicResp:
		if !w.op.IsAtomic() {
			return fmt.Errorf("%w: atomic response for %v", rdma.ErrProtocol, w.op)
		}
		l.placeAtomicLocked(w, h.CompareAdd)
	}
	return l.ackNowLocked()
}

// scatterFrom copies b into spans from span si at offset off.
func scatterFrom(spans [][]byte, si, off int, b []byte) {
	for i := si; i < len(spans) && len(b) > 0; i++ {
		s := spans[i]
		if i == si {
			s = s[off:]
		}
		b = b[copy(s, b):]
	}
}

// placeAtomicLocked writes an atomic's original value into its local
// buffer and completes it. (Eight bytes, copied under the queue pair's
// lock, so no failure can interleave.)
func (l *link) placeAtomicLocked(w *sendWQE, old uint64) {
	q, rx := l.q, &l.rx
	var st rdma.WCStatus
	rx.spans, rx.owners, st = q.dev.localSpans(q.pd, w.sgl, true, rx.spans[:0], rx.owners[:0])
	if st == rdma.WCSuccess && !acquireAll(rx.owners) {
		st = rdma.WCLocProtErr
	}
	if st != rdma.WCSuccess {
		q.failLocked(st)
		return
	}
	binary.NativeEndian.PutUint64(rx.old[:], old)
	rest := rx.old[:]
	for _, s := range rx.spans {
		rest = rest[copy(s, rest):]
	}
	releaseAll(rx.owners)
	q.rdAtomicInFlight--
	q.completeHeadLocked(w)
}

// finishReadResponse counts a READ response frame placed; the READ
// completes with its last byte.
func (l *link) finishReadResponse() {
	rx, q := &l.rx, l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.currentLocked() || q.state != rdma.QPSRTS || q.sqHead != rx.sqIdx {
		return
	}
	w := &q.sq[q.sqHead%uint64(len(q.sq))]
	q.rdGot += rx.h.Length
	if q.rdGot < w.length {
		return
	}
	q.rdGot = 0
	q.rdAtomicInFlight--
	q.completeHeadLocked(w)
}

// applyAck applies an acknowledgement the peer sent: its requests
// through psn are done.
func (l *link) applyAck(psn uint32) error {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !l.currentLocked() || q.state != rdma.QPSRTS {
		return nil
	}
	return q.ackLocked(psn, true)
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

// completeHeadLocked completes the oldest request successfully. A
// signaled completion frees the send queue slots of the unsignaled
// requests before it, as on a NIC; until then they stay taken.
func (q *qp) completeHeadLocked(w *sendWQE) {
	if w.signaled {
		wc := rdma.WorkCompletion{ID: w.id, Opcode: rdma.WCOpcodeOf(w.op), QPN: q.qpn}
		if w.op == rdma.OpRead || w.op.IsAtomic() {
			wc.ByteLen = w.length
		}
		q.sendCQ.push(wc)
	}
	q.sqHead++
	if w.signaled {
		q.sqFree = q.sqHead
	}
	q.progress.Add(1)
	q.failLocalLocked()
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
	q.dev.resent.Add(q.sqNext - q.sqHead)
	q.sqNext = q.sqHead
	q.rdAtomicInFlight = 0
	q.rdGot = 0
	q.txStopped = false
	for i := q.sqHead; i < q.sqTail; i++ {
		q.sq[i%uint64(len(q.sq))].localErr = rdma.WCSuccess
	}
	q.rnrPaused = true
	gen := q.connGen
	time.AfterFunc(time.Duration(timer.Micros())*time.Microsecond, func() {
		q.mu.Lock()
		l := q.link
		if q.connGen != gen || l == nil {
			q.mu.Unlock()
			return
		}
		q.rnrPaused = false
		q.mu.Unlock()
		l.transmit(false)
	})
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

func hasOutgoingPayload(op rdma.Opcode) bool {
	switch op {
	case rdma.OpSend, rdma.OpSendWithImm, rdma.OpWrite, rdma.OpWriteWithImm:
		return true
	}
	return false
}
