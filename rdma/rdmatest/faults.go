package rdmatest

import (
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// requireFaults returns dev's fault injector or skips t.
func requireFaults(t *testing.T, dev rdma.Device) rdma.Faults {
	t.Helper()
	f, ok := dev.(rdma.Faults)
	if !ok {
		t.Skipf("provider %q (device %s, %T) does not implement rdma.Faults: no fault injection to test", dev.Provider(), dev.Name(), dev)
	}
	return f
}

// testFaultsDropConnections: severing a device's connections fails the
// work outstanding on them with an error (not a flush: it is the request
// that met the failure) and later posts flush, from whichever side the
// link is dropped.
func testFaultsDropConnections(t *testing.T, p Provider) {
	for _, side := range []string{"Requester", "Responder"} {
		t.Run(side, func(t *testing.T) {
			pr := NewPair(t, p, Options{Transport: fastFail})
			a, b := pr.A, pr.B
			dev := a.Dev
			if side == "Responder" {
				dev = b.Dev
			}
			f := requireFaults(t, dev)
			PostSend(t, a.QP,
				rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}},
				rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(64, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()})
			ExpectNoCompletion(t, a.SendCQ, 50*time.Millisecond, "a SEND waiting for a receive (RNR retry forever)")
			start := time.Now()
			f.DropConnections()
			expectPeerGone(t, a, start, []uint64{1, 2},
				rdma.WCRetryExcErr, rdma.WCRemOpErr, rdma.WCGeneralErr, rdma.WCRemAccessErr, rdma.WCRemInvReqErr, rdma.WCBadRespErr, rdma.WCLocQPOpErr)
		})
	}
}

// testFaultsFailKey: a failed key is refused as if it named no region
// (WCRemAccessErr), other keys keep working, and FailKey(0) restores it.
func testFaultsFailKey(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	f := requireFaults(t, pr.B.Dev)
	t.Cleanup(func() { f.FailKey(0) })
	other := RegBuffer(t, pr.B.PD, 4096, rdma.AccessAll)

	expectRemoteOK(t, pr, rdma.OpWrite, 1, 64, pr.B.Addr(0), pr.B.MR.RKey())
	f.FailKey(pr.B.MR.RKey())
	expectRemoteOK(t, pr, rdma.OpWrite, 2, 64, other.Addr(), other.RKey())
	Fill(pr.B.Buf, 0x5A)
	expectRemoteAccessErr(t, pr, rdma.OpWrite, 3, 64, pr.B.Addr(0), pr.B.MR.RKey(), pr.B.Buf)

	// The failed QP is in ERR; a new connection between the same devices
	// meets the same refusal, for READ too.
	pr2 := ConnectNodes(t, pr.A.Node, pr.B.Node, Options{})
	expectRemoteAccessErr(t, pr2, rdma.OpRead, 4, 64, pr.B.Addr(0), pr.B.MR.RKey(), pr.B.Buf)

	f.FailKey(0)
	pr3 := ConnectNodes(t, pr.A.Node, pr.B.Node, Options{})
	expectRemoteOK(t, pr3, rdma.OpWrite, 5, 64, pr.B.Addr(0), pr.B.MR.RKey())
	expectRemoteOK(t, pr3, rdma.OpRead, 6, 64, pr.B.Addr(0), pr.B.MR.RKey())
}

// testFaultsSetDelay: with a delay set on the responder's device, no
// operation that needs its response completes sooner than the delay; the
// QP's ACK timeout is set well above it so that the delay is not a loss.
func testFaultsSetDelay(t *testing.T, p Provider) {
	const delay = 150 * time.Millisecond
	pr := NewPair(t, p, Options{Transport: Transport{Timeout: 18}}) // ~1.07 s
	a, b := pr.A, pr.B
	f := requireFaults(t, b.Dev)
	t.Cleanup(func() { f.SetDelay(0) })
	f.SetDelay(delay)
	for i, op := range []rdma.Opcode{rdma.OpRead, rdma.OpWrite, rdma.OpSend, rdma.OpAtomicFetchAndAdd} {
		t.Run(op.String(), func(t *testing.T) {
			skipUnlessAtomics(t, op, b.Dev)
			id := uint64(i + 1)
			if op.ConsumesRecv() {
				PostRecv(t, b.QP, rdma.RecvWR{ID: id, SGL: []rdma.SGE{b.SGE(0, 64)}})
			}
			start := time.Now()
			PostSend(t, a.QP, remoteWR(op, id, a.Node, 0, 8, b.Addr(64), b.MR.RKey()))
			wc := WaitOne(t, a.SendCQ)
			el := time.Since(start)
			CheckOK(t, op.String()+" to a delayed responder", wc, id, rdma.WCOpcodeOf(op))
			if el < delay {
				t.Fatalf("%v completed %v after posting with the responder's responses delayed by %v", op, el, delay)
			}
		})
	}
	f.SetDelay(0)
	PostSend(t, a.QP, remoteWR(rdma.OpRead, 10, a.Node, 0, 8, b.Addr(64), b.MR.RKey()))
	CheckOK(t, "READ after SetDelay(0)", WaitOne(t, a.SendCQ), 10, rdma.WCRead)
}
