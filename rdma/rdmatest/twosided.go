package rdmatest

import (
	"fmt"
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// sendAndReceive posts one receive per message at B (at 4 KiB strides),
// sends the messages from A with op, and checks both sides' completions
// and the data. It returns B's receive completions.
func sendAndReceive(t *testing.T, pr *Pair, op rdma.Opcode, lengths []int, firstID uint64) []rdma.WorkCompletion {
	t.Helper()
	a, b := pr.A, pr.B
	for i := range lengths {
		PostRecv(t, b.QP, rdma.RecvWR{ID: firstID + uint64(i), SGL: []rdma.SGE{b.SGE(4096*i, 4096)}})
	}
	var wrs []rdma.SendWR
	for i, n := range lengths {
		Fill(a.Buf[4096*i:4096*i+n], byte(firstID)+byte(7*i))
		wr := rdma.SendWR{ID: firstID + uint64(i), Opcode: op, Flags: rdma.SendSignaled, Imm: 0xFACE0000 + uint32(i)}
		if n > 0 {
			wr.SGL = []rdma.SGE{a.SGE(4096*i, n)}
		}
		wrs = append(wrs, wr)
	}
	PostSend(t, a.QP, wrs...)
	for i, wc := range WaitN(t, a.SendCQ, len(lengths)) {
		CheckOK(t, op.String(), wc, firstID+uint64(i), rdma.WCSend)
		if wc.QPN != a.QP.QPN() {
			t.Errorf("send completion QPN %d, want the sender's %d", wc.QPN, a.QP.QPN())
		}
	}
	rwcs := WaitN(t, b.RecvCQ, len(lengths))
	for i, wc := range rwcs {
		// Receives are consumed in the order they were posted.
		CheckOK(t, op.String()+"'s receive", wc, firstID+uint64(i), rdma.WCRecv)
		if int(wc.ByteLen) != lengths[i] {
			t.Errorf("receive %d: ByteLen %d, want %d", wc.ID, wc.ByteLen, lengths[i])
		}
		if wc.QPN != b.QP.QPN() {
			t.Errorf("receive %d: QPN %d, want the receiver's %d", wc.ID, wc.QPN, b.QP.QPN())
		}
		if op == rdma.OpSendWithImm {
			if !wc.HasImm || wc.Imm != 0xFACE0000+uint32(i) {
				t.Errorf("receive %d: %s, want immediate %#x", wc.ID, FormatWC(wc), 0xFACE0000+uint32(i))
			}
		} else if wc.HasImm {
			t.Errorf("receive %d of a SEND without immediate: %s", wc.ID, FormatWC(wc))
		}
		CheckBytes(t, "received data", b.Buf[4096*i:4096*i+lengths[i]], a.Buf[4096*i:4096*i+lengths[i]])
	}
	return rwcs
}

// testSend: SENDs consume posted receives in order; each receive
// completion is WCRecv with the message's length and no immediate.
func testSend(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	sendAndReceive(t, pr, rdma.OpSend, []int{1, 100, 4096, 7, 0, 4000}, 10)
}

// testSendWithImm: SEND_WITH_IMM delivers its immediate value in the
// receive completion (HasImm).
func testSendWithImm(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	sendAndReceive(t, pr, rdma.OpSendWithImm, []int{8, 0, 4096, 33}, 20)
}

// testWriteWithImm: RDMA_WRITE_WITH_IMM writes the remote memory and
// consumes a receive whose completion is WCRecvWriteWithImm with the
// immediate and the write's length; the receive's own buffer is left
// alone, and a receive without SGEs is enough.
func testWriteWithImm(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	Fill(b.Buf[:256], 0x99)
	recvBefore := append([]byte(nil), b.Buf[:256]...)
	PostRecv(t, b.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{b.SGE(0, 256)}}, rdma.RecvWR{ID: 2})
	Fill(a.Buf[:3000], 0x21)
	PostSend(t, a.QP,
		rdma.SendWR{ID: 1, Opcode: rdma.OpWriteWithImm, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 300)},
			RemoteAddr: b.Addr(4096), RKey: b.MR.RKey(), Imm: 0x12345678},
		rdma.SendWR{ID: 2, Opcode: rdma.OpWriteWithImm, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(300, 2700)},
			RemoteAddr: b.Addr(8192), RKey: b.MR.RKey(), Imm: 0})
	wcs := WaitN(t, a.SendCQ, 2)
	CheckOK(t, "first WRITE_WITH_IMM", wcs[0], 1, rdma.WCWrite)
	CheckOK(t, "second WRITE_WITH_IMM", wcs[1], 2, rdma.WCWrite)
	r := WaitN(t, b.RecvCQ, 2)
	for i, want := range []struct {
		id      uint64
		imm, n  uint32
		off     int
		dataOff int
	}{{1, 0x12345678, 300, 4096, 0}, {2, 0, 2700, 8192, 300}} {
		CheckOK(t, "WRITE_WITH_IMM's receive", r[i], want.id, rdma.WCRecvWriteWithImm)
		if !r[i].HasImm || r[i].Imm != want.imm || r[i].ByteLen != want.n {
			t.Errorf("WRITE_WITH_IMM's receive: %s, want imm %#x and length %d", FormatWC(r[i]), want.imm, want.n)
		}
		CheckBytes(t, "written data", b.Buf[want.off:want.off+int(want.n)], a.Buf[want.dataOff:want.dataOff+int(want.n)])
	}
	CheckBytes(t, "the receive's own buffer", b.Buf[:256], recvBefore)
}

// testSendLongerThanRecv: a SEND longer than the receive's buffers fails
// on both sides: the receiver completes with WCLocLenErr, the requester
// with WCRemInvReqErr (the responder NAKs it as an invalid request).
func testSendLongerThanRecv(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{pr.B.SGE(0, 32), pr.B.SGE(64, 32)}})
	PostSend(t, pr.A.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 65)}})
	// rxe (Linux 6.1) completes the overflowing receive with
	// WCLocQPOpErr rather than the specification's WCLocLenErr: its
	// responder treats a SEND longer than the receive as a malformed WQE.
	CheckWCIn(t, "receive of a too long SEND", WaitOne(t, pr.B.RecvCQ), 1, rdma.WCLocLenErr, rdma.WCLocQPOpErr)
	// rxe NAKs that SEND as a remote operational error, consistently with
	// its receive-side WCLocQPOpErr; the specification has an invalid
	// request NAK.
	CheckWCIn(t, "too long SEND", WaitOne(t, pr.A.SendCQ), 2, rdma.WCRemInvReqErr, rdma.WCRemOpErr)
}

// testInline: inline data is copied at post time, so the buffer may be
// reused as soon as PostSend returns, and its lkey is not checked.
func testInline(t *testing.T, p Provider) {
	const n = 48
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	if a.Dev.Caps().MaxInline < n {
		t.Skipf("Caps.MaxInline %d < %d", a.Dev.Caps().MaxInline, n)
	}
	t.Run("SEND", func(t *testing.T) {
		PostRecv(t, b.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{b.SGE(0, 256)}})
		Fill(a.Buf[:n], 0x31)
		want := append([]byte(nil), a.Buf[:n]...)
		PostSend(t, a.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled | rdma.SendInline, SGL: []rdma.SGE{a.SGE(0, n)}})
		Fill(a.Buf[:n], 0xEE) // reuse at once
		CheckOK(t, "inline SEND", WaitOne(t, a.SendCQ), 1, rdma.WCSend)
		wc := WaitOne(t, b.RecvCQ)
		CheckOK(t, "inline SEND's receive", wc, 1, rdma.WCRecv)
		if wc.ByteLen != n {
			t.Errorf("inline SEND's receive length %d, want %d", wc.ByteLen, n)
		}
		CheckBytes(t, "inline SEND data", b.Buf[:n], want)
	})
	t.Run("WRITE", func(t *testing.T) {
		Fill(a.Buf[:n], 0x41)
		want := append([]byte(nil), a.Buf[:n]...)
		PostSend(t, a.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled | rdma.SendInline, SGL: []rdma.SGE{a.SGE(0, n)},
			RemoteAddr: b.Addr(1024), RKey: b.MR.RKey()})
		Fill(a.Buf[:n], 0xEE)
		CheckOK(t, "inline WRITE", WaitOne(t, a.SendCQ), 2, rdma.WCWrite)
		CheckBytes(t, "inline WRITE data", b.Buf[1024:1024+n], want)
	})
	t.Run("LKeyNotChecked", func(t *testing.T) {
		Fill(a.Buf[:n], 0x51)
		sge := a.SGE(0, n)
		sge.LKey = UnusedKey(a.MR, b.MR)
		PostSend(t, a.QP, rdma.SendWR{ID: 3, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled | rdma.SendInline, SGL: []rdma.SGE{sge},
			RemoteAddr: b.Addr(2048), RKey: b.MR.RKey()})
		CheckOK(t, "inline WRITE with an unknown lkey", WaitOne(t, a.SendCQ), 3, rdma.WCWrite)
		CheckBytes(t, "inline WRITE data", b.Buf[2048:2048+n], a.Buf[:n])
	})
}

// testScatterGather: a request gathers its SGEs in order and a receive or
// READ scatters into its SGEs in order, whatever their sizes.
func testScatterGather(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	if a.Dev.Caps().MaxSGE < 3 {
		t.Skipf("Caps.MaxSGE %d < 3", a.Dev.Caps().MaxSGE)
	}
	Fill(a.Buf, 0x01)
	gather := []rdma.SGE{a.SGE(10000, 10), a.SGE(100, 100), a.SGE(5000, 1000)}
	gathered := append(append(append([]byte(nil), a.Buf[10000:10010]...), a.Buf[100:200]...), a.Buf[5000:6000]...)

	t.Run("SEND", func(t *testing.T) {
		clear(b.Buf)
		PostRecv(t, b.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{b.SGE(20000, 500), b.SGE(0, 7), b.SGE(30000, 700)}})
		PostSend(t, a.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: gather})
		CheckOK(t, "gathered SEND", WaitOne(t, a.SendCQ), 1, rdma.WCSend)
		wc := WaitOne(t, b.RecvCQ)
		CheckOK(t, "scattered receive", wc, 1, rdma.WCRecv)
		if wc.ByteLen != 1110 {
			t.Errorf("scattered receive length %d, want 1110", wc.ByteLen)
		}
		got := append(append(append([]byte(nil), b.Buf[20000:20500]...), b.Buf[0:7]...), b.Buf[30000:30603]...)
		CheckBytes(t, "scattered receive", got, gathered)
		if b.Buf[30603] != 0 || b.Buf[7] != 0 {
			t.Error("the receive wrote past the message into its last SGE")
		}
	})
	t.Run("WRITE", func(t *testing.T) {
		clear(b.Buf)
		PostSend(t, a.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: gather, RemoteAddr: b.Addr(40000), RKey: b.MR.RKey()})
		CheckOK(t, "gathered WRITE", WaitOne(t, a.SendCQ), 2, rdma.WCWrite)
		CheckBytes(t, "gathered WRITE", b.Buf[40000:41110], gathered)
		if b.Buf[41110] != 0 || b.Buf[39999] != 0 {
			t.Error("the WRITE touched bytes outside its range")
		}
	})
	t.Run("READ", func(t *testing.T) {
		Fill(b.Buf, 0x80)
		clear(a.Buf)
		PostSend(t, a.QP, rdma.SendWR{ID: 3, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{a.SGE(300, 3), a.SGE(0, 200), a.SGE(60000, 907)}, RemoteAddr: b.Addr(1000), RKey: b.MR.RKey()})
		wc := WaitOne(t, a.SendCQ)
		CheckOK(t, "scattered READ", wc, 3, rdma.WCRead)
		got := append(append(append([]byte(nil), a.Buf[300:303]...), a.Buf[0:200]...), a.Buf[60000:60907]...)
		CheckBytes(t, "scattered READ", got, b.Buf[1000:2110])
	})
}

// testRNRRetrySucceeds: a SEND or WRITE_WITH_IMM that finds no receive is
// retried after the responder's RNR timer, and succeeds once a receive is
// posted within the RNR retry budget, finite or not.
func testRNRRetrySucceeds(t *testing.T, p Provider) {
	for _, tc := range []struct {
		name string
		op   rdma.Opcode
		tr   Transport
	}{
		// 7 retries is "forever".
		{"SEND/Forever", rdma.OpSend, Transport{RNRRetry: 7, MinRNRTimer: 12}},
		{"WRITE_WITH_IMM/Forever", rdma.OpWriteWithImm, Transport{RNRRetry: 7, MinRNRTimer: 12}},
		// 6 retries of 40.96 ms: about 250 ms to post a receive in.
		{"SEND/Finite", rdma.OpSend, Transport{RNRRetry: 6, MinRNRTimer: 24}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := NewPair(t, p, Options{Transport: tc.tr})
			Fill(pr.A.Buf[:64], 0x61)
			PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: tc.op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 64)},
				Imm: 77, RemoteAddr: pr.B.Addr(1024), RKey: pr.B.MR.RKey()})
			// The receive comes late: that is the scenario. Meanwhile the
			// request must not complete.
			ExpectNoCompletion(t, pr.A.SendCQ, 30*time.Millisecond, tc.op.String()+" without a receive")
			PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 2, SGL: []rdma.SGE{pr.B.SGE(0, 64)}})
			CheckOK(t, tc.op.String()+" after RNR retries", WaitOne(t, pr.A.SendCQ), 1, rdma.WCOpcodeOf(tc.op))
			want := rdma.WCRecv
			data := pr.B.Buf[:64]
			if tc.op == rdma.OpWriteWithImm {
				want, data = rdma.WCRecvWriteWithImm, pr.B.Buf[1024:1088]
			}
			CheckOK(t, "late receive", WaitOne(t, pr.B.RecvCQ), 2, want)
			CheckBytes(t, "data after RNR retries", data, pr.A.Buf[:64])
		})
	}
}

// testRNRRetryExceeded: with a finite RNRRetry and no receive ever
// posted, the request completes with WCRNRRetryExcErr.
func testRNRRetryExceeded(t *testing.T, p Provider) {
	for _, op := range []rdma.Opcode{rdma.OpSend, rdma.OpSendWithImm, rdma.OpWriteWithImm} {
		t.Run(op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{Transport: Transport{RNRRetry: 2, MinRNRTimer: 12}})
			PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 64)},
				RemoteAddr: pr.B.Addr(1024), RKey: pr.B.MR.RKey()})
			CheckWC(t, op.String()+" that never finds a receive", WaitOne(t, pr.A.SendCQ), 1, rdma.WCRNRRetryExcErr)
			ExpectState(t, "after RNR retries ran out", pr.A.QP, rdma.QPSErr)
		})
	}
}

// connectRNR connects a pair whose requester A retries RNR NAKs exactly
// retries times (0 included, which Transport cannot ask for) and whose
// responder B asks for at least timer between them.
func connectRNR(t *testing.T, p Provider, retries uint8, timer rdma.RNRTimer) *Pair {
	t.Helper()
	o := Options{}.withDefaults()
	na := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	nb := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	a, b := NewSide(t, na, o), NewSide(t, nb, o)
	tr := Transport{MinRNRTimer: timer}.withDefaults()
	for _, qp := range []rdma.QP{a.QP, b.QP} {
		if err := ToInit(qp, o.QPAccess); err != nil {
			t.Fatal(err)
		}
	}
	if err := ToRTR(a.QP, b.QP.Endpoint(), tr); err != nil {
		t.Fatal(err)
	}
	if err := ToRTR(b.QP, a.QP.Endpoint(), tr); err != nil {
		t.Fatal(err)
	}
	for _, qp := range []rdma.QP{a.QP, b.QP} {
		if err := qp.Modify(rdma.QPAttr{State: rdma.QPSRTS, Timeout: tr.Timeout, RetryCount: tr.RetryCount,
			RNRRetry: retries, MaxRdAtomic: maxRdAtomic}); err != nil {
			t.Fatal(err)
		}
	}
	return &Pair{A: a, B: b}
}

// rnrTimerLong is a responder's RNR timer long enough to measure on a
// loaded machine: 327.68 ms.
const rnrTimerLong = rdma.RNRTimer(30)

// testRNRTimerMinimum: after an RNR NAK the requester waits at least the
// responder's timer before it sends the request again, even when a
// receive is posted at once.
func testRNRTimerMinimum(t *testing.T, p Provider) {
	pr := connectRNR(t, p, 7, rnrTimerLong-1) // 245.76 ms
	timer := time.Duration((rnrTimerLong - 1).Micros()) * time.Microsecond
	start := time.Now()
	PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 64)}})
	// Time for the SEND to be refused (the scenario), then a receive.
	ExpectNoCompletion(t, pr.A.SendCQ, 50*time.Millisecond, "a SEND without a receive")
	PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 2, SGL: []rdma.SGE{pr.B.SGE(0, 64)}})
	CheckOK(t, "SEND retried after an RNR NAK", WaitOne(t, pr.A.SendCQ), 1, rdma.WCSend)
	el := time.Since(start)
	t.Logf("SEND completed %v after posting, RNR timer %v", el, timer)
	if el < timer*9/10 {
		t.Fatalf("SEND completed %v after posting: retried before the responder's RNR timer of %v", el, timer)
	}
}

// testRNRRetryCount: a requester with RNRRetry r sends a request that
// never finds a receive r+1 times: it fails at the first NAK with r = 0,
// and after about one timer with r = 1 (fewer retries fail sooner, more
// later).
func testRNRRetryCount(t *testing.T, p Provider) {
	timer := time.Duration(rnrTimerLong.Micros()) * time.Microsecond
	for _, tc := range []struct {
		retries  uint8
		min, max time.Duration
	}{
		{0, 0, timer / 2},
		{1, timer * 9 / 10, timer * 3 / 2},
	} {
		t.Run(fmt.Sprintf("Retries%d", tc.retries), func(t *testing.T) {
			pr := connectRNR(t, p, tc.retries, rnrTimerLong)
			start := time.Now()
			PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 64)}})
			CheckWC(t, "SEND that never finds a receive", WaitOne(t, pr.A.SendCQ), 1, rdma.WCRNRRetryExcErr)
			el := time.Since(start)
			t.Logf("failed after %v with %d retries of %v", el, tc.retries, timer)
			if el < tc.min || el > tc.max {
				t.Fatalf("failed after %v with RNRRetry %d and a %v timer, want between %v and %v", el, tc.retries, timer, tc.min, tc.max)
			}
		})
	}
}
