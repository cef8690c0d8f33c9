package rdmatest

import (
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// testPostBeforeRTS: a send cannot be posted before RTS (rdma.ErrBadState
// at once), while receives can be posted from Init on, which is how a
// server gets its buffers in place before the peer may send.
//
// Posting receives in Reset is not tested: the IB specification calls it
// an error, but providers differ and nothing relies on it.
func testPostBeforeRTS(t *testing.T, p Provider) {
	o := Options{}.withDefaults()
	na := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	nb := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	a, b := NewSide(t, na, o), NewSide(t, nb, o)
	send := []rdma.SendWR{{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 16)}}}

	ExpectPostError(t, "PostSend in RESET", a.QP.PostSend(send), 0, rdma.ErrBadState)
	for _, qp := range []rdma.QP{a.QP, b.QP} {
		if err := ToInit(qp, o.QPAccess); err != nil {
			t.Fatal(err)
		}
	}
	ExpectPostError(t, "PostSend in INIT", a.QP.PostSend(send), 0, rdma.ErrBadState)
	PostRecv(t, b.QP, rdma.RecvWR{ID: 10, SGL: []rdma.SGE{b.SGE(0, 64)}})
	if err := ToRTR(a.QP, b.QP.Endpoint(), o.Transport); err != nil {
		t.Fatal(err)
	}
	if err := ToRTR(b.QP, a.QP.Endpoint(), o.Transport); err != nil {
		t.Fatal(err)
	}
	ExpectPostError(t, "PostSend in RTR", a.QP.PostSend(send), 0, rdma.ErrBadState)
	PostRecv(t, b.QP, rdma.RecvWR{ID: 11, SGL: []rdma.SGE{b.SGE(64, 64)}})
	for _, qp := range []rdma.QP{a.QP, b.QP} {
		if err := ToRTS(qp, o.Transport); err != nil {
			t.Fatal(err)
		}
	}
	ExpectNoCompletion(t, a.SendCQ, 50*time.Millisecond, "refused posts before RTS")

	// The receives posted in INIT and RTR are there, in order.
	Fill(a.Buf[:32], 1)
	PostSend(t, a.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 16)}},
		rdma.SendWR{ID: 3, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(16, 16)}})
	wcs := WaitN(t, a.SendCQ, 2)
	CheckOK(t, "first SEND in RTS", wcs[0], 2, rdma.WCSend)
	CheckOK(t, "second SEND in RTS", wcs[1], 3, rdma.WCSend)
	r := WaitN(t, b.RecvCQ, 2)
	CheckOK(t, "receive posted in INIT", r[0], 10, rdma.WCRecv)
	CheckOK(t, "receive posted in RTR", r[1], 11, rdma.WCRecv)
	CheckBytes(t, "receive posted in INIT", b.Buf[:16], a.Buf[:16])
	CheckBytes(t, "receive posted in RTR", b.Buf[64:80], a.Buf[16:32])
}

// testPostTooManySGEs: more SGEs than the device supports are refused at
// post time with rdma.ErrInvalid. The limit tested is the device's, since
// providers may round a queue pair's own limit up (verbs does).
func testPostTooManySGEs(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	n := pr.A.Dev.Caps().MaxSGE + 1
	if n > len(pr.A.Buf)/8 {
		t.Skipf("Caps.MaxSGE %d: too many SGEs to build", n-1)
	}
	sgl := make([]rdma.SGE, n)
	for i := range sgl {
		sgl[i] = pr.A.SGE(8*i, 8)
	}
	err := pr.A.QP.PostSend([]rdma.SendWR{{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: sgl,
		RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}})
	ExpectPostError(t, "PostSend with Caps.MaxSGE+1 SGEs", err, 0, rdma.ErrInvalid)
	err = pr.A.QP.PostRecv([]rdma.RecvWR{{ID: 2, SGL: sgl}})
	ExpectPostError(t, "PostRecv with Caps.MaxSGE+1 SGEs", err, 0, rdma.ErrInvalid)
	stillWorks(t, pr, 3)
}

// testPostInlineTooLarge: inline data beyond the device's limit is refused
// at post time with rdma.ErrInvalid.
func testPostInlineTooLarge(t *testing.T, p Provider) {
	dev := p.Open(t)
	n := dev.Caps().MaxInline + 1
	size := max(64<<10, n+4096)
	pr := ConnectNodes(t, NewNode(t, dev, size, rdma.AccessAll), NewNode(t, p.Open(t), size, rdma.AccessAll), Options{})
	PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{pr.B.SGE(0, size)}})
	err := pr.A.QP.PostSend([]rdma.SendWR{{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled | rdma.SendInline, SGL: []rdma.SGE{pr.A.SGE(0, n)}}})
	ExpectPostError(t, "SEND with Caps.MaxInline+1 bytes inline", err, 0, rdma.ErrInvalid)
	err = pr.A.QP.PostSend([]rdma.SendWR{{ID: 2, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled | rdma.SendInline, SGL: []rdma.SGE{pr.A.SGE(0, n)},
		RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}})
	ExpectPostError(t, "WRITE with Caps.MaxInline+1 bytes inline", err, 0, rdma.ErrInvalid)
	stillWorks(t, pr, 3)
}

// postLimit bounds the posts of the queue-full tests: far more than the
// 16 requests asked for, so that a provider that never says full fails.
const postLimit = 2048

// testPostQueueFull: a work queue holds at least the requests it was
// created for and refuses more with rdma.ErrQueueFull; refused posts leave
// the queue pair working and every accepted request still completes.
func testPostQueueFull(t *testing.T, p Provider) {
	const depth = 16
	t.Run("Send", func(t *testing.T) {
		// Each SEND waits for a receive the peer does not have yet (RNR
		// forever), so nothing leaves the send queue while it fills.
		pr := NewPair(t, p, Options{CQDepth: 2 * postLimit, QP: rdma.QPConfig{MaxSendWR: depth, MaxRecvWR: 64}})
		posted := 0
		var err error
		for posted < postLimit {
			err = pr.A.QP.PostSend([]rdma.SendWR{{ID: uint64(posted), Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(8*posted, 8)}}})
			if err != nil {
				break
			}
			posted++
		}
		if err == nil {
			t.Fatalf("posted %d SENDs that cannot complete to a send queue of %d without rdma.ErrQueueFull", posted, depth)
		}
		ExpectPostError(t, "PostSend to a full send queue", err, 0, rdma.ErrQueueFull)
		if posted < depth {
			t.Fatalf("send queue created for %d requests was full after %d", depth, posted)
		}
		// Feed the receives; every accepted SEND then completes, in order.
		for done := 0; done < posted; {
			k := min(posted-done, 64)
			for i := range k {
				PostRecv(t, pr.B.QP, rdma.RecvWR{ID: uint64(done + i), SGL: []rdma.SGE{pr.B.SGE(8*(done+i), 8)}})
			}
			WaitN(t, pr.B.RecvCQ, k)
			done += k
		}
		wcs := WaitN(t, pr.A.SendCQ, posted)
		for i, wc := range wcs {
			CheckOK(t, "SEND accepted before the queue was full", wc, uint64(i), rdma.WCSend)
		}
	})
	t.Run("Recv", func(t *testing.T) {
		pr := NewPair(t, p, Options{CQDepth: 2 * postLimit, QP: rdma.QPConfig{MaxSendWR: 64, MaxRecvWR: depth}})
		posted := 0
		var err error
		for posted < postLimit {
			err = pr.B.QP.PostRecv([]rdma.RecvWR{{ID: uint64(posted), SGL: []rdma.SGE{pr.B.SGE(8*posted, 8)}}})
			if err != nil {
				break
			}
			posted++
		}
		if err == nil {
			t.Fatalf("posted %d receives to a receive queue of %d without rdma.ErrQueueFull", posted, depth)
		}
		ExpectPostError(t, "PostRecv to a full receive queue", err, 0, rdma.ErrQueueFull)
		if posted < depth {
			t.Fatalf("receive queue created for %d requests was full after %d", depth, posted)
		}
		Fill(pr.A.Buf[:8], 5)
		PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 8)}})
		CheckOK(t, "SEND to a full receive queue", WaitOne(t, pr.A.SendCQ), 1, rdma.WCSend)
		CheckOK(t, "first receive of a full queue", WaitOne(t, pr.B.RecvCQ), 0, rdma.WCRecv)
		// The consumed receive made room for one more.
		PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 9999, SGL: []rdma.SGE{pr.B.SGE(0, 8)}})
	})
}

// testPostAtomicLength: an atomic moves exactly 8 bytes; any other local
// length is refused at post time with rdma.ErrInvalid. (8 bytes split over
// several SGEs is not tested: rxe accepts it and scatters the result,
// other NICs take only the first SGE.)
//
// rxe's user-space library only refuses lengths below 8 itself, so the
// verbs provider has to check this one before calling ibv_post_send.
func testPostAtomicLength(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	requireAtomics(t, pr.A.Dev)
	for _, op := range []rdma.Opcode{rdma.OpAtomicFetchAndAdd, rdma.OpAtomicCmpAndSwp} {
		for _, tc := range []struct {
			name string
			sgl  []rdma.SGE
		}{
			{"NoSGE", nil},
			{"4Bytes", []rdma.SGE{pr.A.SGE(0, 4)}},
			{"16Bytes", []rdma.SGE{pr.A.SGE(0, 16)}},
		} {
			t.Run(op.String()+"/"+tc.name, func(t *testing.T) {
				err := pr.A.QP.PostSend([]rdma.SendWR{{ID: 1, Opcode: op, Flags: rdma.SendSignaled, SGL: tc.sgl,
					RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey(), CompareAdd: 1}})
				ExpectPostError(t, op.String()+" of the wrong length", err, 0, rdma.ErrInvalid)
			})
		}
	}
	stillWorks(t, pr, 2)
}

// testPostErrorIndex: PostSend and PostRecv post the requests before the
// first bad one, and only those; the PostError names the bad one.
func testPostErrorIndex(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	tooMany := make([]rdma.SGE, a.Dev.Caps().MaxSGE+1)
	for i := range tooMany {
		tooMany[i] = a.SGE(8*i, 8)
	}
	write := func(id uint64, sgl []rdma.SGE) rdma.SendWR {
		return rdma.SendWR{ID: id, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: sgl, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()}
	}
	err := a.QP.PostSend([]rdma.SendWR{write(1, []rdma.SGE{a.SGE(0, 8)}), write(2, tooMany), write(3, []rdma.SGE{a.SGE(0, 8)})})
	ExpectPostError(t, "PostSend of [good, bad, good]", err, 1, rdma.ErrInvalid)
	CheckOK(t, "the request before the bad one", WaitOne(t, a.SendCQ), 1, rdma.WCWrite)
	ExpectNoCompletion(t, a.SendCQ, 100*time.Millisecond, "requests from the bad one on were not posted")

	tooManyB := make([]rdma.SGE, len(tooMany))
	for i := range tooManyB {
		tooManyB[i] = b.SGE(8*i, 8)
	}
	err = b.QP.PostRecv([]rdma.RecvWR{{ID: 11, SGL: []rdma.SGE{b.SGE(0, 64)}}, {ID: 12, SGL: tooManyB}, {ID: 13, SGL: []rdma.SGE{b.SGE(64, 64)}}})
	ExpectPostError(t, "PostRecv of [good, bad, good]", err, 1, rdma.ErrInvalid)
	PostSend(t, a.QP, rdma.SendWR{ID: 4, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 8)}})
	CheckOK(t, "SEND into the receive before the bad one", WaitOne(t, a.SendCQ), 4, rdma.WCSend)
	CheckOK(t, "the receive before the bad one", WaitOne(t, b.RecvCQ), 11, rdma.WCRecv)
	// The receives after the bad one were not posted: the next SEND finds
	// none. With RNR forever it stays outstanding, which is all the test
	// needs to see.
	PostSend(t, a.QP, rdma.SendWR{ID: 5, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 8)}})
	ExpectNoCompletion(t, b.RecvCQ, 100*time.Millisecond, "receives from the bad one on were not posted")
}
