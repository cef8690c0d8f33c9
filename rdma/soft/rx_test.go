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

// Tests of the read turn of requester connections (rx.go): a waiter
// reads its own responses, and responses are still read when nobody
// waits.

// read8 reads 8 bytes at off in B's buffer into the same place in A's.
// (Tests write B's buffer before any request touches it: the race
// detector cannot see the order a round trip over TCP gives.)
func (p *pair) read8(id, off uint64) []rdma.SendWR {
	return []rdma.SendWR{{ID: id, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL:        []rdma.SGE{{Addr: p.mrA.Addr() + off, Length: 8, LKey: p.mrA.LKey()}},
		RemoteAddr: p.mrB.Addr() + off, RKey: p.mrB.RKey()}}
}

// settle runs one READ to completion, after which A's connection to B is
// idle: the next waiter on cqA drives it.
func (p *pair) settle(t *testing.T) {
	t.Helper()
	for i := range p.mrB.Bytes() {
		p.mrB.Bytes()[i] = byte(i*13 + 5)
	}
	require.NoError(t, p.qpA.PostSend(p.read8(100, 0)))
	require.Equal(t, rdma.WCSuccess, waitOne(t, p.cqA).Status)
	q := p.qpA.(*qp)
	deadline := time.Now().Add(5 * time.Second)
	for {
		q.mu.Lock()
		mode := q.rxMode
		q.mu.Unlock()
		if mode == rxIdle {
			return
		}
		require.True(t, time.Now().Before(deadline), "connection never went idle (mode %d)", mode)
		time.Sleep(time.Millisecond)
	}
}

// TestWaiterDrivesConnection: after the first exchange, a READ's response
// is read by the goroutine waiting for its completion, not handed over by
// the background goroutine.
func TestWaiterDrivesConnection(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	p.driveRounds(t, func() rdma.WorkCompletion { return waitOne(t, p.cqA) })
}

// driveRounds READs 8 bytes 50 times, each completion taken by complete,
// and fails unless most were taken by driving the connection. (Not all:
// a request the sender goroutine happens to transmit is left to the
// background goroutine.)
func (p *pair) driveRounds(t *testing.T, complete func() rdma.WorkCompletion) {
	t.Helper()
	const rounds = 50
	q := p.qpA.(*qp)
	driven := 0
	for i := range uint64(rounds) {
		q.mu.Lock()
		gen := q.rxGen
		q.mu.Unlock()
		require.NoError(t, p.qpA.PostSend(p.read8(i, 8*i)))
		wc := complete()
		require.Equal(t, rdma.WCSuccess, wc.Status)
		require.Equal(t, i, wc.ID)
		require.Equal(t, p.mrB.Bytes()[8*i:8*i+8], p.mrA.Bytes()[8*i:8*i+8], "round %d", i)
		q.mu.Lock()
		if q.rxGen != gen {
			driven++
		}
		q.mu.Unlock()
	}
	require.GreaterOrEqual(t, driven, rounds/2, "the connection was driven in %d rounds of %d", driven, rounds)
}

// TestDriverInterruptedByOtherCompletion: a waiter driving the requester
// connection for a slow READ returns as soon as a receive completes on
// the same CQ, and the READ still completes afterwards.
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
			d := cqA.driver
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

// TestDriverCanceled: a waiter driving the connection returns when its
// context ends; the response it did not wait for is read whole by the
// next waiter.
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

// TestIdleConnectionIsRead: a SEND posted on an idle connection, whose
// sender then neither polls nor waits, still gets through an RNR NAK: its
// responses are read by the background goroutine once the janitor finds
// nobody driving the connection.
func TestIdleConnectionIsRead(t *testing.T) {
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
	// which would also have the responses read.
	require.Less(t, time.Since(start), time.Second, "the SEND waited for the transport timer")
	require.Equal(t, rdma.WCSuccess, wc.Status)
	require.Equal(t, uint32(5), wc.Imm)
	require.Positive(t, p.devA.Stats().Resent, "A resent nothing: the NAK was not read")
}

// TestDropIdleConnection: dropping the device's connections fails a queue
// pair whose connection nobody was reading.
func TestDropIdleConnection(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	p.devA.DropConnections()
	deadline := time.Now().Add(5 * time.Second)
	for p.qpA.State() != rdma.QPSErr {
		require.True(t, time.Now().Before(deadline), "queue pair still %v after its connections dropped", p.qpA.State())
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

// TestPollDrivesConnection: Poll applies the responses that have arrived
// on an idle connection itself; one too large to take without blocking is
// left to the background goroutine, and completes all the same.
func TestPollDrivesConnection(t *testing.T) {
	p := newPair(t)
	p.settle(t)
	p.driveRounds(t, func() rdma.WorkCompletion { return pollOne(t, p.cqA) })
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

// TestReadTurnMixedUse completes batches of requests each in a randomly
// chosen way (Wait, Poll, Poll after a pause, Wait with contexts that
// expire first, nothing until the janitor reads), so that the read turn
// passes between waiters, pollers and the background goroutine in every
// order. Every request must complete, READs with the right data.
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
			time.Sleep(janitorTick * 3 / 2) // nobody reads but the janitor's goroutine
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
	t.Logf("%d rounds; by Wait, Poll, Poll after a pause, expiring Waits, janitor: %v", rounds, methods)
}

// TestPollDoesNotAllocate: polling, empty or not, allocates nothing,
// nor does a READ's round trip through the provider on either side.
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
	require.Less(t, perOp(500, roundTrip), 0.1, "allocations per READ posted and polled")

	p.devB.SetDelay(200 * time.Millisecond) // the next READ stays in flight
	require.NoError(t, p.qpA.PostSend(wr))
	require.Less(t, perOp(2000, func() { p.cqA.Poll(wc[:]) }), 0.01, "allocations per empty Poll")
}

// TestPostWhileAnotherWaits: a request posted while another goroutine
// already sleeps in Wait on the CQ (a completion dispatcher) completes in
// a round trip, not after the janitor's ticks.
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
		for deadline := time.Now().Add(5 * time.Second); cqA.sleepers.Load() == 0; time.Sleep(50 * time.Microsecond) {
			require.True(t, time.Now().Before(deadline), "the waiter never slept")
		}
		start := time.Now()
		require.NoError(t, p.qpA.PostSend(wr))
		end, ok := <-done
		require.True(t, ok, "the READ failed")
		took = append(took, end.Sub(start))
	}
	slices.Sort(took)
	require.Less(t, took[rounds/2], janitorTick/2, "median round trip %v: the responses waited for the janitor", took[rounds/2])
}
