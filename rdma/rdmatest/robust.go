package rdmatest

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// The tests of this file hold providers to what a stalled, silent or
// vanishing peer, or an application that deregisters memory or gives up
// waiting at a bad moment, must not break (issue 9).

// testErrorStateResponderFlush: a responder queue pair that fails moves
// to ERR and flushes every receive still posted, in order, after the one
// that failed.
func testErrorStateResponderFlush(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	for i := range 4 {
		PostRecv(t, b.QP, rdma.RecvWR{ID: uint64(10 + i), SGL: []rdma.SGE{b.SGE(64*i, 32)}})
	}
	// Longer than the receive: the receive fails, and with it B.
	PostSend(t, a.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}})
	CheckWCIn(t, "SEND longer than the receive", WaitOne(t, a.SendCQ), 1, rdma.WCRemInvReqErr, rdma.WCRemOpErr)
	wcs := WaitN(t, b.RecvCQ, 4)
	CheckWCIn(t, "the receive too short for the SEND", wcs[0], 10, rdma.WCLocLenErr, rdma.WCLocQPOpErr)
	for i, wc := range wcs[1:] {
		CheckWC(t, "a receive posted behind it", wc, uint64(11+i), rdma.WCWRFlushErr)
	}
	ExpectState(t, "responder after a failed receive", b.QP, rdma.QPSErr)
	ExpectNoCompletion(t, b.RecvCQ, 50*time.Millisecond, "receives already flushed")
}

// testReceiveAccounting: every posted receive completes exactly once,
// whatever happens to the link: the ones SENDs filled succeed, in order,
// and once the peer is gone and the queue pair in ERR the rest flush.
// (A responder on a NIC need not notice that its peer vanished until it
// sends; the test moves it to ERR itself, which is where the accounting
// must still add up.)
func testReceiveAccounting(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{Transport: fastFail})
	a, b := pr.A, pr.B
	const posted, sent = 8, 3
	for i := range posted {
		PostRecv(t, b.QP, rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{b.SGE(64*i, 64)}})
	}
	for i := range sent {
		PostSend(t, a.QP, rdma.SendWR{ID: uint64(i), Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 16)}})
	}
	WaitN(t, a.SendCQ, sent)
	if err := a.Dev.Close(); err != nil {
		t.Fatalf("closing the sender's device: %v", err)
	}
	if err := b.QP.Modify(rdma.QPAttr{State: rdma.QPSErr}); err != nil {
		t.Fatalf("Modify to ERR: %v", err)
	}
	wcs := WaitN(t, b.RecvCQ, posted)
	for i, wc := range wcs {
		want := rdma.WCWRFlushErr
		if i < sent {
			want = rdma.WCSuccess
		}
		CheckWC(t, "receive", wc, uint64(i), want)
	}
	ExpectNoCompletion(t, b.RecvCQ, 100*time.Millisecond, "receives that all completed once")
}

// testDeregInFlight: Dereg of a region while a peer's large READ or
// WRITE of it is in flight returns promptly; each operation completes
// either successfully (the provider let it finish first, as rxe does) or
// with a remote access error, the requester then in ERR; and once Dereg
// has returned the memory is never written through the region again.
func testDeregInFlight(t *testing.T, p Provider) {
	const size = 8 << 20
	for _, op := range []rdma.Opcode{rdma.OpRead, rdma.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			dev := p.Open(t)
			if dev.Caps().MaxMsgSize < size/4 {
				t.Skipf("Caps.MaxMsgSize %d", dev.Caps().MaxMsgSize)
			}
			pr := ConnectNodes(t, NewNode(t, dev, size, rdma.AccessAll), NewNode(t, p.Open(t), 64<<10, rdma.AccessAll), Options{})
			a, b := pr.A, pr.B
			target := RegBuffer(t, b.PD, size, rdma.AccessAll)
			mem := target.Bytes()
			Fill(mem, 0x3c)
			Fill(a.Buf, 0x5a)
			var wrs []rdma.SendWR
			for i := range 4 {
				wrs = append(wrs, rdma.SendWR{ID: uint64(i), Opcode: op, Flags: rdma.SendSignaled,
					SGL: []rdma.SGE{a.SGE(i*size/4, size/4)}, RemoteAddr: target.Addr() + uint64(i*size/4), RKey: target.RKey()})
			}
			PostSend(t, a.QP, wrs...)
			start := time.Now()
			if err := target.Dereg(); err != nil {
				t.Fatalf("Dereg: %v", err)
			}
			took := time.Since(start)
			snapshot := bytes.Clone(mem)
			wcs := WaitN(t, a.SendCQ, len(wrs))
			failed := false
			for i, wc := range wcs {
				if failed {
					CheckWCIn(t, "behind a failed one", wc, uint64(i), rdma.WCWRFlushErr, rdma.WCRemAccessErr)
					continue
				}
				CheckWCIn(t, op.String()+" of a region deregistered meanwhile", wc, uint64(i), rdma.WCSuccess, rdma.WCRemAccessErr)
				failed = wc.Status != rdma.WCSuccess
			}
			if failed {
				ExpectState(t, "requester whose operation met a deregistered region", a.QP, rdma.QPSErr)
			}
			if !bytes.Equal(mem, snapshot) {
				t.Fatal("the region's memory changed after Dereg returned")
			}
			t.Logf("Dereg took %v; completions %s", took, FormatWCs(wcs))
			if took > DefaultWaitTimeout/2 {
				t.Fatalf("Dereg took %v with operations in flight", took)
			}
		})
	}
}

// testSilentPeer: a peer whose link stays up but which answers nothing
// (its responses held back by rdma.Faults.SetDelay, far beyond the
// transport budget) makes the request fail with WCRetryExcErr once the
// budget is spent: not at once, and not never.
func testSilentPeer(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{Transport: fastFail})
	a, b := pr.A, pr.B
	f := requireFaults(t, b.Dev)
	PostSend(t, a.QP, remoteWR(rdma.OpRead, 1, a.Node, 0, 8, b.Addr(0), b.MR.RKey()))
	CheckOK(t, "READ before the peer falls silent", WaitOne(t, a.SendCQ), 1, rdma.WCRead)
	f.SetDelay(time.Hour)
	t.Cleanup(func() { f.SetDelay(0) })
	start := time.Now()
	PostSend(t, a.QP, remoteWR(rdma.OpRead, 2, a.Node, 0, 8, b.Addr(0), b.MR.RKey()),
		remoteWR(rdma.OpWrite, 3, a.Node, 0, 8, b.Addr(64), b.MR.RKey()))
	wcs := WaitNTimeout(t, a.SendCQ, 2, failLimit(fastFail))
	el := time.Since(start)
	CheckWC(t, "READ to a silent peer", wcs[0], 2, rdma.WCRetryExcErr)
	CheckWC(t, "request behind it", wcs[1], 3, rdma.WCWRFlushErr)
	if budget := fastFail.Budget(); el < budget/2 {
		t.Fatalf("a silent peer was given up on after %v, before half the transport budget %v", el, budget)
	}
	t.Logf("gave up after %v (budget %v)", el, fastFail.Budget())
	ExpectState(t, "requester of a silent peer", a.QP, rdma.QPSErr)
}

// testCQWaitPartialResponse: a Wait whose context ends while a large
// response is arriving returns on time, and the request completes, with
// its data, afterwards.
func testCQWaitPartialResponse(t *testing.T, p Provider) {
	dev := p.Open(t)
	size := min(16<<20, int(dev.Caps().MaxMsgSize)) // rxe: 8 MiB
	if size < 1<<20 {
		t.Skipf("Caps.MaxMsgSize %d", dev.Caps().MaxMsgSize)
	}
	pr := ConnectNodes(t, NewNode(t, dev, size, rdma.AccessAll), NewNode(t, p.Open(t), size, rdma.AccessAll), Options{})
	a, b := pr.A, pr.B
	Fill(b.Buf, 0x17)
	var wc [1]rdma.WorkCompletion
	for round := range 3 {
		clear(a.Buf)
		PostSend(t, a.QP, remoteWR(rdma.OpRead, uint64(round), a.Node, 0, size, b.Addr(0), b.MR.RKey()))
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		start := time.Now()
		n, err := a.SendCQ.Wait(ctx, wc[:])
		cancel()
		el := time.Since(start)
		if n == 1 {
			t.Logf("round %d: the %d-byte READ completed within 1 ms", round, size)
			CheckOK(t, "READ", wc[0], uint64(round), rdma.WCRead)
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = (%d, %v), want context.DeadlineExceeded", n, err)
		}
		if el > time.Second {
			t.Fatalf("Wait with a 1 ms context returned after %v, a response arriving meanwhile", el)
		}
		CheckOK(t, "READ after an expired Wait", WaitOne(t, a.SendCQ), uint64(round), rdma.WCRead)
		CheckBytes(t, "READ data", a.Buf, b.Buf)
	}
}

// testLoopback: two queue pairs of one device and protection domain
// reach each other: SEND, WRITE, READ and atomics.
func testLoopback(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{SameDevice: true})
	a, b := pr.A, pr.B
	Fill(a.Buf[:64], 0x21)
	PostRecv(t, b.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{b.SGE(1024, 64)}})
	PostSend(t, a.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 64)}})
	CheckOK(t, "loopback SEND", WaitOne(t, a.SendCQ), 1, rdma.WCSend)
	CheckOK(t, "loopback receive", WaitOne(t, b.RecvCQ), 1, rdma.WCRecv)
	CheckBytes(t, "loopback SEND data", b.Buf[1024:1088], a.Buf[:64])
	PostSend(t, a.QP, remoteWR(rdma.OpWrite, 2, a.Node, 0, 64, b.Addr(4096), b.MR.RKey()))
	CheckOK(t, "loopback WRITE", WaitOne(t, a.SendCQ), 2, rdma.WCWrite)
	CheckBytes(t, "loopback WRITE data", b.Buf[4096:4160], a.Buf[:64])
	PostSend(t, b.QP, remoteWR(rdma.OpRead, 3, b.Node, 8192, 64, a.Addr(0), a.MR.RKey()))
	CheckOK(t, "loopback READ", WaitOne(t, b.SendCQ), 3, rdma.WCRead)
	CheckBytes(t, "loopback READ data", b.Buf[8192:8256], a.Buf[:64])
	if a.Dev.Caps().Atomics {
		putWord(b.Buf, 16384, 40)
		PostSend(t, a.QP, atomicWR(rdma.OpAtomicFetchAndAdd, 4, a.SGE(128, 8), b.Addr(16384), b.MR.RKey(), 2, 0))
		CheckOK(t, "loopback FETCH_AND_ADD", WaitOne(t, a.SendCQ), 4, rdma.WCFetchAdd)
		if old, now := word(a.Buf, 128), word(b.Buf, 16384); old != 40 || now != 42 {
			t.Fatalf("loopback FETCH_AND_ADD: old %d, now %d; want 40 and 42", old, now)
		}
	}
}
