package soft

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rdmatest"
)

// TestRNRStormLargeSends streams large SENDs at a receiver that reposts
// its receives late now and then: RNR NAKs rewind and resend megabytes at
// a time, and every SEND must still complete, in order, without a
// transport timeout.
func TestRNRStormLargeSends(t *testing.T) {
	p := newPair(t)
	const size = 256 << 10
	const depth = 16
	// A second queue pair on B's CQ: a Wait on a shared CQ does not read
	// the link itself, so B's link is read by its background goroutine
	// while the receiver dawdles, and SENDs find no receive (a Wait on a
	// CQ of its own would take them only when it has reposted).
	pdB, err := p.devB.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	other, err := pdB.CreateQP(rdma.QPConfig{SendCQ: p.cqB, RecvCQ: p.cqB})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	// B reposts receives slowly from a goroutine: RNR NAKs happen.
	go func() {
		var wc [32]rdma.WorkCompletion
		ctx := context.Background()
		for i := 0; i < 4; i++ {
			p.qpB.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: []rdma.SGE{{Addr: p.mrB.Addr(), Length: size, LKey: p.mrB.LKey()}}}})
		}
		for {
			n, err := p.cqB.Wait(ctx, wc[:])
			if err != nil {
				return
			}
			for i := 0; i < n; i++ {
				if wc[i].Status != rdma.WCSuccess {
					return
				}
				if rand.IntN(8) == 0 {
					time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
				}
				p.qpB.PostRecv([]rdma.RecvWR{{ID: wc[i].ID, SGL: []rdma.SGE{{Addr: p.mrB.Addr(), Length: size, LKey: p.mrB.LKey()}}}})
			}
		}
	}()
	wr := []rdma.SendWR{{Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: size, LKey: p.mrA.LKey()}}}}
	var wc [32]rdma.WorkCompletion
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	inflight := 0
	for i := 0; i < 400; i++ {
		for inflight >= depth {
			n, err := p.cqA.Wait(ctx, wc[:])
			if err != nil {
				t.Fatal(err)
			}
			for j := 0; j < n; j++ {
				if wc[j].Status != rdma.WCSuccess {
					q := p.qpA.(*qp)
					t.Fatalf("SEND %d: %v (send queue head %d, next %d, tail %d)", i, wc[j].Status, q.sqHead, q.sqNext, q.sqTail)
				}
			}
			inflight -= n
		}
		if err := p.qpA.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		inflight++
	}
	// The storm the test is about happened.
	if n := p.devB.Stats().RNRNAKs; n == 0 {
		t.Fatal("the receiver sent no RNR NAK: the test did not exercise RNR")
	}
	if n := p.devA.Stats().Resent; n == 0 {
		t.Fatal("the sender resent nothing after RNR NAKs")
	}
	t.Logf("RNR NAKs %d, requests resent %d", p.devB.Stats().RNRNAKs, p.devA.Stats().Resent)
}

// TestRNRRetryCountExact: with RNRRetry r, a SEND that never finds a
// receive is sent r+1 times, refused r+1 times, and fails.
func TestRNRRetryCountExact(t *testing.T) {
	for _, retries := range []uint8{0, 1, 3, 6} {
		t.Run(fmt.Sprint(retries), func(t *testing.T) {
			pr := rdmatest.NewPair(t, softProvider, rdmatest.Options{Transport: rdmatest.Transport{RNRRetry: retries, MinRNRTimer: 1}})
			if retries == 0 {
				// Transport cannot say 0 (it means the default): set it.
				rdmatest.Connect(t, resetQP(t, pr.A.QP), resetQP(t, pr.B.QP), rdma.AccessRemoteWrite, rdmatest.Transport{MinRNRTimer: 1})
				require.NoError(t, pr.A.QP.Modify(rdma.QPAttr{State: rdma.QPSRTS, RNRRetry: 0, Timeout: 16, RetryCount: 3}))
			}
			rdmatest.PostSend(t, pr.A.QP, rdma.SendWR{ID: 1, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: []rdma.SGE{pr.A.SGE(0, 8)}})
			rdmatest.CheckWC(t, "SEND that never finds a receive", rdmatest.WaitOne(t, pr.A.SendCQ), 1, rdma.WCRNRRetryExcErr)
			devA, devB := pr.A.Dev.(*Device), pr.B.Dev.(*Device)
			require.Equal(t, uint64(retries)+1, devB.Stats().RNRNAKs, "RNR NAKs sent")
			require.Equal(t, uint64(retries), devA.Stats().Resent, "requests resent")
		})
	}
}

// resetQP moves qp back to Reset, for a test to connect it again.
func resetQP(t *testing.T, qp rdma.QP) rdma.QP {
	t.Helper()
	require.NoError(t, qp.Modify(rdma.QPAttr{State: rdma.QPSReset}))
	return qp
}
