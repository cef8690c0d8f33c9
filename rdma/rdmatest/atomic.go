package rdmatest

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/octofs/octofs/rdma"
)

// Atomic operands live in memory in the host's byte order, as rxe and the
// soft provider do it. (Some ConnectX NICs operate on big-endian memory;
// octofs does not target them, and a provider for them would have to say
// so in Caps.)
func word(b []byte, off int) uint64       { return binary.NativeEndian.Uint64(b[off:]) }
func putWord(b []byte, off int, v uint64) { binary.NativeEndian.PutUint64(b[off:], v) }
func atomicWR(op rdma.Opcode, id uint64, local rdma.SGE, raddr uint64, rkey uint32, compareAdd, swap uint64) rdma.SendWR {
	return rdma.SendWR{ID: id, Opcode: op, Flags: rdma.SendSignaled, SGL: []rdma.SGE{local},
		RemoteAddr: raddr, RKey: rkey, CompareAdd: compareAdd, Swap: swap}
}

// testAtomicFetchAndAdd: FETCH_AND_ADD adds to the remote word, wrapping
// at 2^64, and returns the old value in the local buffer once complete.
func testAtomicFetchAndAdd(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	requireAtomics(t, pr.A.Dev)
	for i, tc := range []struct{ old, add uint64 }{
		{0, 1},
		{0x1122334455667788, 0x0101010101010101},
		{0xFFFFFFFFFFFFFFFF, 2},
		{42, 0},
		{1 << 63, 1 << 63},
	} {
		id := uint64(i + 1)
		off := 8 * (i + 1)
		putWord(pr.B.Buf, off, tc.old)
		putWord(pr.A.Buf, off, 0xDEADDEADDEADDEAD)
		PostSend(t, pr.A.QP, atomicWR(rdma.OpAtomicFetchAndAdd, id, pr.A.SGE(off, 8), pr.B.Addr(off), pr.B.MR.RKey(), tc.add, 0))
		wc := WaitOne(t, pr.A.SendCQ)
		CheckOK(t, "FETCH_AND_ADD", wc, id, rdma.WCFetchAdd)
		if got := word(pr.A.Buf, off); got != tc.old {
			t.Errorf("FETCH_AND_ADD(%#x + %#x) returned %#x, want the old value %#x", tc.old, tc.add, got, tc.old)
		}
		if got, want := word(pr.B.Buf, off), tc.old+tc.add; got != want {
			t.Errorf("FETCH_AND_ADD(%#x + %#x) left %#x at the responder, want %#x", tc.old, tc.add, got, want)
		}
		// The next word, not yet used, is untouched: the add is 8 bytes wide.
		if got := word(pr.B.Buf, off+8); got != 0 {
			t.Errorf("FETCH_AND_ADD at offset %d changed the next word to %#x", off, got)
		}
	}
}

// testAtomicCmpAndSwp: CMP_AND_SWP swaps only when the remote word equals
// the compare value, and returns the old value either way.
func testAtomicCmpAndSwp(t *testing.T, p Provider) {
	pr := NewPair(t, p, Options{})
	requireAtomics(t, pr.A.Dev)
	for i, tc := range []struct {
		name               string
		old, compare, swap uint64
		swapped            bool
	}{
		{"Equal", 0x0123456789ABCDEF, 0x0123456789ABCDEF, 0xFEDCBA9876543210, true},
		{"NotEqual", 0x0123456789ABCDEF, 0x0123456789ABCDEE, 0xFEDCBA9876543210, false},
		{"HighBitsDiffer", 0x8000000000000001, 0x0000000000000001, 7, false},
		{"ZeroToOne", 0, 0, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := uint64(i + 1)
			off := 8 * (i + 1)
			putWord(pr.B.Buf, off, tc.old)
			putWord(pr.A.Buf, off, 0xDEADDEADDEADDEAD)
			PostSend(t, pr.A.QP, atomicWR(rdma.OpAtomicCmpAndSwp, id, pr.A.SGE(off, 8), pr.B.Addr(off), pr.B.MR.RKey(), tc.compare, tc.swap))
			CheckOK(t, "CMP_AND_SWP", WaitOne(t, pr.A.SendCQ), id, rdma.WCCompSwap)
			if got := word(pr.A.Buf, off); got != tc.old {
				t.Errorf("CMP_AND_SWP returned %#x, want the old value %#x", got, tc.old)
			}
			want := tc.old
			if tc.swapped {
				want = tc.swap
			}
			if got := word(pr.B.Buf, off); got != want {
				t.Errorf("CMP_AND_SWP(remote %#x, compare %#x, swap %#x) left %#x, want %#x", tc.old, tc.compare, tc.swap, got, want)
			}
		})
	}
}

// testAtomicMisaligned: an atomic target must be 8-byte aligned. The IB
// specification has the responder NAK it as an invalid request
// (WCRemInvReqErr); rxe's library already refuses it in ibv_post_send, so
// a post-time rdma.ErrInvalid is accepted as well. Either way the remote
// memory is untouched.
func testAtomicMisaligned(t *testing.T, p Provider) {
	for _, op := range []rdma.Opcode{rdma.OpAtomicFetchAndAdd, rdma.OpAtomicCmpAndSwp} {
		for _, off := range []int{4, 1, 12} {
			t.Run(fmt.Sprintf("%v/Offset%d", op, off), func(t *testing.T) {
				pr := NewPair(t, p, Options{})
				requireAtomics(t, pr.A.Dev)
				Fill(pr.B.Buf[:64], 0x10)
				before := append([]byte(nil), pr.B.Buf[:64]...)
				err := pr.A.QP.PostSend([]rdma.SendWR{atomicWR(op, 1, pr.A.SGE(0, 8), pr.B.Addr(off), pr.B.MR.RKey(), word(before, off), 1)})
				if err != nil {
					ExpectPostError(t, "misaligned "+op.String(), err, 0, rdma.ErrInvalid)
				} else {
					CheckWC(t, "misaligned "+op.String(), WaitOne(t, pr.A.SendCQ), 1, rdma.WCRemInvReqErr)
				}
				CheckBytes(t, "responder memory after a misaligned atomic", pr.B.Buf[:64], before)
			})
		}
	}
}

// testAtomicConcurrent: atomics are atomic against each other. Several
// queue pairs on several devices each FETCH_AND_ADD 1 to one word many
// times at once; the word ends at the total and the old values returned
// are exactly 0..total-1, each once.
func testAtomicConcurrent(t *testing.T, p Provider) {
	const (
		devices   = 2
		qpsPerDev = 2
		perQP     = 256
		batch     = 32
		total     = devices * qpsPerDev * perQP
	)
	o := Options{}.withDefaults()
	resp := NewNode(t, p.Open(t), 4096, rdma.AccessAll)
	requireAtomics(t, resp.Dev)
	type requester struct {
		side *Side
		base int // offset of its result slots
	}
	var reqs []requester
	for range devices {
		n := NewNode(t, p.Open(t), qpsPerDev*perQP*8, rdma.AccessAll)
		for q := range qpsPerDev {
			pr := ConnectNodes(t, n, resp, o)
			reqs = append(reqs, requester{pr.A, q * perQP * 8})
		}
	}
	putWord(resp.Buf, 0, 0)

	var wg sync.WaitGroup
	errs := make(chan error, len(reqs))
	for _, r := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < perQP; done += batch {
				wrs := make([]rdma.SendWR, batch)
				for i := range wrs {
					slot := r.base + 8*(done+i)
					wrs[i] = atomicWR(rdma.OpAtomicFetchAndAdd, uint64(done+i), r.side.SGE(slot, 8), resp.Addr(0), resp.MR.RKey(), 1, 0)
				}
				if err := r.side.QP.PostSend(wrs); err != nil {
					errs <- fmt.Errorf("QP %d: PostSend: %w", r.side.QP.QPN(), err)
					return
				}
				wcs, err := Collect(r.side.SendCQ, batch, DefaultWaitTimeout)
				if err != nil {
					errs <- fmt.Errorf("QP %d: %w after %s", r.side.QP.QPN(), err, FormatWCs(wcs))
					return
				}
				for i, wc := range wcs {
					if wc.Status != rdma.WCSuccess || wc.ID != uint64(done+i) {
						errs <- fmt.Errorf("QP %d: completion %s, want id %d: success", r.side.QP.QPN(), FormatWC(wc), done+i)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if got := word(resp.Buf, 0); got != total {
		t.Errorf("after %d concurrent FETCH_AND_ADD(1) the word is %d", total, got)
	}
	seen := make([]bool, total)
	for _, r := range reqs {
		for i := range perQP {
			v := word(r.side.Buf, r.base+8*i)
			if v >= total || seen[v] {
				t.Fatalf("FETCH_AND_ADD returned old value %d twice or out of range: two adds saw the same word", v)
			}
			seen[v] = true
		}
	}
}
