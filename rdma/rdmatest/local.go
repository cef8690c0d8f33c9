package rdmatest

import (
	"testing"

	"github.com/octofs/octofs/rdma"
)

// testLocalErrorsSend: a request whose own SGEs name no region of the queue
// pair's protection domain, reach outside it, or lack LOCAL_WRITE where the
// request writes locally completes with WCLocProtErr. These are found when
// the request executes, not when it is posted: verbs does not check lkeys
// in ibv_post_send (only inline data skips the check, see TwoSided/Inline).
func testLocalErrorsSend(t *testing.T, p Provider) {
	const size = 64 << 10
	for _, tc := range []struct {
		name string
		// wr builds the failing request from pr.A towards pr.B; for a
		// READ or an atomic it also returns the local memory its SGEs
		// name, which must not change.
		wr      func(t *testing.T, pr *Pair) (rdma.SendWR, []byte)
		atomics bool
	}{
		{"SEND/UnknownLKey", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpSend, SGL: []rdma.SGE{{Addr: pr.A.Addr(0), Length: 64, LKey: UnusedKey(pr.A.MR, pr.B.MR)}}}, nil
		}, false},
		{"SEND/SGEBeyondMR", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpSend, SGL: []rdma.SGE{pr.A.SGE(size-32, 64)}}, nil
		}, false},
		{"SEND/SGEBeforeMR", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpSend, SGL: []rdma.SGE{{Addr: pr.A.Addr(0) - 16, Length: 32, LKey: pr.A.MR.LKey()}}}, nil
		}, false},
		{"SEND/OtherPDLKey", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			other, err := pr.A.Dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })
			mr := RegBuffer(t, other, 4096, rdma.AccessLocalWrite)
			return rdma.SendWR{Opcode: rdma.OpSend, SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}}}, nil
		}, false},
		{"SEND/SecondSGEBad", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpSend, SGL: []rdma.SGE{pr.A.SGE(0, 32), {Addr: pr.A.Addr(64), Length: 32, LKey: UnusedKey(pr.A.MR, pr.B.MR)}}}, nil
		}, false},
		{"WRITE/UnknownLKey", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpWrite, SGL: []rdma.SGE{{Addr: pr.A.Addr(0), Length: 64, LKey: UnusedKey(pr.A.MR, pr.B.MR)}},
				RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}, nil
		}, false},
		{"WRITE/SGEBeyondMR", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpWrite, SGL: []rdma.SGE{pr.A.SGE(size-32, 64)}, RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}, nil
		}, false},
		{"WRITE/SGEWrapsAround", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			// An address whose end wraps past 2^64, with a valid lkey.
			return rdma.SendWR{Opcode: rdma.OpWrite, SGL: []rdma.SGE{{Addr: ^uint64(0) - 31, Length: 64, LKey: pr.A.MR.LKey()}},
				RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}, nil
		}, false},
		{"READ/UnknownLKey", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpRead, SGL: []rdma.SGE{{Addr: pr.A.Addr(0), Length: 64, LKey: UnusedKey(pr.A.MR, pr.B.MR)}},
				RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}, pr.A.Buf[:64]
		}, false},
		{"READ/NoLocalWrite", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			mr := RegBuffer(t, pr.A.PD, 4096, rdma.AccessRemoteRead)
			return rdma.SendWR{Opcode: rdma.OpRead, SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 64, LKey: mr.LKey()}},
				RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}, mr.Bytes()[:64]
		}, false},
		{"FETCH_AND_ADD/NoLocalWrite", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			mr := RegBuffer(t, pr.A.PD, 4096, rdma.AccessRemoteRead)
			return rdma.SendWR{Opcode: rdma.OpAtomicFetchAndAdd, SGL: []rdma.SGE{{Addr: mr.Addr(), Length: 8, LKey: mr.LKey()}},
				RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey(), CompareAdd: 1}, mr.Bytes()[:8]
		}, true},
		{"CMP_AND_SWP/UnknownLKey", func(t *testing.T, pr *Pair) (rdma.SendWR, []byte) {
			return rdma.SendWR{Opcode: rdma.OpAtomicCmpAndSwp, SGL: []rdma.SGE{{Addr: pr.A.Addr(0), Length: 8, LKey: UnusedKey(pr.A.MR, pr.B.MR)}},
				RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}, pr.A.Buf[:8]
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := NewPair(t, p, Options{BufSize: size})
			if tc.atomics {
				requireAtomics(t, pr.B.Dev)
			}
			wr, dst := tc.wr(t, pr)
			wr.ID, wr.Flags = 1, rdma.SendSignaled
			// A receive waits at the peer so that a SEND that got through
			// would complete rather than RNR-wait.
			PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 1, SGL: []rdma.SGE{pr.B.SGE(0, 4096)}})
			// A READ or atomic into memory it may not write must not
			// change it: the remote side holds something else.
			if wr.Opcode == rdma.OpRead || wr.Opcode.IsAtomic() {
				if len(dst) == 0 {
					t.Fatal("test case names no local memory to check")
				}
				Fill(pr.B.Buf[:64], 0x77)
				Fill(dst, 0x11)
			}
			before := append([]byte(nil), dst...)
			if err := pr.A.QP.PostSend([]rdma.SendWR{wr}); err != nil {
				t.Fatalf("PostSend = %v; a bad lkey or local range is found when the request executes and completes with %q",
					err, rdma.WCLocProtErr)
			}
			// rxe (Linux 6.1) reports an lkey that names no region of the
			// queue pair's PD as WCLocQPOpErr: its copy_data fails the key
			// lookup with -EINVAL, which rxe_requester maps to
			// LOC_QP_OP_ERR (a bad range within a valid key is -EFAULT,
			// WCLocProtErr). Both are local errors of this request.
			CheckWCIn(t, tc.name, WaitOne(t, pr.A.SendCQ), 1, rdma.WCLocProtErr, rdma.WCLocQPOpErr)
			CheckBytes(t, "local memory after a refused "+wr.Opcode.String(), dst, before)
		})
	}
}

// testLocalErrorsRecv: a receive whose SGEs are not valid writable memory
// of the queue pair's protection domain fails when a SEND lands in it.
// The receiver's completion is WCLocProtErr in the IB specification, but
// rxe reports a malformed receive WQE as WCLocQPOpErr, so both are
// accepted; the requester gets WCRemOpErr either way (the responder NAKs
// with Remote Operational Error, ibv_poll_cq(3)).
func testLocalErrorsRecv(t *testing.T, p Provider) {
	const size = 64 << 10
	for _, tc := range []struct {
		name string
		sge  func(t *testing.T, pr *Pair) rdma.SGE
	}{
		{"UnknownLKey", func(t *testing.T, pr *Pair) rdma.SGE {
			return rdma.SGE{Addr: pr.B.Addr(0), Length: 256, LKey: UnusedKey(pr.A.MR, pr.B.MR)}
		}},
		{"SGEBeyondMR", func(t *testing.T, pr *Pair) rdma.SGE { return pr.B.SGE(size-128, 256) }},
		{"NoLocalWrite", func(t *testing.T, pr *Pair) rdma.SGE {
			mr := RegBuffer(t, pr.B.PD, 4096, rdma.AccessRemoteRead)
			return rdma.SGE{Addr: mr.Addr(), Length: 256, LKey: mr.LKey()}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := NewPair(t, p, Options{BufSize: size})
			PostRecv(t, pr.B.QP, rdma.RecvWR{ID: 7, SGL: []rdma.SGE{tc.sge(t, pr)}})
			PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 200)}})
			CheckWCIn(t, "receive into bad memory", WaitOne(t, pr.B.RecvCQ), 7, rdma.WCLocProtErr, rdma.WCLocQPOpErr)
			CheckWC(t, "SEND into a bad receive", WaitOne(t, pr.A.SendCQ), 1, rdma.WCRemOpErr)
		})
	}
}

// testLocalErrorsMaxMsgSize: a request longer than the device's maximum
// message is a local length error. Providers may find it at post time
// (rdma.ErrInvalid) or when it executes (WCLocLenErr); both are what
// verbs allows.
func testLocalErrorsMaxMsgSize(t *testing.T, p Provider) {
	dev := p.Open(t)
	max := dev.Caps().MaxMsgSize
	if max == 0 || max > 64<<20 {
		t.Skipf("Caps.MaxMsgSize is %d: too large to build a longer message in a test", max)
	}
	n := NewNode(t, dev, int(max)+4096, rdma.AccessAll)
	pr := ConnectNodes(t, n, NewNode(t, p.Open(t), int(max)+4096, rdma.AccessAll), Options{})
	wr := rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, int(max)+1)},
		RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()}
	err := pr.A.QP.PostSend([]rdma.SendWR{wr})
	if err != nil {
		ExpectPostError(t, "WRITE of MaxMsgSize+1 bytes", err, 0, rdma.ErrInvalid)
		return
	}
	CheckWC(t, "WRITE of MaxMsgSize+1 bytes", WaitOne(t, pr.A.SendCQ), 1, rdma.WCLocLenErr)
}

// stillWorks fails the test unless pr.A can still WRITE to pr.B: refused
// posts must not disturb the queue pair.
func stillWorks(t *testing.T, pr *Pair, id uint64) {
	t.Helper()
	ExpectState(t, "after a refused post", pr.A.QP, rdma.QPSRTS)
	Fill(pr.A.Buf[:32], byte(id))
	PostSend(t, pr.A.QP, rdma.SendWR{ID: id, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 32)},
		RemoteAddr: pr.B.Addr(0), RKey: pr.B.MR.RKey()})
	CheckOK(t, "WRITE after a refused post", WaitOne(t, pr.A.SendCQ), id, rdma.WCWrite)
	CheckBytes(t, "WRITE after a refused post", pr.B.Buf[:32], pr.A.Buf[:32])
}
