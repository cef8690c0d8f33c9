//go:build verbs && cgo

package verbs

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/octofs/octofs/rdma"
)

// postBatch is how many work requests one ibv_post_send/recv call takes;
// PostSend and PostRecv loop for longer lists.
const postBatch = 32

// Queue pair defaults for zero QPConfig fields.
const (
	defaultMaxWR  = 128
	defaultMaxSGE = 1
)

// qp is an RC queue pair. Work requests are built in C memory that the
// queue pair owns (one batch per queue, guarded by sendMu and recvMu), so
// no Go pointer ever reaches libibverbs.
type qp struct {
	pd       *pd
	dev      *device
	qp       *C.struct_ibv_qp
	qpn      uint32
	psn      uint32
	scq, rcq *cq

	// The capacities the caller asked for: post-time checks use these, not
	// the device's rounded-up ones, so every device refuses the same
	// requests.
	maxSendSGE, maxRecvSGE, maxInline int
	// caps is what the device granted (ibv_create_qp's cap), for Caps.
	caps rdma.QPCaps

	// state is the last state Modify set; State asks the device, which
	// also knows about transitions to Err.
	state  atomic.Uint32
	closed atomic.Bool
	// failed is set once the queue pair is known to be in Err: an error
	// completion of it was polled, or Modify moved it there. See PostRecv.
	failed atomic.Bool

	mu sync.Mutex // serialises Modify and Close

	sendMu   sync.Mutex
	sendWRs  []C.struct_octo_send
	sendSGEs []C.struct_ibv_sge
	sendScr  *C.struct_ibv_send_wr
	// badIdx receives the index of a refused request, [0] PostSend's
	// (under sendMu), [1] PostRecv's (under recvMu); it is C memory
	// because a Go variable passed to C escapes to the heap on every call.
	badIdx []C.int

	recvMu   sync.Mutex
	recvWRs  []C.struct_octo_recv
	recvSGEs []C.struct_ibv_sge
	recvScr  *C.struct_ibv_recv_wr
}

var _ rdma.QP = (*qp)(nil)

func (p *pd) createQP(cfg rdma.QPConfig) (*qp, error) {
	scq, ok1 := cfg.SendCQ.(*cq)
	rcq, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil || scq.dev != p.dev || rcq.dev != p.dev {
		return nil, fmt.Errorf("%w: queue pair needs completion queues of the same verbs device", rdma.ErrInvalid)
	}
	caps := p.dev.caps
	sendWR, recvWR := orDefault(cfg.MaxSendWR, defaultMaxWR), orDefault(cfg.MaxRecvWR, defaultMaxWR)
	sendSGE, recvSGE := orDefault(cfg.MaxSendSGE, defaultMaxSGE), orDefault(cfg.MaxRecvSGE, defaultMaxSGE)
	switch {
	case sendWR < 0 || recvWR < 0 || sendWR > caps.MaxQPWR || recvWR > caps.MaxQPWR:
		return nil, fmt.Errorf("%w: %d send and %d receive WRs (device allows %d)", rdma.ErrInvalid, sendWR, recvWR, caps.MaxQPWR)
	case sendSGE < 0 || recvSGE < 0 || sendSGE > caps.MaxSGE || recvSGE > caps.MaxSGE:
		return nil, fmt.Errorf("%w: %d send and %d receive SGEs (device allows %d)", rdma.ErrInvalid, sendSGE, recvSGE, caps.MaxSGE)
	case cfg.MaxInline < 0 || cfg.MaxInline > caps.MaxInline:
		return nil, fmt.Errorf("%w: %d bytes inline (device allows %d)", rdma.ErrInvalid, cfg.MaxInline, caps.MaxInline)
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, rdma.ErrClosed
	}
	if err := scq.ref(); err != nil {
		return nil, err
	}
	if err := rcq.ref(); err != nil {
		scq.unref()
		return nil, err
	}
	var q *C.struct_ibv_qp
	var granted C.struct_ibv_qp_cap
	sigAll := C.int(0)
	if cfg.SignalAll {
		sigAll = 1
	}
	if rc := C.octo_create_qp(p.pd, scq.cq, rcq.cq, C.uint32_t(sendWR), C.uint32_t(recvWR),
		C.uint32_t(sendSGE), C.uint32_t(recvSGE), C.uint32_t(cfg.MaxInline), sigAll, &q, &granted); rc != 0 {
		scq.unref()
		rcq.unref()
		return nil, fmt.Errorf("verbs: create QP: %w", mapErrno(syscall.Errno(rc)))
	}
	qp := &qp{
		pd: p, dev: p.dev, qp: q, qpn: uint32(q.qp_num), psn: rdma.RandomPSN(),
		scq: scq, rcq: rcq,
		caps: rdma.QPCaps{
			MaxSendWR: int(granted.max_send_wr), MaxRecvWR: int(granted.max_recv_wr),
			MaxSendSGE: int(granted.max_send_sge), MaxRecvSGE: int(granted.max_recv_sge),
			MaxInline: int(granted.max_inline_data),
		},
		maxSendSGE: sendSGE, maxRecvSGE: recvSGE, maxInline: cfg.MaxInline,
		sendWRs:  cslice[C.struct_octo_send](postBatch, C.sizeof_struct_octo_send),
		sendSGEs: cslice[C.struct_ibv_sge](postBatch*max(sendSGE, 1), C.sizeof_struct_ibv_sge),
		sendScr:  (*C.struct_ibv_send_wr)(C.calloc(postBatch, C.sizeof_struct_ibv_send_wr)),
		recvWRs:  cslice[C.struct_octo_recv](postBatch, C.sizeof_struct_octo_recv),
		recvSGEs: cslice[C.struct_ibv_sge](postBatch*max(recvSGE, 1), C.sizeof_struct_ibv_sge),
		recvScr:  (*C.struct_ibv_recv_wr)(C.calloc(postBatch, C.sizeof_struct_ibv_recv_wr)),
		badIdx:   cslice[C.int](2, C.sizeof_int),
	}
	qp.state.Store(uint32(rdma.QPSReset))
	p.qps[qp] = struct{}{}
	p.dev.addQP(qp)
	return qp, nil
}

// cslice allocates n zeroed elements of C memory as a Go slice header.
func cslice[T any](n int, size C.size_t) []T {
	return unsafe.Slice((*T)(C.calloc(C.size_t(n), size)), n)
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func (q *qp) QPN() uint32 { return q.qpn }

// Caps returns the sizes the device granted, which may exceed what
// QPConfig asked for: devices round queue sizes up (rxe to a power of two
// minus one). Post-time checks still use what was asked for.
func (q *qp) Caps() rdma.QPCaps { return q.caps }

// State asks the device: a queue pair also moves to Err on its own.
func (q *qp) State() rdma.QPState {
	if q.closed.Load() {
		return rdma.QPState(q.state.Load())
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return rdma.QPState(q.state.Load())
	}
	var s C.int
	if C.octo_query_qp_state(q.qp, &s) != 0 {
		return rdma.QPState(q.state.Load())
	}
	return qpState(int(s))
}

func (q *qp) Endpoint() rdma.Endpoint {
	return rdma.Endpoint{QPN: q.qpn, PSN: q.psn, LID: q.dev.lid, GID: q.dev.gid, MTU: q.dev.activeMTU}
}

// legalTransition is the RC state machine of the rdma API: Reset→Init,
// Init→Init, Init→RTR, RTR→RTS, RTS→RTS, and anything to Reset or Err
// (Reset→Err goes through Init, see Modify).
func legalTransition(from, to rdma.QPState) bool {
	switch to {
	case rdma.QPSReset, rdma.QPSErr:
		return true
	case rdma.QPSInit:
		return from == rdma.QPSReset || from == rdma.QPSInit
	case rdma.QPSRTR:
		return from == rdma.QPSInit
	case rdma.QPSRTS:
		return from == rdma.QPSRTR || from == rdma.QPSRTS
	}
	return false
}

func (q *qp) Modify(a rdma.QPAttr) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return rdma.ErrClosed
	}
	from := rdma.QPState(q.state.Load())
	var s C.int
	if C.octo_query_qp_state(q.qp, &s) == 0 {
		from = qpState(int(s))
	}
	if !legalTransition(from, a.State) {
		return fmt.Errorf("%w: %v to %v", rdma.ErrBadState, from, a.State)
	}
	if from == rdma.QPSReset && a.State == rdma.QPSErr {
		// The rdma API lets any state move to Err; the kernel's state
		// table (and so every verbs device) has no Reset → Err. Going
		// through Init reaches the same place: a Reset queue pair has no
		// work requests to flush.
		if err := q.modify(rdma.QPAttr{State: rdma.QPSInit}, from); err != nil {
			return err
		}
		from = rdma.QPSInit
	}
	return q.modify(a, from)
}

// modify performs one transition the kernel accepts; q.mu is held.
func (q *qp) modify(a rdma.QPAttr, from rdma.QPState) error {
	var attr C.struct_ibv_qp_attr
	var mask C.int
	switch a.State {
	case rdma.QPSReset:
		attr.qp_state, mask = C.IBV_QPS_RESET, C.IBV_QP_STATE
	case rdma.QPSErr:
		attr.qp_state, mask = C.IBV_QPS_ERR, C.IBV_QP_STATE
	case rdma.QPSInit:
		port := a.Port
		if port == 0 {
			port = q.dev.port
		}
		if port != q.dev.port {
			return fmt.Errorf("%w: port %d, but the device was opened on port %d", rdma.ErrInvalid, port, q.dev.port)
		}
		attr.qp_state = C.IBV_QPS_INIT
		attr.pkey_index = 0
		attr.port_num = C.uint8_t(port)
		attr.qp_access_flags = C.uint(accessFlags(a.Access &^ rdma.AccessLocalWrite))
		mask = C.IBV_QP_STATE | C.IBV_QP_PKEY_INDEX | C.IBV_QP_PORT | C.IBV_QP_ACCESS_FLAGS
	case rdma.QPSRTR:
		r := a.Remote
		mtu := q.dev.activeMTU
		if r.MTU != 0 {
			mtu = min(mtu, r.MTU)
		}
		if a.PathMTU != 0 {
			mtu = min(mtu, a.PathMTU)
		}
		if mtu < 256 {
			return fmt.Errorf("%w: path MTU %d below 256", rdma.ErrInvalid, mtu)
		}
		if a.MinRNRTimer > 31 {
			return fmt.Errorf("%w: RNR timer %d", rdma.ErrInvalid, a.MinRNRTimer)
		}
		rd := int(a.MaxDestRdAtomic)
		if rd == 0 {
			rd = 1
		}
		rd = min(rd, q.dev.maxQPRdAtom)
		global := 0
		if q.dev.ethernet {
			global = 1 // RoCE and rxe route by GID: a GRH is mandatory
		}
		// octo_set_rtr copies the GID: a Go pointer to Go memory without
		// pointers, like &attr, may be passed for the call's duration.
		C.octo_set_rtr(&attr, C.uint32_t(r.QPN), C.uint32_t(r.PSN&0xffffff), C.int(mtuEnum(mtu)),
			C.uint8_t(rd), C.uint8_t(a.MinRNRTimer), C.uint16_t(r.LID), (*C.uint8_t)(&r.GID[0]), C.int(global),
			C.uint8_t(q.dev.gidIndex), C.uint8_t(q.dev.port))
		mask = C.IBV_QP_STATE | C.IBV_QP_AV | C.IBV_QP_PATH_MTU | C.IBV_QP_DEST_QPN |
			C.IBV_QP_RQ_PSN | C.IBV_QP_MAX_DEST_RD_ATOMIC | C.IBV_QP_MIN_RNR_TIMER
	case rdma.QPSRTS:
		attr.qp_state, mask = C.IBV_QPS_RTS, C.IBV_QP_STATE
		if from == rdma.QPSRTR {
			if a.Timeout > 31 || a.RetryCount > 7 || a.RNRRetry > 7 {
				return fmt.Errorf("%w: timeout %d, retry count %d, RNR retry %d (at most 31, 7, 7)", rdma.ErrInvalid, a.Timeout, a.RetryCount, a.RNRRetry)
			}
			rd := int(a.MaxRdAtomic)
			if rd == 0 {
				rd = 1
			}
			if a.SendPSN > 0xffffff {
				return fmt.Errorf("%w: PSN %#x over 24 bits", rdma.ErrInvalid, a.SendPSN)
			}
			if a.SendPSN != 0 {
				q.psn = a.SendPSN
			}
			attr.timeout = C.uint8_t(a.Timeout)
			attr.retry_cnt = C.uint8_t(a.RetryCount)
			attr.rnr_retry = C.uint8_t(a.RNRRetry)
			attr.sq_psn = C.uint32_t(q.psn)
			attr.max_rd_atomic = C.uint8_t(min(rd, q.dev.maxQPInitRdAtom))
			mask |= C.IBV_QP_TIMEOUT | C.IBV_QP_RETRY_CNT | C.IBV_QP_RNR_RETRY | C.IBV_QP_SQ_PSN | C.IBV_QP_MAX_QP_RD_ATOMIC
		}
	default:
		return fmt.Errorf("%w: unknown state %v", rdma.ErrInvalid, a.State)
	}
	if rc := C.octo_modify_qp(q.qp, &attr, mask); rc != 0 {
		return fmt.Errorf("verbs: QP %d %v to %v: %w", q.qpn, from, a.State, mapErrno(errnoErr(int(rc))))
	}
	q.state.Store(uint32(a.State))
	switch a.State {
	case rdma.QPSErr:
		q.failed.Store(true)
	case rdma.QPSReset:
		q.failed.Store(false)
	}
	return nil
}

// PostSend validates and posts wrs in batches of C work requests.
func (q *qp) PostSend(wrs []rdma.SendWR) error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrClosed}
	}
	if s := rdma.QPState(q.state.Load()); s == rdma.QPSReset || s == rdma.QPSInit || s == rdma.QPSRTR {
		return &rdma.PostError{Index: 0, Err: fmt.Errorf("%w: post send in %v", rdma.ErrBadState, s)}
	}
	for base := 0; base < len(wrs); base += postBatch {
		chunk := wrs[base:min(base+postBatch, len(wrs))]
		n, sges := 0, 0
		var bad error
		for i := range chunk {
			wr := &chunk[i]
			var op uint32
			if op, bad = q.checkSend(wr); bad != nil {
				break
			}
			w := &q.sendWRs[n]
			w.wr_id = C.uint64_t(wr.ID)
			w.remote_addr = C.uint64_t(wr.RemoteAddr)
			w.rkey = C.uint32_t(wr.RKey)
			w.compare_add = C.uint64_t(wr.CompareAdd)
			w.swap = C.uint64_t(wr.Swap)
			w.imm = C.uint32_t(wr.Imm)
			w.opcode = C.uint32_t(op)
			w.flags = C.uint32_t(sendFlags(wr.Flags))
			w.num_sge = C.uint32_t(len(wr.SGL))
			w.sge_off = C.uint32_t(sges)
			sges += fillSGEs(q.sendSGEs[sges:], wr.SGL)
			n++
		}
		if n > 0 {
			if rc := C.octo_post_send(q.qp, &q.sendWRs[0], C.int(n), &q.sendSGEs[0], q.sendScr, &q.badIdx[0]); rc != 0 {
				return postFailed("post send", base, q.badIdx[0], rc)
			}
		}
		if bad != nil {
			return &rdma.PostError{Index: base + n, Err: bad}
		}
	}
	return nil
}

// fillSGEs copies sgl into dst, C memory, and returns how many it wrote.
func fillSGEs(dst []C.struct_ibv_sge, sgl []rdma.SGE) int {
	for i, s := range sgl {
		g := &dst[i]
		g.addr, g.length, g.lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
	}
	return len(sgl)
}

// postFailed reports a batch, wrs[base:], that ibv_post_send/recv refused
// from its bad-th request on.
func postFailed(what string, base int, bad, rc C.int) error {
	return &rdma.PostError{Index: base + int(bad), Err: fmt.Errorf("verbs: %s: %w", what, mapPostErrno(syscall.Errno(rc)))}
}

// checkSend refuses what verbs leaves undefined or devices check
// differently, before the request reaches the device; it returns the
// request's ibv_wr_opcode.
func (q *qp) checkSend(wr *rdma.SendWR) (uint32, error) {
	op, ok := wrOpcode(wr.Opcode)
	if !ok {
		return 0, fmt.Errorf("%w: opcode %v", rdma.ErrInvalid, wr.Opcode)
	}
	if len(wr.SGL) > q.maxSendSGE {
		return 0, fmt.Errorf("%w: %d SGEs, the queue pair takes %d", rdma.ErrInvalid, len(wr.SGL), q.maxSendSGE)
	}
	var total uint64
	for _, s := range wr.SGL {
		total += uint64(s.Length)
	}
	if total > uint64(q.dev.caps.MaxMsgSize) {
		return 0, fmt.Errorf("%w: %d-byte message, the port's maximum is %d", rdma.ErrInvalid, total, q.dev.caps.MaxMsgSize)
	}
	if wr.Flags&rdma.SendInline != 0 {
		switch wr.Opcode {
		case rdma.OpSend, rdma.OpSendWithImm, rdma.OpWrite, rdma.OpWriteWithImm:
		default:
			return 0, fmt.Errorf("%w: inline %v", rdma.ErrInvalid, wr.Opcode)
		}
		if total > uint64(q.maxInline) {
			return 0, fmt.Errorf("%w: %d bytes inline, the queue pair takes %d", rdma.ErrInvalid, total, q.maxInline)
		}
	}
	if wr.Opcode.IsAtomic() {
		if len(wr.SGL) != 1 || total != 8 {
			return 0, fmt.Errorf("%w: atomic of %d bytes in %d SGEs, want 8 in 1", rdma.ErrInvalid, total, len(wr.SGL))
		}
		if wr.RemoteAddr%8 != 0 {
			return 0, fmt.Errorf("%w: atomic at %#x, not 8-byte aligned", rdma.ErrInvalid, wr.RemoteAddr)
		}
	}
	return op, nil
}

// PostRecv posts receive requests in batches of C work requests.
func (q *qp) PostRecv(wrs []rdma.RecvWR) error {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.closed.Load() {
		return &rdma.PostError{Index: 0, Err: rdma.ErrClosed}
	}
	if s := rdma.QPState(q.state.Load()); s == rdma.QPSReset {
		return &rdma.PostError{Index: 0, Err: fmt.Errorf("%w: post receive in %v", rdma.ErrBadState, s)}
	}
	for base := 0; base < len(wrs); base += postBatch {
		chunk := wrs[base:min(base+postBatch, len(wrs))]
		n, sges := 0, 0
		var bad error
		for i := range chunk {
			wr := &chunk[i]
			if len(wr.SGL) > q.maxRecvSGE {
				bad = fmt.Errorf("%w: %d SGEs, the queue pair takes %d", rdma.ErrInvalid, len(wr.SGL), q.maxRecvSGE)
				break
			}
			w := &q.recvWRs[n]
			w.wr_id = C.uint64_t(wr.ID)
			w.num_sge = C.uint32_t(len(wr.SGL))
			w.sge_off = C.uint32_t(sges)
			sges += fillSGEs(q.recvSGEs[sges:], wr.SGL)
			n++
		}
		if n > 0 {
			if rc := C.octo_post_recv(q.qp, &q.recvWRs[0], C.int(n), &q.recvSGEs[0], q.recvScr, &q.badIdx[1]); rc != 0 {
				return postFailed("post receive", base, q.badIdx[1], rc)
			}
		}
		if bad != nil {
			return &rdma.PostError{Index: base + n, Err: bad}
		}
	}
	if q.failed.Load() && len(wrs) > 0 {
		q.kickFlush()
	}
	return nil
}

// kickFlush makes the device flush receives posted to a queue pair in Err.
// Posting a receive is no system call on rxe, so rxe (Linux 6.1) does not
// see a receive posted in Err and never flushes it; moving the queue pair
// to Err again (legal from Err) schedules rxe's responder, which flushes
// it. Other devices flush on their own and ignore the no-op transition.
func (q *qp) kickFlush() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return
	}
	var attr C.struct_ibv_qp_attr
	attr.qp_state = C.IBV_QPS_ERR
	C.octo_modify_qp(q.qp, &attr, C.IBV_QP_STATE)
}

// Close destroys the queue pair; outstanding requests are discarded.
func (q *qp) Close() error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed.Load() {
		return rdma.ErrClosed
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return fmt.Errorf("verbs: destroy QP %d: %w", q.qpn, mapErrno(syscall.Errno(rc)))
	}
	q.closed.Store(true)
	C.free(unsafe.Pointer(&q.sendWRs[0]))
	C.free(unsafe.Pointer(&q.sendSGEs[0]))
	C.free(unsafe.Pointer(q.sendScr))
	C.free(unsafe.Pointer(&q.recvWRs[0]))
	C.free(unsafe.Pointer(&q.recvSGEs[0]))
	C.free(unsafe.Pointer(q.recvScr))
	C.free(unsafe.Pointer(&q.badIdx[0]))
	q.scq.unref()
	q.rcq.unref()
	q.dev.removeQP(q)
	q.pd.mu.Lock()
	delete(q.pd.qps, q)
	q.pd.mu.Unlock()
	return nil
}
