package rpc

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// These tests play a hostile or broken client: a raw queue pair that
// connects like a client and then sends whatever it likes. The server
// must close that connection (or answer with a status), never crash,
// wedge or leak, and keep serving well-behaved clients.

// attacker is a raw RC connection to a test server.
type attacker struct {
	dev    *soft.Device
	conn   *rdma.Conn
	cq     rdma.CQ
	mr     rdma.MR
	mem    []byte
	params serverParams
	wcs    [64]rdma.WorkCompletion
	next   int // where the next outgoing message goes, from sendOff
}

const attackerRecvs = 64

func newAttacker(t testing.TB, ts *testServer, postRecvs bool) *attacker {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	a := &attacker{dev: dev, mem: make([]byte, 4<<20)}
	a.mr, err = pd.RegMR(a.mem, rdma.AccessAll)
	require.NoError(t, err)
	a.cq, err = dev.CreateCQ(1 << 14)
	require.NoError(t, err)
	a.conn, err = rdma.Dial(ctxT(t), pd, ts.addr, rdma.ConnParams{
		QP:          rdma.QPConfig{SendCQ: a.cq, RecvCQ: a.cq, MaxSendWR: 4096, MaxRecvWR: attackerRecvs},
		PrivateData: []byte("attacker"),
		Setup: func(qp rdma.QP) error {
			if !postRecvs {
				return nil
			}
			wrs := make([]rdma.RecvWR, attackerRecvs)
			for i := range wrs {
				wrs[i] = rdma.RecvWR{ID: uint64(i), SGL: []rdma.SGE{{Addr: a.mr.Addr() + uint64(i*DefaultInlineSize), Length: DefaultInlineSize, LKey: a.mr.LKey()}}}
			}
			return qp.PostRecv(wrs)
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { a.conn.Close() })
	a.params, err = decodeServerParams(a.conn.PrivateData)
	require.NoError(t, err)
	return a
}

// sendOff is where the attacker's outgoing messages start in its memory.
const sendOff = 1 << 20

// send posts msg as an unsignaled SEND (with imm) and does not wait.
// Each message gets bytes of its own: a buffer may not be reused until
// its send completes, and an unsignaled send never says when that is.
func (a *attacker) send(t testing.TB, op rdma.Opcode, imm uint32, msg []byte) {
	t.Helper()
	if sendOff+a.next+len(msg) > len(a.mem) {
		a.next = 0 // long since sent: the tests send a few KiB in all
	}
	off := sendOff + a.next
	a.next += (len(msg) + 63) &^ 63
	copy(a.mem[off:], msg)
	err := a.conn.QP.PostSend([]rdma.SendWR{{Opcode: op, Imm: imm,
		SGL: []rdma.SGE{{Addr: a.mr.Addr() + uint64(off), Length: uint32(len(msg)), LKey: a.mr.LKey()}}}})
	require.NoError(t, err)
}

func (a *attacker) request(op uint16, length int) []byte {
	return encode(header{Kind: kindRequest, Op: op, RequestID: 1, Length: uint32(length), Limit: DefaultInlineSize}, make([]byte, length))
}

// waitClosed waits until the server has closed the attacker's connection.
func (a *attacker) waitClosed(t testing.TB) {
	t.Helper()
	select {
	case <-a.conn.Done():
	case <-time.After(testWait):
		t.Fatalf("the server did not close the hostile connection within %v", testWait)
	}
}

// waitReply waits for the next reply to arrive at the attacker and
// returns its header.
func (a *attacker) waitReply(t testing.TB) header {
	t.Helper()
	ctx := ctxT(t)
	for {
		n, err := a.cq.Wait(ctx, a.wcs[:])
		require.NoError(t, err)
		for _, wc := range a.wcs[:n] {
			require.Equal(t, rdma.WCSuccess, wc.Status, "completion %+v", wc)
			if wc.Opcode == rdma.WCRecv {
				h, _, err := parseMessage(a.mem[int(wc.ID)*DefaultInlineSize:][:wc.ByteLen])
				require.NoError(t, err)
				return h
			}
		}
	}
}

// requireHealthy checks that the server serves a good client and that,
// once the hostile connections are gone, nothing is left behind.
func requireHealthy(t *testing.T, ts *testServer, good *Client, conns int) {
	t.Helper()
	got, err := good.Call(ctxT(t), opEcho, 1, []byte("still here"))
	require.NoError(t, err)
	require.Equal(t, "still here", string(got))
	waitFor(t, "hostile connections torn down", func() bool { return ts.srv.Stats().Conns == conns })
	// The good call's handler may still be returning after its reply.
	waitFor(t, "handlers returned", func() bool { return ts.srv.Stats().Handlers == 0 })
	require.Zero(t, ts.srv.Stats().LargeBytes, "large buffers still held")
}

func TestHostileMessagesCloseTheConnection(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	good := dialTest(t, ts, ClientConfig{})
	valid := encode(header{Kind: kindRequest, Op: opNull, RequestID: 1, Limit: DefaultInlineSize}, nil)
	for _, tc := range []struct {
		name     string
		protocol bool // counted as a protocol error (else a transport error)
		attack   func(t *testing.T, a *attacker)
	}{
		{"no immediate", true, func(t *testing.T, a *attacker) { a.send(t, rdma.OpSend, 0, valid) }},
		{"slot out of range", true, func(t *testing.T, a *attacker) {
			a.send(t, rdma.OpSendWithImm, makeImm(uint16(a.params.Slots), 0), valid)
		}},
		{"slot 0xffff", true, func(t *testing.T, a *attacker) { a.send(t, rdma.OpSendWithImm, 0xffffffff, valid) }},
		{"bad version", true, func(t *testing.T, a *attacker) {
			m := append([]byte(nil), valid...)
			m[0] = 7
			a.send(t, rdma.OpSendWithImm, 0, m)
		}},
		{"shorter than a header", true, func(t *testing.T, a *attacker) { a.send(t, rdma.OpSendWithImm, 0, valid[:10]) }},
		{"empty message", true, func(t *testing.T, a *attacker) { a.send(t, rdma.OpSendWithImm, 0, nil) }},
		{"length lies", true, func(t *testing.T, a *attacker) {
			a.send(t, rdma.OpSendWithImm, 0, encode(header{Kind: kindRequest, Op: opNull, Length: 100, Limit: DefaultInlineSize}, make([]byte, 10)))
		}},
		{"a reply from the client", true, func(t *testing.T, a *attacker) {
			a.send(t, rdma.OpSendWithImm, 0, encode(header{Kind: kindReply}, nil))
		}},
		{"release of nothing", true, func(t *testing.T, a *attacker) {
			a.send(t, rdma.OpSendWithImm, 0, encode(header{Kind: kindRelease}, nil))
		}},
		{"two requests on one slot", true, func(t *testing.T, a *attacker) {
			blk := encode(header{Kind: kindRequest, Op: opBlock, RequestID: 1, Limit: DefaultInlineSize}, nil)
			a.send(t, rdma.OpSendWithImm, 0, blk)
			ts.waitStarted(t, 1)
			a.send(t, rdma.OpSendWithImm, 0, blk)
		}},
		{"large request with a forged rkey", false, func(t *testing.T, a *attacker) {
			a.send(t, rdma.OpSendWithImm, 0, encode(header{Kind: kindRequest, Flags: flagLarge, Op: opEcho, Length: 100 << 10,
				Limit: DefaultInlineSize, Addr: 0x1000, RKey: 0xdead00}, nil))
		}},
		{"RDMA WRITE into the server", false, func(t *testing.T, a *attacker) {
			require.NoError(t, a.conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpWriteWithImm, Imm: 0,
				SGL: []rdma.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, RemoteAddr: 0x1000, RKey: 1}}))
		}},
		{"RDMA READ of a guessed address", false, func(t *testing.T, a *attacker) {
			require.NoError(t, a.conn.QP.PostSend([]rdma.SendWR{{Opcode: rdma.OpRead,
				SGL: []rdma.SGE{{Addr: a.mr.Addr(), Length: 64, LKey: a.mr.LKey()}}, RemoteAddr: 0x1000, RKey: 0x100}}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := ts.srv.Stats().ProtocolErrors
			a := newAttacker(t, ts, true)
			tc.attack(t, a)
			a.waitClosed(t)
			if tc.protocol {
				require.Equal(t, before+1, ts.srv.Stats().ProtocolErrors)
			}
			requireHealthy(t, ts, good, 1)
		})
	}
}

// Refusals that are the caller's fault but not a protocol violation are
// answered with a status and leave the connection open.
func TestHostileRequestsAnsweredWithStatus(t *testing.T) {
	ts := newTestServer(t, ServerConfig{MaxMessage: 64 << 10})
	good := dialTest(t, ts, ClientConfig{})
	a := newAttacker(t, ts, true)
	for i, tc := range []struct {
		name string
		msg  []byte
		want Status
	}{
		{"oversized large request", encode(header{Kind: kindRequest, Flags: flagLarge, Op: opEcho, Length: 1 << 29,
			Limit: DefaultInlineSize, Addr: 1, RKey: 1}, nil), StatusTooLarge},
		{"unknown op", a.request(4242, 0), StatusUnknownOp},
		{"reply limit below the reply", encode(header{Kind: kindRequest, Op: opSized, Length: 4, Limit: minInline}, sizedReq(0)), StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.send(t, rdma.OpSendWithImm, makeImm(uint16(i), 1), tc.msg)
			require.Equal(t, tc.want, a.waitReply(t).Status)
		})
	}
	select {
	case <-a.conn.Done():
		t.Fatal("the server closed a connection that only made refusable requests")
	default:
	}
	requireHealthy(t, ts, good, 2)
}

// TestFloods: connections that send far more than their slots, or never
// take their replies, cost the server only those connections.
func TestFloods(t *testing.T) {
	ts := newTestServer(t, ServerConfig{Slots: 8})
	good := dialTest(t, ts, ClientConfig{})
	// Both kinds of handler: on a goroutine, and inline on the worker,
	// whose replies the worker posts in batches.
	for _, op := range []struct {
		name string
		op   uint16
	}{{"goroutine handler", opNull}, {"inline handler", opInline}} {
		t.Run("requests beyond the slots, "+op.name, func(t *testing.T) {
			a := newAttacker(t, ts, true)
			// Bounded: each slot is sent 40 requests without waiting.
			for i := range 40 * a.params.Slots {
				a.send(t, rdma.OpSendWithImm, makeImm(uint16(i%a.params.Slots), uint16(i)), a.request(op.op, 0))
			}
			// Either the server answered everything, or it closed the
			// connection for reusing a busy slot; both are fine. A good
			// client is served meanwhile.
			for range 20 {
				_, err := good.Call(ctxT(t), opNull, 1, nil)
				require.NoError(t, err)
			}
			a.conn.Close()
			requireHealthy(t, ts, good, 1)
		})
		t.Run("replies never received, "+op.name, func(t *testing.T) {
			a := newAttacker(t, ts, false)
			for i := range a.params.Slots {
				a.send(t, rdma.OpSendWithImm, makeImm(uint16(i), 1), a.request(op.op, 0))
			}
			// The server's replies meet no receive; after its RNR retries
			// it closes the connection.
			a.waitClosed(t)
			requireHealthy(t, ts, good, 1)
		})
	}
	t.Run("many hostile connections at once", func(t *testing.T) {
		const n = 16
		attackers := make([]*attacker, n)
		for i := range attackers {
			attackers[i] = newAttacker(t, ts, true)
		}
		for i, a := range attackers {
			m := encode(header{Kind: kindRequest, Op: opNull, Length: 7, Limit: DefaultInlineSize}, make([]byte, 3))
			a.send(t, rdma.OpSendWithImm, uint32(i), m)
		}
		for _, a := range attackers {
			a.waitClosed(t)
		}
		requireHealthy(t, ts, good, 1)
	})
}

// TestDisconnectMidCall: a client that goes away while its call runs (or
// while the server READs its large request) leaves nothing behind.
func TestDisconnectMidCall(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	good := dialTest(t, ts, ClientConfig{})
	t.Run("during the handler", func(t *testing.T) {
		a := newAttacker(t, ts, true)
		a.send(t, rdma.OpSendWithImm, 0, a.request(opBlock, 0))
		ts.waitStarted(t, 1)
		// The client process dies: its connection manager link and its
		// NIC go away. The handler's context ends; it returns.
		a.conn.Close()
		a.dev.Close()
		requireHealthy(t, ts, good, 1)
	})
	t.Run("during a large request's READ", func(t *testing.T) {
		a := newAttacker(t, ts, true)
		// A large request whose buffer the server READs while the
		// attacker's device delays every response and then closes.
		a.dev.SetDelay(50 * time.Millisecond)
		a.send(t, rdma.OpSendWithImm, 0, encode(header{Kind: kindRequest, Flags: flagLarge, Op: opEcho, Length: 512 << 10,
			Limit: DefaultInlineSize, Addr: a.mr.Addr(), RKey: a.mr.RKey()}, nil))
		waitFor(t, "the server READs", func() bool { return ts.srv.Stats().LargeBytes > 0 })
		a.conn.Close()
		a.dev.Close()
		requireHealthy(t, ts, good, 1)
	})
}

// TestRandomFrames sends mutated frames, one connection each, from a
// fixed seed: whatever the server does with each, it stays healthy.
func TestRandomFrames(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	good := dialTest(t, ts, ClientConfig{})
	rng := rand.New(rand.NewPCG(12, 34))
	frames := 60
	if testing.Short() {
		frames = 10
	}
	for i := range frames {
		a := newAttacker(t, ts, true)
		// Any op but opBlock, whose valid request would wait forever.
		ops := []uint16{opEcho, opNull, opFail, opPeer, opPanic, opBusy, 999}
		msg := a.request(ops[rng.IntN(len(ops))], rng.IntN(64))
		for range 1 + rng.IntN(4) {
			msg[rng.IntN(len(msg))] = byte(rng.Uint32())
		}
		imm := rng.Uint32()
		if rng.IntN(2) == 0 {
			imm &= 0x0000ffff
			imm %= uint32(a.params.Slots)
		}
		a.send(t, rdma.OpSendWithImm, imm, msg)
		// A valid frame gets a reply; anything else closes the
		// connection. Either way the server must finish with it.
		select {
		case <-a.conn.Done():
		case <-replyArrived(a):
		case <-time.After(testWait):
			t.Fatalf("frame %d (%x, imm %#x): neither a reply nor a closed connection", i, msg, imm)
		}
		a.conn.Close()
	}
	requireHealthy(t, ts, good, 1)
}

// replyArrived is closed when a receive completes at the attacker.
func replyArrived(a *attacker) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		defer close(ch)
		ctx, cancel := context.WithTimeout(context.Background(), testWait)
		defer cancel()
		for {
			n, err := a.cq.Wait(ctx, a.wcs[:])
			if err != nil {
				return
			}
			for _, wc := range a.wcs[:n] {
				if wc.Opcode == rdma.WCRecv || wc.Status != rdma.WCSuccess {
					return
				}
			}
		}
	}()
	return ch
}
