package rdmatest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/octofs/octofs/rdma"
)

// testSharedCQConcurrentPosters: several queue pairs share one send CQ
// and one receive CQ on each side, and several goroutines post to each
// queue pair at once. Every request completes exactly once, on the CQ of
// its queue pair (WorkCompletion.QPN says which), and each poster's
// requests complete in the order it posted them.
func testSharedCQConcurrentPosters(t *testing.T, p Provider) {
	const (
		qps       = 4
		posters   = 2 // per queue pair
		perPoster = 150
		window    = 24 // requests a queue pair has outstanding at most
	)
	o := Options{}.withDefaults()
	o.QP.MaxSendWR, o.QP.MaxRecvWR = 2*window, posters*perPoster
	na := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	nb := NewNode(t, p.Open(t), o.BufSize, o.MRAccess)
	depth := 2 * qps * posters * perPoster
	if c := na.Dev.Caps().MaxCQE; c > 0 {
		depth = min(depth, c)
	}
	sendA, recvB := NewCQ(t, na.Dev, depth), NewCQ(t, nb.Dev, depth)
	otherA, sendB := NewCQ(t, na.Dev, depth), NewCQ(t, nb.Dev, depth)
	var as, bs []rdma.QP
	for range qps {
		ca, cb := o.QP, o.QP
		ca.SendCQ, ca.RecvCQ = sendA, otherA
		cb.SendCQ, cb.RecvCQ = sendB, recvB
		qa, err := na.PD.CreateQP(ca)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qa.Close() })
		qb, err := nb.PD.CreateQP(cb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { qb.Close() })
		Connect(t, qa, qb, o.QPAccess, o.Transport)
		// Every SEND of the posters finds a receive.
		var recvs []rdma.RecvWR
		for i := range posters * perPoster / 3 {
			recvs = append(recvs, rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{nb.SGE(64*(i%64), 64)}})
		}
		PostRecv(t, qb, recvs...)
		as, bs = append(as, qa), append(bs, qb)
	}
	byQPN := map[uint32]int{}
	for i, q := range as {
		byQPN[q.QPN()] = i
	}
	credits := make([]chan struct{}, qps)
	for i := range credits {
		credits[i] = make(chan struct{}, window)
		for range window {
			credits[i] <- struct{}{}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*DefaultWaitTimeout)
	defer cancel()

	var wg sync.WaitGroup
	errs := make(chan error, qps*posters+1)
	for qi, q := range as {
		for pi := range posters {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for seq := range perPoster {
					select {
					case <-credits[qi]:
					case <-ctx.Done():
						errs <- fmt.Errorf("queue pair %d, poster %d: no credit after %d posts", qi, pi, seq)
						return
					}
					wr := rdma.SendWR{ID: uint64(pi)<<32 | uint64(seq), Flags: rdma.SendSignaled, SGL: []rdma.SGE{na.SGE(64*qi, 8)}}
					switch seq % 3 {
					case 0:
						wr.Opcode = rdma.OpSend
					case 1:
						wr.Opcode, wr.RemoteAddr, wr.RKey = rdma.OpWrite, nb.Addr(8192+64*qi), nb.MR.RKey()
					default:
						wr.Opcode, wr.RemoteAddr, wr.RKey = rdma.OpRead, nb.Addr(16384+64*qi), nb.MR.RKey()
						wr.SGL = []rdma.SGE{na.SGE(4096+512*qi+64*pi, 8)}
					}
					if err := q.PostSend([]rdma.SendWR{wr}); err != nil {
						errs <- fmt.Errorf("queue pair %d, poster %d, request %d: %w", qi, pi, seq, err)
						return
					}
				}
			}()
		}
	}
	// One goroutine takes every completion off the shared send CQ.
	total := qps * posters * perPoster
	next := make([][posters]int, qps)
	wcs := make([]rdma.WorkCompletion, 32)
	for got := 0; got < total; {
		n, err := sendA.Wait(ctx, wcs)
		if err != nil {
			t.Fatalf("shared send CQ after %d of %d completions: %v", got, total, err)
		}
		for _, wc := range wcs[:n] {
			qi, ok := byQPN[wc.QPN]
			if !ok {
				t.Fatalf("completion %s names QP %d, none of the CQ's", FormatWC(wc), wc.QPN)
			}
			if wc.Status != rdma.WCSuccess {
				t.Fatalf("queue pair %d: %s", qi, FormatWC(wc))
			}
			pi, seq := int(wc.ID>>32), int(wc.ID&0xffffffff)
			if pi >= posters || seq != next[qi][pi] {
				t.Fatalf("queue pair %d: completion %s, want poster %d's request %d next", qi, FormatWC(wc), pi, next[qi][min(pi, posters-1)])
			}
			next[qi][pi]++
			credits[qi] <- struct{}{}
		}
		got += n
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The SENDs' receives completed on the shared receive CQ, as many per
	// queue pair as it was sent.
	sends := posters * ((perPoster + 2) / 3)
	perQP := map[uint32]int{}
	for _, wc := range WaitN(t, recvB, qps*sends) {
		if wc.Status != rdma.WCSuccess || wc.Opcode != rdma.WCRecv {
			t.Fatalf("receive %s", FormatWC(wc))
		}
		perQP[wc.QPN]++
	}
	for _, q := range bs {
		if perQP[q.QPN()] != sends {
			t.Errorf("queue pair %d: %d receives completed, want %d", q.QPN(), perQP[q.QPN()], sends)
		}
	}
}
