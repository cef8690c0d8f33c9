package rdmatest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// testErrorFlush: the first failed request moves its queue pair to ERR;
// every outstanding request on both queues, signaled or not, then
// completes with WCWRFlushErr in order, and so does every request posted
// later (posting in ERR is allowed).
func testErrorFlush(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	for i := range 4 {
		PostRecv(t, a.QP, rdma.RecvWR{ID: uint64(100 + i), SGL: []rdma.SGE{a.SGE(4096*i, 4096)}})
	}
	PostSend(t, a.QP,
		rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: b.Addr(0), RKey: UnusedKey(a.MR, b.MR)},
		rdma.SendWR{ID: 2, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()},
		rdma.SendWR{ID: 3, Opcode: rdma.OpWrite, SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()},
		rdma.SendWR{ID: 4, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()},
		rdma.SendWR{ID: 5, Opcode: rdma.OpSend, SGL: []rdma.SGE{a.SGE(0, 64)}},
	)
	wcs := WaitN(t, a.SendCQ, 5)
	CheckWC(t, "the failing WRITE", wcs[0], 1, rdma.WCRemAccessErr)
	for i, wc := range wcs[1:] {
		CheckWC(t, "a request behind the failed one", wc, uint64(i+2), rdma.WCWRFlushErr)
	}
	for i, wc := range WaitN(t, a.RecvCQ, 4) {
		CheckWC(t, "a receive outstanding when the QP failed", wc, uint64(100+i), rdma.WCWRFlushErr)
	}
	ExpectState(t, "after a failed request", a.QP, rdma.QPSErr)

	// Posting in ERR succeeds and completes with a flush error, signaled
	// or not.
	PostSend(t, a.QP, rdma.SendWR{ID: 6, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()},
		rdma.SendWR{ID: 7, Opcode: rdma.OpSend, SGL: []rdma.SGE{a.SGE(0, 64)}})
	later := WaitN(t, a.SendCQ, 2)
	CheckWC(t, "a send posted in ERR", later[0], 6, rdma.WCWRFlushErr)
	CheckWC(t, "an unsignaled send posted in ERR", later[1], 7, rdma.WCWRFlushErr)
	PostRecv(t, a.QP, rdma.RecvWR{ID: 200, SGL: []rdma.SGE{a.SGE(0, 64)}})
	CheckWC(t, "a receive posted in ERR", WaitOne(t, a.RecvCQ), 200, rdma.WCWRFlushErr)
	for _, wc := range append(wcs, later...) {
		if err := wc.Err(); !errors.Is(err, rdma.ErrCompletion) {
			t.Errorf("WorkCompletion%s.Err() = %v, want an error wrapping rdma.ErrCompletion", FormatWC(wc), err)
		}
	}
}

// moveTo brings s.QP from Reset to state, using peer's endpoint for RTR.
func moveTo(s *Side, peer rdma.Endpoint, state rdma.QPState) error {
	steps := map[rdma.QPState][]rdma.QPState{
		rdma.QPSReset: nil,
		rdma.QPSInit:  {rdma.QPSInit},
		rdma.QPSRTR:   {rdma.QPSInit, rdma.QPSRTR},
		rdma.QPSRTS:   {rdma.QPSInit, rdma.QPSRTR, rdma.QPSRTS},
		rdma.QPSErr:   {rdma.QPSInit, rdma.QPSErr},
	}[state]
	for _, st := range steps {
		if err := modify(s.QP, peer, st); err != nil {
			return fmt.Errorf("to %v: %w", st, err)
		}
	}
	return nil
}

// modify moves qp to state with the attributes that transition needs.
func modify(qp rdma.QP, peer rdma.Endpoint, state rdma.QPState) error {
	tr := Transport{}
	switch state {
	case rdma.QPSInit:
		return ToInit(qp, rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
	case rdma.QPSRTR:
		return ToRTR(qp, peer, tr)
	case rdma.QPSRTS:
		return ToRTS(qp, tr)
	default:
		return qp.Modify(rdma.QPAttr{State: state})
	}
}

var allStates = []rdma.QPState{rdma.QPSReset, rdma.QPSInit, rdma.QPSRTR, rdma.QPSRTS, rdma.QPSErr}

// testStateMachineLegal: Reset → Init → RTR → RTS, and from every state to
// Err and to Reset; State reports each.
func testStateMachineLegal(t *testing.T, p Provider) {
	dev := p.Open(t)
	n := NewNode(t, dev, 4096, rdma.AccessAll)
	peer := NewSide(t, n, Options{}).QP.Endpoint()
	t.Run("Forward", func(t *testing.T) {
		s := NewSide(t, n, Options{})
		ExpectState(t, "a new queue pair", s.QP, rdma.QPSReset)
		for _, st := range []rdma.QPState{rdma.QPSInit, rdma.QPSRTR, rdma.QPSRTS} {
			if err := modify(s.QP, peer, st); err != nil {
				t.Fatalf("Modify to %v: %v", st, err)
			}
			ExpectState(t, "after Modify", s.QP, st)
		}
	})
	for _, from := range allStates {
		for _, to := range []rdma.QPState{rdma.QPSErr, rdma.QPSReset} {
			t.Run(fmt.Sprintf("%vTo%v", from, to), func(t *testing.T) {
				s := NewSide(t, n, Options{})
				if err := moveTo(s, peer, from); err != nil {
					t.Fatal(err)
				}
				if err := modify(s.QP, peer, to); err != nil {
					t.Fatalf("Modify %v → %v = %v, want nil", from, to, err)
				}
				ExpectState(t, fmt.Sprintf("after %v → %v", from, to), s.QP, to)
			})
		}
	}
}

// testStateMachineIllegal: transitions the IB state machine does not have
// fail with rdma.ErrBadState and leave the state alone.
func testStateMachineIllegal(t *testing.T, p Provider) {
	dev := p.Open(t)
	n := NewNode(t, dev, 4096, rdma.AccessAll)
	peer := NewSide(t, n, Options{}).QP.Endpoint()
	for _, tc := range []struct{ from, to rdma.QPState }{
		{rdma.QPSReset, rdma.QPSRTR},
		{rdma.QPSReset, rdma.QPSRTS},
		{rdma.QPSInit, rdma.QPSRTS},
		{rdma.QPSRTR, rdma.QPSInit},
		{rdma.QPSRTS, rdma.QPSInit},
		{rdma.QPSRTS, rdma.QPSRTR},
		{rdma.QPSErr, rdma.QPSInit},
		{rdma.QPSErr, rdma.QPSRTR},
		{rdma.QPSErr, rdma.QPSRTS},
	} {
		t.Run(fmt.Sprintf("%vTo%v", tc.from, tc.to), func(t *testing.T) {
			s := NewSide(t, n, Options{})
			if err := moveTo(s, peer, tc.from); err != nil {
				t.Fatal(err)
			}
			if err := modify(s.QP, peer, tc.to); !errors.Is(err, rdma.ErrBadState) {
				t.Fatalf("Modify %v → %v = %v, want rdma.ErrBadState", tc.from, tc.to, err)
			}
			ExpectState(t, "after a refused transition", s.QP, tc.from)
		})
	}
}

// testStateMachineResetReconnect: moving to Reset drops outstanding work
// without completions, and a reset queue pair can be connected again.
func testStateMachineResetReconnect(t *testing.T, p Provider) {
	o := Options{}.withDefaults()
	pr := NewPair(t, p, o)
	a, b := pr.A, pr.B
	sendOnce := func(id uint64) {
		t.Helper()
		PostRecv(t, b.QP, rdma.RecvWR{ID: id, SGL: []rdma.SGE{b.SGE(0, 64)}})
		Fill(a.Buf[:64], byte(id))
		PostSend(t, a.QP, rdma.SendWR{ID: id, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}})
		CheckOK(t, "SEND", WaitOne(t, a.SendCQ), id, rdma.WCSend)
		CheckOK(t, "receive", WaitOne(t, b.RecvCQ), id, rdma.WCRecv)
		CheckBytes(t, "received data", b.Buf[:64], a.Buf[:64])
	}
	sendOnce(1)

	PostRecv(t, b.QP, rdma.RecvWR{ID: 50, SGL: []rdma.SGE{b.SGE(0, 64)}})
	for _, qp := range []rdma.QP{a.QP, b.QP} {
		if err := qp.Modify(rdma.QPAttr{State: rdma.QPSReset}); err != nil {
			t.Fatalf("Modify RTS → RESET: %v", err)
		}
	}
	ExpectNoCompletion(t, b.RecvCQ, 100*time.Millisecond, "a receive outstanding when its QP was reset")

	Connect(t, a.QP, b.QP, o.QPAccess, o.Transport)
	sendOnce(2)
	sendOnce(3)
}
