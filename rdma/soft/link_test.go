package soft

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
)

// Tests of the link (link.go): who reads it, how acknowledgements ride,
// and that responses are read whether or not anyone waits for them.

// read8 reads 8 bytes at off in B's buffer into the same place in A's.
func (p *pair) read8(id, off uint64) []rdma.SendWR {
	return []rdma.SendWR{{ID: id, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL:        []rdma.SGE{{Addr: p.mrA.Addr() + off, Length: 8, LKey: p.mrA.LKey()}},
		RemoteAddr: p.mrB.Addr() + off, RKey: p.mrB.RKey()}}
}

// linkMode returns the read turn of q's link.
func linkMode(q rdma.QP) (rxMode, uint64) {
	qq := q.(*qp)
	qq.mu.Lock()
	defer qq.mu.Unlock()
	if qq.link == nil {
		return rxBackground, 0
	}
	return qq.link.mode, qq.link.gen
}

// settle fills B's buffer and runs one READ to completion by Wait, after
// which A's link is idle: the next waiter on cqA drives it.
func (p *pair) settle(t *testing.T) {
	t.Helper()
	p.settleGrace(t, idleGrace)
}

// settleGrace is settle with A's link idle for grace before its
// background goroutine reads it.
func (p *pair) settleGrace(t *testing.T, grace time.Duration) {
	t.Helper()
	for i := range p.mrB.Bytes() {
		p.mrB.Bytes()[i] = byte(i*13 + 5)
	}
	require.NoError(t, p.qpA.PostSend(p.read8(100, 0)))
	require.Equal(t, rdma.WCSuccess, waitOne(t, p.cqA).Status)
	q := p.qpA.(*qp)
	q.mu.Lock()
	q.link.grace = grace
	q.mu.Unlock()
	// The background goroutine may have read that READ before Wait
	// looked: take the turn from it, and leave the link idle.
	l := q.takeTurn(context.Background(), true)
	require.NotNil(t, l)
	q.endTurn(l, nil, false)
	mode, _ := linkMode(p.qpA)
	require.Equal(t, rxIdle, mode)
}

// TestWaiterDrivesLink: a READ's response is read by the goroutine waiting
// for its completion, not handed over by the background goroutine.
// (The link's grace is made long, so that the background goroutine does
// not take it over between rounds on a slow machine, as it should.)
func TestWaiterDrivesLink(t *testing.T) {
	p := newPair(t)
	p.settleGrace(t, time.Hour)
	p.driveRounds(t, 50, func() rdma.WorkCompletion { return waitOne(t, p.cqA) })
}

// driveRounds READs 8 bytes 50 times, each completion taken by complete,
// and fails unless at least min of them were taken by driving the link.
func (p *pair) driveRounds(t *testing.T, min int, complete func() rdma.WorkCompletion) {
	t.Helper()
	const rounds = 50
	driven := 0
	for i := range uint64(rounds) {
		_, gen := linkMode(p.qpA)
		require.NoError(t, p.qpA.PostSend(p.read8(i, 8*i)))
		wc := complete()
		require.Equal(t, rdma.WCSuccess, wc.Status)
		require.Equal(t, i, wc.ID)
		require.Equal(t, p.mrB.Bytes()[8*i:8*i+8], p.mrA.Bytes()[8*i:8*i+8], "round %d", i)
		if _, g := linkMode(p.qpA); g != gen {
			driven++
		}
	}
	require.GreaterOrEqual(t, driven, min, "the link was driven in %d rounds of %d", driven, rounds)
}

// TestDriverInterruptedByOtherCompletion: a waiter driving the link for a
// slow READ returns as soon as a receive completes on the same CQ, and
// the READ still completes afterwards.
func TestDriverInterruptedByOtherCompletion(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	const delay = 600 * time.Millisecond
	p.devB.SetDelay(delay) // B's responses, the READ's included, are slow
	require.NoError(t, p.qpA.PostRecv([]rdma.RecvWR{{ID: 7, SGL: []rdma.SGE{{Addr: p.mrA.Addr() + 64, Length: 64, LKey: p.mrA.LKey()}}}}))
	require.NoError(t, p.qpA.PostSend(p.read8(1, 0)))
	go func() {
		// Once A's waiter is parked reading for the READ's response.
		cqA := p.cqA.(*cq)
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			cqA.mu.Lock()
			d := cqA.driver.Load()
			cqA.mu.Unlock()
			if d != nil {
				d.intrMu.Lock()
				parked := d.parked
				d.intrMu.Unlock()
				if parked {
					break
				}
			}
		}
		p.qpB.PostSend([]rdma.SendWR{{ID: 9, Opcode: rdma.OpSend, SGL: []rdma.SGE{{Addr: p.mrB.Addr(), Length: 8, LKey: p.mrB.LKey()}}}})
	}()
	start := time.Now()
	wc := waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, wc.Status)
	require.Equal(t, uint64(7), wc.ID, "the receive completes first")
	require.Less(t, time.Since(start), delay/2, "the receive's completion waited for the READ")
	wc = waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, wc.Status)
	require.Equal(t, uint64(1), wc.ID)
}

// TestDriverCanceled: a waiter driving the link returns when its context
// ends; the response it did not wait for is read by the next reader.
func TestDriverCanceled(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	p.devB.SetDelay(300 * time.Millisecond)
	require.NoError(t, p.qpA.PostSend(p.read8(1, 8)))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var wc [1]rdma.WorkCompletion
	start := time.Now()
	n, err := p.cqA.Wait(ctx, wc[:])
	require.True(t, errors.Is(err, context.DeadlineExceeded), "Wait returned %d, %v", n, err)
	require.Less(t, time.Since(start), 250*time.Millisecond)
	got := waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, got.Status)
	require.Equal(t, p.mrB.Bytes()[8:16], p.mrA.Bytes()[8:16])
	require.Equal(t, rdma.QPSRTS, p.qpA.State())
}

// TestIdleLinkIsRead: a SEND posted on an idle link, whose sender then
// neither polls nor waits, still gets through an RNR NAK: the grace
// timer hands the link to its background goroutine, which reads the NAK.
func TestIdleLinkIsRead(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{ID: 1, Opcode: rdma.OpSendWithImm, Imm: 5, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: 8, LKey: p.mrA.LKey()}}}}))
	// B has no receive posted: the SEND is NAKed until it has.
	deadline := time.Now().Add(5 * time.Second)
	for p.devB.Stats().RNRNAKs == 0 {
		require.True(t, time.Now().Before(deadline), "B never refused the SEND")
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, p.qpB.PostRecv([]rdma.RecvWR{{ID: 2, SGL: []rdma.SGE{{Addr: p.mrB.Addr() + 64, Length: 64, LKey: p.mrB.LKey()}}}}))
	start := time.Now()
	wc := waitOne(t, p.cqB)
	// Well within the transport timer (4.3 s at the default timeout),
	// which would also have the link read.
	require.Less(t, time.Since(start), time.Second, "the SEND waited for the transport timer")
	require.Equal(t, rdma.WCSuccess, wc.Status)
	require.Equal(t, uint32(5), wc.Imm)
	require.Positive(t, p.devA.Stats().Resent, "A resent nothing: the NAK was not read")
}

// TestDropIdleLink: dropping the device's connections fails a queue pair
// whose link nobody was reading, at once.
func TestDropIdleLink(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	p.devA.DropConnections()
	deadline := time.Now().Add(5 * time.Second)
	for p.qpA.State() != rdma.QPSErr || p.qpB.State() != rdma.QPSErr {
		require.True(t, time.Now().Before(deadline), "queue pairs %v and %v after the link dropped", p.qpA.State(), p.qpB.State())
		time.Sleep(time.Millisecond)
	}
}

// pollOne polls cq until it returns a completion, for at most 10 s.
func pollOne(t *testing.T, cq rdma.CQ) rdma.WorkCompletion {
	t.Helper()
	var wc [1]rdma.WorkCompletion
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := cq.Poll(wc[:])
		require.NoError(t, err)
		if n == 1 {
			return wc[0]
		}
		require.True(t, time.Now().Before(deadline), "no completion")
	}
}

// TestPollDrivesLink: Poll applies what has arrived on an idle link
// itself, large responses included, a little at a time.
func TestPollDrivesLink(t *testing.T) {
	p := newPair(t)
	p.settleGrace(t, time.Hour)
	p.driveRounds(t, 50, func() rdma.WorkCompletion { return pollOne(t, p.cqA) })
	for _, size := range []uint32{60 << 10, 1 << 20} {
		require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{ID: 99, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
			SGL:        []rdma.SGE{{Addr: p.mrA.Addr(), Length: size, LKey: p.mrA.LKey()}},
			RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}}))
		wc := pollOne(t, p.cqA)
		require.Equal(t, rdma.WCSuccess, wc.Status, "READ of %d bytes", size)
		require.Equal(t, size, wc.ByteLen)
		require.Equal(t, p.mrB.Bytes()[:size], p.mrA.Bytes()[:size], "READ of %d bytes", size)
		require.Equal(t, rdma.QPSRTS, p.qpA.State())
	}
}

// TestPollWithNothingToComeKeepsLinkIdle: a Poll on a CQ the link cannot
// give a completion to (nothing in flight, no receive posted) neither
// reads the socket nor hands the link to the background goroutine, which
// the next Wait would have to evict. (A ping-pong that reaped its send
// CQ after every round trip took 20-40 µs instead of under 20 µs.)
func TestPollWithNothingToComeKeepsLinkIdle(t *testing.T) {
	p := newPair(t)
	p.settleGrace(t, time.Hour)
	_, gen := linkMode(p.qpA)
	var wc [1]rdma.WorkCompletion
	for range 3 {
		n, err := p.cqA.Poll(wc[:])
		require.NoError(t, err)
		require.Zero(t, n)
		mode, g := linkMode(p.qpA)
		require.Equal(t, rxIdle, mode)
		require.Equal(t, gen, g)
	}
	// With a request in flight, Poll reads the link itself.
	require.NoError(t, p.qpA.PostSend(p.read8(1, 0)))
	require.Equal(t, rdma.WCSuccess, pollOne(t, p.cqA).Status)
	mode, _ := linkMode(p.qpA)
	require.Equal(t, rxIdle, mode)
}

// TestReadTurnMixedUse completes batches of requests each in a randomly
// chosen way (Wait, Poll, Poll after a pause, Wait with contexts that
// expire first, nothing until the grace timer hands the link over), so
// that the read turn passes between waiters, pollers and the background
// goroutine in every order. Every request must complete, READs with the
// right data.
func TestReadTurnMixedUse(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	rng := rand.New(rand.NewPCG(1, 2))
	src := p.mrB.Bytes()
	deadline := time.Now().Add(2 * time.Second)
	var wc [8]rdma.WorkCompletion
	rounds, methods := 0, [5]int{}
	for time.Now().Before(deadline) {
		k := 1 + rng.IntN(4)
		wrs := make([]rdma.SendWR, k)
		offs := make([]uint64, k)
		for i := range wrs {
			offs[i] = uint64(rng.IntN(1<<19-64)) &^ 7 // READs: B's lower half
			n := uint32(8 + rng.IntN(56))
			op := rdma.OpRead
			if rng.IntN(3) == 0 {
				op = rdma.OpWrite // into B's upper half, which nobody reads
				offs[i] += 1 << 19
			}
			wrs[i] = rdma.SendWR{ID: uint64(i), Opcode: op, Flags: rdma.SendSignaled,
				SGL:        []rdma.SGE{{Addr: p.mrA.Addr() + offs[i], Length: n, LKey: p.mrA.LKey()}},
				RemoteAddr: p.mrB.Addr() + offs[i], RKey: p.mrB.RKey()}
		}
		require.NoError(t, p.qpA.PostSend(wrs))
		method := rng.IntN(len(methods))
		methods[method]++
		if method == 4 {
			time.Sleep(idleGrace * 3) // nobody reads but the background goroutine
		}
		got := 0
		for got < k {
			var n int
			var err error
			switch method {
			case 0, 4:
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				n, err = p.cqA.Wait(ctx, wc[:])
				cancel()
			case 1:
				n, err = p.cqA.Poll(wc[:])
			case 2:
				time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
				n, err = p.cqA.Poll(wc[:])
			case 3:
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(50))*time.Microsecond)
				n, err = p.cqA.Wait(ctx, wc[:])
				cancel()
				if errors.Is(err, context.DeadlineExceeded) {
					err = nil
				}
			}
			require.NoError(t, err, "round %d, method %d", rounds, method)
			for _, w := range wc[:n] {
				require.Equal(t, rdma.WCSuccess, w.Status, "round %d, method %d", rounds, method)
				if r := wrs[w.ID]; r.Opcode == rdma.OpRead {
					o, l := offs[w.ID], uint64(r.SGL[0].Length)
					require.Equal(t, src[o:o+l], p.mrA.Bytes()[o:o+l], "round %d: READ data", rounds)
				}
			}
			got += n
		}
		rounds++
	}
	require.Equal(t, rdma.QPSRTS, p.qpA.State())
	t.Logf("%d rounds; by Wait, Poll, Poll after a pause, expiring Waits, background: %v", rounds, methods)
}

// TestPollDoesNotAllocate: polling, empty or not, allocates nothing, nor
// does a READ's round trip through the provider on either side.
func TestPollDoesNotAllocate(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	wr := p.read8(1, 0)
	var wc [4]rdma.WorkCompletion
	roundTrip := func() {
		require.NoError(t, p.qpA.PostSend(wr))
		for deadline := time.Now().Add(10 * time.Second); ; {
			n, err := p.cqA.Poll(wc[:])
			require.NoError(t, err)
			if n > 0 {
				return
			}
			require.True(t, time.Now().Before(deadline), "no completion")
		}
	}
	// Not testing.AllocsPerRun: on one thread, a polling loop would
	// starve the responder. Counted over the whole process instead, so a
	// timer's allocation now and then is allowed for.
	perOp := func(n int, f func()) float64 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range n {
			f()
		}
		runtime.ReadMemStats(&after)
		return float64(after.Mallocs-before.Mallocs) / float64(n)
	}
	perOp(100, roundTrip) // warm up scratch buffers on both sides
	require.Less(t, perOp(500, roundTrip), 0.2, "allocations per READ posted and polled")

	p.devB.SetDelay(200 * time.Millisecond) // the next READ stays in flight
	require.NoError(t, p.qpA.PostSend(wr))
	require.Less(t, perOp(2000, func() { p.cqA.Poll(wc[:]) }), 0.01, "allocations per empty Poll")
}

// TestPostWhileAnotherWaits: a request posted while another goroutine
// already waits on the CQ (a completion dispatcher) completes in a round
// trip: the waiter drives the link.
func TestPostWhileAnotherWaits(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	cqA := p.cqA.(*cq)
	wr := p.read8(1, 0)
	const rounds = 21
	took := make([]time.Duration, 0, rounds)
	for range rounds {
		done := make(chan time.Time, 1)
		go func() {
			wc := waitOne(t, p.cqA)
			if wc.Status == rdma.WCSuccess {
				done <- time.Now()
			}
			close(done)
		}()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Microsecond) {
			cqA.mu.Lock()
			d := cqA.driver.Load()
			cqA.mu.Unlock()
			if d != nil {
				break
			}
			require.True(t, time.Now().Before(deadline), "the waiter never drove the link")
		}
		start := time.Now()
		require.NoError(t, p.qpA.PostSend(wr))
		end, ok := <-done
		require.True(t, ok, "the READ failed")
		took = append(took, end.Sub(start))
	}
	slices.Sort(took)
	t.Logf("median round trip %v", took[rounds/2])
}

// TestACKsRideOnAnswers: in a SEND ping-pong, each side's acknowledgement
// rides on its answer: (almost) no ACK travels alone.
func TestACKsRideOnAnswers(t *testing.T) {
	p := newPair(t)
	const rounds = 200
	sge := func(m rdma.MR, off uint64) []rdma.SGE {
		return []rdma.SGE{{Addr: m.Addr() + off, Length: 8, LKey: m.LKey()}}
	}
	done := make(chan error, 1)
	go func() { // B answers every message
		for i := range rounds {
			if err := p.qpB.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: sge(p.mrB, 0)}}); err != nil {
				done <- err
				return
			}
			for {
				wc := waitOne(t, p.cqB)
				if wc.Status != rdma.WCSuccess {
					done <- wc.Err()
					return
				}
				if wc.Opcode == rdma.WCRecv {
					break
				}
			}
			if err := p.qpB.PostSend([]rdma.SendWR{{ID: uint64(i), Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: sge(p.mrB, 64)}}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := range rounds {
		require.NoError(t, p.qpA.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: sge(p.mrA, 0)}}))
		require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{ID: uint64(i), Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: sge(p.mrA, 64)}}))
		for got := 0; got < 2; got++ {
			wc := waitOne(t, p.cqA)
			require.Equal(t, rdma.WCSuccess, wc.Status)
		}
	}
	require.NoError(t, <-done)
	alone := p.devA.Stats().ACKFrames + p.devB.Stats().ACKFrames
	t.Logf("%d ACKs alone in %d round trips", alone, rounds)
	// A starved machine may outlast the delayed-ACK timer now and then.
	require.Less(t, alone, uint64(rounds/4), "ACKs travelled alone")
}

// TestDelayedACKGoesAlone: a SEND nobody answers is acknowledged by the
// delayed-ACK timer, and from then on at once.
func TestDelayedACKGoesAlone(t *testing.T) {
	p := newPair(t)
	for i := range 3 {
		require.NoError(t, p.qpB.PostRecv([]rdma.RecvWR{{ID: uint64(i), SGL: []rdma.SGE{{Addr: p.mrB.Addr(), Length: 8, LKey: p.mrB.LKey()}}}}))
		start := time.Now()
		require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{ID: uint64(i), Opcode: rdma.OpSend, Flags: rdma.SendSignaled,
			SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: 8, LKey: p.mrA.LKey()}}}}))
		require.Equal(t, rdma.WCSuccess, waitOne(t, p.cqA).Status)
		t.Logf("SEND %d acknowledged after %v", i, time.Since(start))
		require.Equal(t, rdma.WCSuccess, waitOne(t, p.cqB).Status)
	}
	require.Positive(t, p.devB.Stats().ACKFrames, "B acknowledged without an ACK frame, but sent nothing else")
	qb := p.qpB.(*qp)
	qb.mu.Lock()
	pingpong := qb.link.pingpong
	qb.mu.Unlock()
	require.False(t, pingpong, "B still delays ACKs for an application that never answers")
}
