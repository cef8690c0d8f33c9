package soft

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
)

// pair is two connected queue pairs on two soft devices, each with a
// registered buffer, for the provider's own tests. The provider-agnostic
// behaviour is tested by rdmatest (conformance_test.go).
type pair struct {
	devA, devB *Device
	cqA, cqB   rdma.CQ
	qpA, qpB   rdma.QP
	mrA, mrB   rdma.MR
}

func newPair(t testing.TB) *pair {
	t.Helper()
	p := &pair{}
	var err error
	p.devA, err = Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { p.devA.Close() })
	p.devB, err = Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { p.devB.Close() })
	pdA, err := p.devA.AllocPD()
	require.NoError(t, err)
	pdB, err := p.devB.AllocPD()
	require.NoError(t, err)
	p.cqA, err = p.devA.CreateCQ(256)
	require.NoError(t, err)
	p.cqB, err = p.devB.CreateCQ(256)
	require.NoError(t, err)
	bufA := make([]byte, 1<<20)
	bufB := make([]byte, 1<<20)
	p.mrA, err = pdA.RegMR(bufA, rdma.AccessAll)
	require.NoError(t, err)
	p.mrB, err = pdB.RegMR(bufB, rdma.AccessAll)
	require.NoError(t, err)

	ln, err := rdma.Listen(pdB, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan *rdma.Conn, 1)
	go func() {
		c, err := ln.Accept(ctx, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: p.cqB, RecvCQ: p.cqB}})
		if err != nil {
			t.Errorf("accept: %v", err)
		}
		accepted <- c
	}()
	c, err := rdma.Dial(ctx, pdA, ln.Addr().String(), rdma.ConnParams{QP: rdma.QPConfig{SendCQ: p.cqA, RecvCQ: p.cqA}})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	p.qpA = c.QP
	cb := <-accepted
	require.NotNil(t, cb)
	t.Cleanup(func() { cb.Close() })
	p.qpB = cb.QP
	return p
}

func waitOne(t testing.TB, cq rdma.CQ) rdma.WorkCompletion {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]rdma.WorkCompletion
	n, err := cq.Wait(ctx, wc[:])
	require.NoError(t, err)
	require.Equal(t, 1, n)
	return wc[0]
}

func TestSmoke(t *testing.T) {
	p := newPair(t)
	copy(p.mrA.Bytes(), "hello, world")
	require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{
		ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
		SGL:        []rdma.SGE{{Addr: p.mrA.Addr(), Length: 12, LKey: p.mrA.LKey()}},
		RemoteAddr: p.mrB.Addr() + 100, RKey: p.mrB.RKey(),
	}}))
	wc := waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, wc.Status)
	require.Equal(t, "hello, world", string(p.mrB.Bytes()[100:112]))

	require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{
		ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled,
		SGL:        []rdma.SGE{{Addr: p.mrA.Addr() + 1000, Length: 12, LKey: p.mrA.LKey()}},
		RemoteAddr: p.mrB.Addr() + 100, RKey: p.mrB.RKey(),
	}}))
	wc = waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, wc.Status, wc.Status.String())
	require.Equal(t, "hello, world", string(p.mrA.Bytes()[1000:1012]))

	require.NoError(t, p.qpB.PostRecv([]rdma.RecvWR{{ID: 9, SGL: []rdma.SGE{{Addr: p.mrB.Addr() + 4096, Length: 100, LKey: p.mrB.LKey()}}}}))
	require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{
		ID: 3, Opcode: rdma.OpSendWithImm, Flags: rdma.SendSignaled, Imm: 77,
		SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: 5, LKey: p.mrA.LKey()}},
	}}))
	wc = waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, wc.Status)
	wc = waitOne(t, p.cqB)
	require.Equal(t, rdma.WCSuccess, wc.Status)
	require.Equal(t, uint64(9), wc.ID)
	require.Equal(t, uint32(77), wc.Imm)
	require.Equal(t, uint32(5), wc.ByteLen)
	require.Equal(t, "hello", string(p.mrB.Bytes()[4096:4101]))

	require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{
		ID: 4, Opcode: rdma.OpAtomicFetchAndAdd, Flags: rdma.SendSignaled, CompareAdd: 5,
		SGL:        []rdma.SGE{{Addr: p.mrA.Addr() + 2048, Length: 8, LKey: p.mrA.LKey()}},
		RemoteAddr: p.mrB.Addr() + 8192, RKey: p.mrB.RKey(),
	}}))
	wc = waitOne(t, p.cqA)
	require.Equal(t, rdma.WCSuccess, wc.Status)
}

// TestReceiverClosesAfterReceive: a receiver that destroys its queue pair
// the moment its receive completes must not make the sender's SEND fail.
// A NIC acknowledges on its own; the soft provider defers ACKs to batch
// them, so it must still owe and send the ACK before the receiver sees
// the completion.
func TestReceiverClosesAfterReceive(t *testing.T) {
	for i := range 30 {
		p := newPair(t)
		require.NoError(t, p.qpB.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{{Addr: p.mrB.Addr(), Length: 64, LKey: p.mrB.LKey()}}}}))
		require.NoError(t, p.qpA.PostSend([]rdma.SendWR{{ID: 2, Opcode: rdma.OpSendWithImm, Flags: rdma.SendSignaled, Imm: 7,
			SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: 8, LKey: p.mrA.LKey()}}}}))
		require.Equal(t, rdma.WCSuccess, waitOne(t, p.cqB).Status)
		require.NoError(t, p.qpB.Close())
		wc := waitOne(t, p.cqA)
		require.Equal(t, rdma.WCSuccess, wc.Status, "round %d: the SEND the receiver got must succeed", i)
	}
}

// TestUnsignaledRequestsHoldSlots: unsignaled requests keep their send
// queue slots until a later signaled request completes, as on a NIC, so
// that code that never signals runs out of slots here as it would there.
func TestUnsignaledRequestsHoldSlots(t *testing.T) {
	p := newPair(t)
	write := func(id uint64, flags rdma.SendFlags) []rdma.SendWR {
		return []rdma.SendWR{{ID: id, Opcode: rdma.OpWrite, Flags: flags,
			SGL: []rdma.SGE{{Addr: p.mrA.Addr(), Length: 8, LKey: p.mrA.LKey()}}, RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}}
	}
	depth := p.qpA.Caps().MaxSendWR
	for i := range depth {
		require.NoError(t, p.qpA.PostSend(write(uint64(i), 0)))
	}
	// Every one of them executes and is acknowledged...
	q := p.qpA.(*qp)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		q.mu.Lock()
		done := q.sqHead == q.sqTail
		q.mu.Unlock()
		if done {
			break
		}
		require.True(t, time.Now().Before(deadline), "the unsignaled WRITEs never completed")
	}
	// ...yet their slots stay taken.
	err := p.qpA.PostSend(write(999, rdma.SendSignaled))
	require.ErrorIs(t, err, rdma.ErrQueueFull, "unsignaled requests that never saw a signaled completion still hold their slots")

	// A signaled request frees every slot before it with its own.
	p2 := newPair(t)
	for i := range depth - 1 {
		require.NoError(t, p2.qpA.PostSend([]rdma.SendWR{{ID: uint64(i), Opcode: rdma.OpWrite,
			SGL: []rdma.SGE{{Addr: p2.mrA.Addr(), Length: 8, LKey: p2.mrA.LKey()}}, RemoteAddr: p2.mrB.Addr(), RKey: p2.mrB.RKey()}}))
	}
	require.NoError(t, p2.qpA.PostSend([]rdma.SendWR{{ID: 500, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: p2.mrA.Addr(), Length: 8, LKey: p2.mrA.LKey()}}, RemoteAddr: p2.mrB.Addr(), RKey: p2.mrB.RKey()}}))
	require.Equal(t, uint64(500), waitOne(t, p2.cqA).ID)
	for i := range depth {
		require.NoError(t, p2.qpA.PostSend([]rdma.SendWR{{ID: uint64(1000 + i), Opcode: rdma.OpWrite,
			SGL: []rdma.SGE{{Addr: p2.mrA.Addr(), Length: 8, LKey: p2.mrA.LKey()}}, RemoteAddr: p2.mrB.Addr(), RKey: p2.mrB.RKey()}}),
			"request %d after a signaled completion freed the queue", i)
	}
}
