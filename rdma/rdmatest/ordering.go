package rdmatest

import (
	"testing"

	"github.com/octofs/octofs/rdma"
)

// testOrderingWritesThenSend: WRITEs followed by a SEND on one queue pair
// are placed before the SEND's receive completes, so a receiver that sees
// the message sees the data (the pattern of every RDMA RPC that writes a
// payload and then notifies).
func testOrderingWritesThenSend(t *testing.T, p Provider) {
	const chunk = 256 << 10
	pr := NewPair(t, p, Options{BufSize: 4*chunk + 4096})
	a, b := pr.A, pr.B
	for round := range 4 {
		clear(b.Buf[:3*chunk])
		Fill(a.Buf[:3*chunk], byte(round*3+1))
		PostRecv(t, b.QP, rdma.RecvWR{ID: uint64(round), SGL: []rdma.SGE{b.SGE(4*chunk, 64)}})
		var wrs []rdma.SendWR
		for i := range 3 {
			wrs = append(wrs, rdma.SendWR{ID: uint64(10 + i), Opcode: rdma.OpWrite, SGL: []rdma.SGE{a.SGE(i*chunk, chunk)},
				RemoteAddr: b.Addr(i * chunk), RKey: b.MR.RKey()})
		}
		wrs = append(wrs, rdma.SendWR{ID: 20, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, 8)}})
		PostSend(t, a.QP, wrs...)
		CheckOK(t, "notifying SEND's receive", WaitOne(t, b.RecvCQ), uint64(round), rdma.WCRecv)
		CheckBytes(t, "WRITE data when the following SEND's receive completed", b.Buf[:3*chunk], a.Buf[:3*chunk])
		CheckOK(t, "notifying SEND", WaitOne(t, a.SendCQ), 20, rdma.WCSend)
	}
}

// testOrderingWriteThenRead: a READ after a WRITE to the same location on
// one queue pair returns the written data: the responder executes
// requests in order, and a READ may not pass an earlier WRITE.
func testOrderingWriteThenRead(t *testing.T, p Provider) {
	const n = 64 << 10
	pr := NewPair(t, p, Options{BufSize: 4 * n})
	a, b := pr.A, pr.B
	for round := range 5 {
		Fill(a.Buf[:n], byte(round*7+3))
		clear(a.Buf[n : 2*n])
		PostSend(t, a.QP,
			rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, SGL: []rdma.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr(n), RKey: b.MR.RKey()},
			rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(n, n)}, RemoteAddr: b.Addr(n), RKey: b.MR.RKey()})
		CheckOK(t, "READ after WRITE", WaitOne(t, a.SendCQ), 2, rdma.WCRead)
		CheckBytes(t, "READ after a WRITE of the same location", a.Buf[n:2*n], a.Buf[:n])
	}
}

// testOrderingFenceReadThenWrite: a WRITE posted with SendFence behind a
// READ of the same location waits for the READ, so the READ returns the
// old data. (Without the fence IB lets the WRITE overtake the READ's data
// transfer, so the old data is only guaranteed with it.)
func testOrderingFenceReadThenWrite(t *testing.T, p Provider) {
	const n = 256 << 10
	pr := NewPair(t, p, Options{BufSize: 3 * n})
	a, b := pr.A, pr.B
	for round := range 5 {
		Fill(b.Buf[:n], byte(round*11+5))
		old := append([]byte(nil), b.Buf[:n]...)
		Fill(a.Buf[n:2*n], byte(round*11+6))
		clear(a.Buf[:n])
		PostSend(t, a.QP,
			rdma.SendWR{ID: 1, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{a.SGE(0, n)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()},
			rdma.SendWR{ID: 2, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled | rdma.SendFence, SGL: []rdma.SGE{a.SGE(n, n)}, RemoteAddr: b.Addr(0), RKey: b.MR.RKey()})
		wcs := WaitN(t, a.SendCQ, 2)
		CheckOK(t, "READ", wcs[0], 1, rdma.WCRead)
		CheckOK(t, "fenced WRITE", wcs[1], 2, rdma.WCWrite)
		CheckBytes(t, "READ followed by a fenced WRITE of the same location", a.Buf[:n], old)
		CheckBytes(t, "memory after the fenced WRITE", b.Buf[:n], a.Buf[n:2*n])
	}
}

// testOrderingFenceAtomicThenRead: a READ fenced behind an atomic of the
// same word sees the atomic's result.
func testOrderingFenceAtomicThenRead(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	requireAtomics(t, pr.A.Dev)
	a, b := pr.A, pr.B
	for round := range 5 {
		start := uint64(round) * 1000
		putWord(b.Buf, 64, start)
		putWord(a.Buf, 8, 0)
		PostSend(t, a.QP,
			atomicWR(rdma.OpAtomicFetchAndAdd, 1, a.SGE(0, 8), b.Addr(64), b.MR.RKey(), 3, 0),
			rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled | rdma.SendFence, SGL: []rdma.SGE{a.SGE(8, 8)}, RemoteAddr: b.Addr(64), RKey: b.MR.RKey()})
		wcs := WaitN(t, a.SendCQ, 2)
		CheckOK(t, "FETCH_AND_ADD", wcs[0], 1, rdma.WCFetchAdd)
		CheckOK(t, "fenced READ", wcs[1], 2, rdma.WCRead)
		if old, read := word(a.Buf, 0), word(a.Buf, 8); old != start || read != start+3 {
			t.Fatalf("FETCH_AND_ADD(%d + 3) returned %d and the fenced READ behind it saw %d; want %d and %d", start, old, read, start, start+3)
		}
	}
}

// testPSNWrap: sequence numbers are 24 bits and wrap: with both sides
// starting just below 2^24 (QPAttr.SendPSN), SENDs, WRITEs and READs
// each way go on across the wrap, in order.
func testPSNWrap(t *testing.T, p Provider) {
	o := Options{}.withDefaults()
	na := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	nb := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	a, b := NewSide(t, na, o), NewSide(t, nb, o)
	tr := o.Transport
	for _, qp := range []rdma.QP{a.QP, b.QP} {
		if err := ToInit(qp, o.QPAccess); err != nil {
			t.Fatal(err)
		}
	}
	epA, epB := a.QP.Endpoint(), b.QP.Endpoint()
	epA.PSN, epB.PSN = 0xffffff-20, 0xffffff-3
	if err := ToRTR(a.QP, epB, tr); err != nil {
		t.Fatal(err)
	}
	if err := ToRTR(b.QP, epA, tr); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		qp  rdma.QP
		psn uint32
	}{{a.QP, epA.PSN}, {b.QP, epB.PSN}} {
		if err := s.qp.Modify(rdma.QPAttr{State: rdma.QPSRTS, Timeout: tr.Timeout, RetryCount: tr.RetryCount,
			RNRRetry: tr.RNRRetry, MaxRdAtomic: maxRdAtomic, SendPSN: s.psn}); err != nil {
			t.Fatalf("Modify to RTS with SendPSN %#x: %v", s.psn, err)
		}
	}
	for round := range 16 {
		for _, dir := range []struct{ from, to *Side }{{a, b}, {b, a}} {
			seed := byte(round*2 + 1)
			Fill(dir.from.Buf[:256], seed)
			PostRecv(t, dir.to.QP, rdma.RecvWR{ID: uint64(round), SGL: []rdma.SGE{dir.to.SGE(1024, 64)}})
			PostSend(t, dir.from.QP,
				rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{dir.from.SGE(0, 64)}, RemoteAddr: dir.to.Addr(2048), RKey: dir.to.MR.RKey()},
				rdma.SendWR{ID: 2, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{dir.from.SGE(64, 64)}},
				rdma.SendWR{ID: 3, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: []rdma.SGE{dir.from.SGE(4096, 64)}, RemoteAddr: dir.to.Addr(2048), RKey: dir.to.MR.RKey()})
			wcs := WaitN(t, dir.from.SendCQ, 3)
			CheckOK(t, "WRITE across the PSN wrap", wcs[0], 1, rdma.WCWrite)
			CheckOK(t, "SEND across the PSN wrap", wcs[1], 2, rdma.WCSend)
			CheckOK(t, "READ across the PSN wrap", wcs[2], 3, rdma.WCRead)
			CheckOK(t, "receive across the PSN wrap", WaitOne(t, dir.to.RecvCQ), uint64(round), rdma.WCRecv)
			CheckBytes(t, "SEND data", dir.to.Buf[1024:1088], dir.from.Buf[64:128])
			CheckBytes(t, "READ of the WRITE", dir.from.Buf[4096:4160], dir.from.Buf[:64])
		}
	}
}
