package soft

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/octofs/octofs/rdma"
)

// TestRNRStormLargeSends streams large SENDs at a receiver that reposts
// its receives late now and then: RNR NAKs rewind and resend megabytes at
// a time, and every SEND must still complete, in order, without a
// transport timeout.
func TestRNRStormLargeSends(t *testing.T) {
	p := newPair(t)
	const size = 256 << 10
	const depth = 16
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
