package rdmatest

import (
	"testing"

	"github.com/octofs/octofs/rdma"
)

// oneSidedOps are the operations a responder checks an rkey for.
var oneSidedOps = []rdma.Opcode{rdma.OpWrite, rdma.OpWriteWithImm, rdma.OpRead, rdma.OpAtomicCmpAndSwp, rdma.OpAtomicFetchAndAdd}

// remoteWR builds a signaled one-sided request of op moving length bytes
// between local offset loff of the requester's buffer and raddr/rkey.
// Atomics always move 8 bytes.
func remoteWR(op rdma.Opcode, id uint64, req *Node, loff, length int, raddr uint64, rkey uint32) rdma.SendWR {
	if op.IsAtomic() {
		length = 8
	}
	wr := rdma.SendWR{ID: id, Opcode: op, Flags: rdma.SendSignaled, RemoteAddr: raddr, RKey: rkey}
	if length > 0 {
		wr.SGL = []rdma.SGE{req.SGE(loff, length)}
	}
	if op.HasImm() {
		wr.Imm = 0xC0FFEE00 | uint32(id&0xff)
	}
	return wr
}

// skipUnlessAtomics skips a subtest of an atomic opcode on a device
// without atomics.
func skipUnlessAtomics(t *testing.T, op rdma.Opcode, dev rdma.Device) {
	t.Helper()
	if op.IsAtomic() {
		requireAtomics(t, dev)
	}
}

// expectRemoteOK runs op from pr.A against raddr/rkey at pr.B and fails
// the test unless it succeeds. It is the positive control of the tests
// that expect a failure, so that they cannot pass with a provider that
// fails everything.
func expectRemoteOK(t *testing.T, pr *Pair, op rdma.Opcode, id uint64, length int, raddr uint64, rkey uint32) {
	t.Helper()
	if op.ConsumesRecv() {
		PostRecv(t, pr.B.QP, rdma.RecvWR{ID: id, SGL: []rdma.SGE{pr.B.SGE(0, 8)}})
	}
	PostSend(t, pr.A.QP, remoteWR(op, id, pr.A.Node, 0, length, raddr, rkey))
	CheckOK(t, op.String()+" with valid key and range (control)", WaitOne(t, pr.A.SendCQ), id, rdma.WCOpcodeOf(op))
	if op.ConsumesRecv() {
		CheckOK(t, op.String()+" receive (control)", WaitOne(t, pr.B.RecvCQ), id, rdma.WCRecvWriteWithImm)
	}
}

// expectRemoteAccessErr runs op from pr.A against raddr/rkey at pr.B and
// fails the test unless the requester completes with WCRemAccessErr and
// target, the responder memory the request names, is unchanged.
func expectRemoteAccessErr(t *testing.T, pr *Pair, op rdma.Opcode, id uint64, length int, raddr uint64, rkey uint32, target []byte) {
	t.Helper()
	expectRemoteRefusal(t, pr, op, id, length, raddr, rkey, target, rdma.WCRemAccessErr)
}

// expectRemoteRefusal is expectRemoteAccessErr accepting any of statuses.
func expectRemoteRefusal(t *testing.T, pr *Pair, op rdma.Opcode, id uint64, length int, raddr uint64, rkey uint32, target []byte, statuses ...rdma.WCStatus) {
	t.Helper()
	before := append([]byte(nil), target...)
	if op.ConsumesRecv() {
		// A receive is posted so that the outcome is the access check,
		// not an RNR wait.
		PostRecv(t, pr.B.QP, rdma.RecvWR{ID: id, SGL: []rdma.SGE{pr.B.SGE(0, 8)}})
	}
	PostSend(t, pr.A.QP, remoteWR(op, id, pr.A.Node, 0, length, raddr, rkey))
	CheckWCIn(t, op.String(), WaitOne(t, pr.A.SendCQ), id, statuses...)
	CheckBytes(t, "responder memory after a refused "+op.String(), target, before)
}

// testRemoteAccessMRRights: the rkey's region must carry the REMOTE_* right
// of the operation.
func testRemoteAccessMRRights(t *testing.T, p Provider) {
	for _, tc := range []struct {
		op     rdma.Opcode
		access rdma.Access // the target region's rights: all but the one needed
	}{
		{rdma.OpWrite, rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteAtomic},
		{rdma.OpWriteWithImm, rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteAtomic},
		{rdma.OpRead, rdma.AccessLocalWrite | rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic},
		{rdma.OpAtomicCmpAndSwp, rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteWrite},
		{rdma.OpAtomicFetchAndAdd, rdma.AccessLocalWrite | rdma.AccessRemoteRead | rdma.AccessRemoteWrite},
	} {
		t.Run(tc.op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{})
			skipUnlessAtomics(t, tc.op, pr.B.Dev)
			target := RegBuffer(t, pr.B.PD, 4096, tc.access)
			Fill(target.Bytes(), 0x40)
			expectRemoteOK(t, pr, tc.op, 1, 64, pr.B.Addr(64), pr.B.MR.RKey())
			expectRemoteAccessErr(t, pr, tc.op, 2, 64, target.Addr()+64, target.RKey(), target.Bytes())
		})
	}
}

// testRemoteAccessUnknownKey: an rkey that names no region is refused.
func testRemoteAccessUnknownKey(t *testing.T, p Provider) {
	for _, op := range oneSidedOps {
		t.Run(op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{})
			skipUnlessAtomics(t, op, pr.B.Dev)
			Fill(pr.B.Buf, 0x11)
			expectRemoteAccessErr(t, pr, op, 1, 64, pr.B.Addr(64), UnusedKey(pr.A.MR, pr.B.MR), pr.B.Buf)
		})
	}
}

// testRemoteAccessOtherPD: an rkey of a live region in another protection
// domain of the same device is refused.
func testRemoteAccessOtherPD(t *testing.T, p Provider) {
	for _, op := range oneSidedOps {
		t.Run(op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{})
			skipUnlessAtomics(t, op, pr.B.Dev)
			other, err := pr.B.Dev.AllocPD()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })
			foreign := RegBuffer(t, other, 4096, rdma.AccessAll)
			Fill(foreign.Bytes(), 0x22)
			expectRemoteAccessErr(t, pr, op, 1, 64, foreign.Addr()+64, foreign.RKey(), foreign.Bytes())
		})
	}
}

// testRemoteAccessRange: the whole range must lie inside the region.
func testRemoteAccessRange(t *testing.T, p Provider) {
	const size = 64 << 10
	for _, op := range oneSidedOps {
		for _, tc := range []struct {
			name   string
			offset int64 // from the region's start
			length int
		}{
			{"BeforeStart", -64, 64},
			{"OverlapsStart", -8, 64},
			{"AtEnd", size, 64},
			{"StraddlesEnd", size - 32, 64},
			{"FarBeyond", 1 << 40, 64},
		} {
			if op.IsAtomic() && tc.name == "StraddlesEnd" {
				continue // an aligned 8-byte target cannot straddle an aligned end
			}
			t.Run(op.String()+"/"+tc.name, func(t *testing.T) {
				pr := NewPair(t, p, Options{BufSize: size})
				skipUnlessAtomics(t, op, pr.B.Dev)
				Fill(pr.B.Buf, 0x33)
				// The last bytes of the region are reachable (control).
				expectRemoteOK(t, pr, op, 1, 64, pr.B.Addr(size-64), pr.B.MR.RKey())
				Fill(pr.B.Buf, 0x33)
				raddr := uint64(int64(pr.B.MR.Addr()) + tc.offset)
				expectRemoteAccessErr(t, pr, op, 2, tc.length, raddr, pr.B.MR.RKey(), pr.B.Buf)
			})
		}
	}
}

// testRemoteAccessQPAccess: the access flags given to the responder's
// queue pair at Init are enforced as well as the region's.
//
// The status differs by implementation: rdma/doc.go promises
// WCRemAccessErr, but rxe (check_op_valid) and the soft provider treat an
// operation the queue pair is not enabled for as an invalid request
// (NAK Invalid Request, WCRemInvReqErr), which the IB specification allows.
// Both are accepted; what matters is that the access is refused.
func testRemoteAccessQPAccess(t *testing.T, p Provider) {
	for _, tc := range []struct {
		op      rdma.Opcode
		access  rdma.Access // granted by the responder QP: all but the one needed
		control rdma.Opcode // an operation that access allows
	}{
		{rdma.OpWrite, rdma.AccessRemoteRead | rdma.AccessRemoteAtomic, rdma.OpRead},
		{rdma.OpWriteWithImm, rdma.AccessRemoteRead | rdma.AccessRemoteAtomic, rdma.OpRead},
		{rdma.OpRead, rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic, rdma.OpWrite},
		{rdma.OpAtomicCmpAndSwp, rdma.AccessRemoteRead | rdma.AccessRemoteWrite, rdma.OpRead},
		{rdma.OpAtomicFetchAndAdd, rdma.AccessRemoteRead | rdma.AccessRemoteWrite, rdma.OpWrite},
	} {
		t.Run(tc.op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{QPAccess: tc.access})
			skipUnlessAtomics(t, tc.op, pr.B.Dev)
			Fill(pr.B.Buf, 0x44)
			expectRemoteOK(t, pr, tc.control, 1, 64, pr.B.Addr(128), pr.B.MR.RKey())
			Fill(pr.B.Buf, 0x44)
			expectRemoteRefusal(t, pr, tc.op, 2, 64, pr.B.Addr(64), pr.B.MR.RKey(), pr.B.Buf, rdma.WCRemAccessErr, rdma.WCRemInvReqErr)
		})
	}
}

// testRemoteAccessDeregistered: once Dereg returns, accesses through the
// region's rkey fail, and the memory is left alone.
func testRemoteAccessDeregistered(t *testing.T, p Provider) {
	for _, op := range oneSidedOps {
		t.Run(op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{})
			skipUnlessAtomics(t, op, pr.B.Dev)
			target := RegBuffer(t, pr.B.PD, 4096, rdma.AccessAll)
			expectRemoteOK(t, pr, op, 1, 64, target.Addr()+64, target.RKey())
			addr, rkey, mem := target.Addr(), target.RKey(), target.Bytes()
			if err := target.Dereg(); err != nil {
				t.Fatalf("Dereg: %v", err)
			}
			// The memory stays mapped until the test ends, so a provider
			// that still writes to it is caught, not crashed.
			Fill(mem, 0x55)
			expectRemoteAccessErr(t, pr, op, 2, 64, addr+64, rkey, mem)
		})
	}
}

// testZeroLength: zero-length RDMA operations skip the rkey and range
// check (IBA C9-88) and zero-length SENDs consume a receive.
func testZeroLength(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	a, b := pr.A, pr.B
	bad := UnusedKey(a.MR, b.MR)
	Fill(b.Buf, 0x66)
	before := append([]byte(nil), b.Buf...)

	t.Run("WRITE", func(t *testing.T) {
		PostSend(t, a.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, RKey: bad})
		CheckOK(t, "zero-length WRITE with an unknown rkey", WaitOne(t, a.SendCQ), 1, rdma.WCWrite)
	})
	t.Run("READ", func(t *testing.T) {
		PostSend(t, a.QP, rdma.SendWR{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, RKey: bad, RemoteAddr: 8})
		CheckOK(t, "zero-length READ with an unknown rkey", WaitOne(t, a.SendCQ), 2, rdma.WCRead)
	})
	t.Run("SEND", func(t *testing.T) {
		PostRecv(t, b.QP, rdma.RecvWR{ID: 3, SGL: []rdma.SGE{b.SGE(0, 64)}})
		PostSend(t, a.QP, rdma.SendWR{ID: 3, Opcode: rdma.OpSend, Flags: rdma.SendSignaled})
		CheckOK(t, "zero-length SEND", WaitOne(t, a.SendCQ), 3, rdma.WCSend)
		wc := WaitOne(t, b.RecvCQ)
		CheckOK(t, "zero-length SEND's receive", wc, 3, rdma.WCRecv)
		if wc.ByteLen != 0 || wc.HasImm {
			t.Fatalf("zero-length SEND's receive: %s, want length 0 without immediate", FormatWC(wc))
		}
	})
	t.Run("WRITE_WITH_IMM", func(t *testing.T) {
		PostRecv(t, b.QP, rdma.RecvWR{ID: 4, SGL: []rdma.SGE{b.SGE(0, 64)}})
		PostSend(t, a.QP, rdma.SendWR{ID: 4, Opcode: rdma.OpWriteWithImm, Flags: rdma.SendSignaled, RKey: bad, Imm: 0xABCD})
		CheckOK(t, "zero-length WRITE_WITH_IMM with an unknown rkey", WaitOne(t, a.SendCQ), 4, rdma.WCWrite)
		wc := WaitOne(t, b.RecvCQ)
		CheckOK(t, "zero-length WRITE_WITH_IMM's receive", wc, 4, rdma.WCRecvWriteWithImm)
		if wc.ByteLen != 0 || !wc.HasImm || wc.Imm != 0xABCD {
			t.Fatalf("zero-length WRITE_WITH_IMM's receive: %s, want length 0, imm 0xabcd", FormatWC(wc))
		}
	})
	CheckBytes(t, "responder memory after zero-length operations", b.Buf, before)
	ExpectState(t, "requester after zero-length operations", a.QP, rdma.QPSRTS)
	ExpectState(t, "responder after zero-length operations", b.QP, rdma.QPSRTS)
}

// testRemoteAccessAddressWrap: a range whose end wraps past 2^64 is
// outside every region, however the region's own checks add it up.
func testRemoteAccessAddressWrap(t *testing.T, p Provider) {
	for _, op := range oneSidedOps {
		t.Run(op.String(), func(t *testing.T) {
			pr := NewPair(t, p, Options{})
			skipUnlessAtomics(t, op, pr.B.Dev)
			Fill(pr.B.Buf, 0x4d)
			expectRemoteOK(t, pr, op, 1, 64, pr.B.Addr(0), pr.B.MR.RKey())
			Fill(pr.B.Buf, 0x4d)
			raddr := ^uint64(0) - 31 // + 64 bytes wraps to 32
			if op.IsAtomic() {
				raddr = ^uint64(0) - 7 // aligned, and the last word of the address space
			}
			expectRemoteAccessErr(t, pr, op, 2, 64, raddr, pr.B.MR.RKey(), pr.B.Buf)
		})
	}
}
