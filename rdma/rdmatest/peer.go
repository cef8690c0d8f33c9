package rdmatest

import (
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// fastFail is the transport of the tests where a peer goes away: about
// 67 ms per ACK timeout and two retries, a budget of ~200 ms.
var fastFail = Transport{Timeout: 14, RetryCount: 2, RNRRetry: 7}

// failLimit is how long a requester may take to report a vanished peer:
// generous over the QP's budget because timers on a shared machine run
// late, but a provider that ignores the budget (or hangs) fails.
func failLimit(tr Transport) time.Duration {
	return min(10*tr.Budget()+time.Second, DefaultWaitTimeout)
}

// expectPeerGone checks what a requester reports when its peer is gone:
// the first request fails with one of first, later ones flush, within
// failLimit of start, and the queue pair ends in ERR.
func expectPeerGone(t *testing.T, a *Side, start time.Time, ids []uint64, first ...rdma.WCStatus) {
	t.Helper()
	wcs := WaitNTimeout(t, a.SendCQ, len(ids), failLimit(fastFail))
	el := time.Since(start)
	CheckWCIn(t, "first request to a vanished peer", wcs[0], ids[0], first...)
	for i, wc := range wcs[1:] {
		CheckWC(t, "request behind it", wc, ids[i+1], rdma.WCWRFlushErr)
	}
	t.Logf("requester reported %v after %v (transport budget %v)", wcs[0].Status, el, fastFail.Budget())
	ExpectState(t, "requester whose peer vanished", a.QP, rdma.QPSErr)
	// Later posts flush.
	PostSend(t, a.QP, rdma.SendWR{ID: 99, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 8)}, RemoteAddr: a.Addr(0), RKey: a.MR.RKey()})
	CheckWC(t, "request posted after the peer vanished", WaitOne(t, a.SendCQ), 99, rdma.WCWRFlushErr)
}

// peerDeath runs the two scenarios of a vanishing responder, killed by
// kill: with work outstanding at the time (a SEND stuck in RNR waits and a
// READ behind it), and with work posted afterwards. Either way the
// requester hears nothing more, so IB has it complete the first request
// with WCRetryExcErr once its retries run out, and flush the rest. A
// provider that learns of the death sooner (a closed TCP connection) must
// still report it as the same status: the layers above treat it as a
// transport failure, whatever the transport.
func peerDeath(t *testing.T, p Provider, kill func(t *testing.T, pr *Pair)) {
	t.Run("Outstanding", func(t *testing.T) {
		pr := NewPair(t, p, Options{Transport: fastFail})
		a, b := pr.A, pr.B
		PostSend(t, a.QP,
			rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}},
			rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(64, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()})
		ExpectNoCompletion(t, a.SendCQ, 50*time.Millisecond, "a SEND waiting for a receive (RNR retry forever)")
		start := time.Now()
		kill(t, pr)
		expectPeerGone(t, a, start, []uint64{1, 2}, rdma.WCRetryExcErr)
	})
	t.Run("PostedAfter", func(t *testing.T) {
		pr := NewPair(t, p, Options{Transport: fastFail})
		a, b := pr.A, pr.B
		kill(t, pr)
		start := time.Now()
		PostSend(t, a.QP,
			rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()},
			rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(64, 64)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()})
		expectPeerGone(t, a, start, []uint64{1, 2}, rdma.WCRetryExcErr)
	})
}

// testPeerDeathCloseQP: the responder's queue pair is destroyed.
func testPeerDeathCloseQP(t *testing.T, p Provider) {
	peerDeath(t, p, func(t *testing.T, pr *Pair) {
		if err := pr.B.QP.Close(); err != nil {
			t.Fatalf("QP.Close: %v", err)
		}
	})
}

// testPeerDeathCloseDevice: the responder's whole device is closed, as
// when its process exits.
func testPeerDeathCloseDevice(t *testing.T, p Provider) {
	peerDeath(t, p, func(t *testing.T, pr *Pair) {
		if err := pr.B.Dev.Close(); err != nil {
			t.Fatalf("Device.Close: %v", err)
		}
	})
}
