package soft

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
)

func TestFrameHeaderRoundTrip(t *testing.T) {
	tests := map[string]frameHeader{
		"write":      {Type: frameWrite, PSN: 0xfffffff0, Length: 4096, RKey: 0x1234, RemoteAddr: 0xdeadbeef000},
		"send imm":   {Type: frameSendImm, Flags: flagHasImm | flagSolicited, PSN: 1, Length: 1, Imm: 0xabcdef01},
		"cas":        {Type: frameCmpSwp, PSN: 2, Length: 8, RKey: 1, RemoteAddr: 8, CompareAdd: 1, Swap: 2},
		"nak":        {Type: frameNak, PSN: 3, Code: uint8(nakRemoteAccess)},
		"rnr":        {Type: frameRNRNak, PSN: 4, Code: 31},
		"atomic ack": {Type: frameAtomicResp, PSN: 5, CompareAdd: 99},
	}
	for name, h := range tests {
		t.Run(name, func(t *testing.T) {
			var b [frameHeaderSize]byte
			h.encode(b[:])
			var got frameHeader
			require.NoError(t, got.decode(b[:]))
			require.Equal(t, h, got)
		})
	}
}

func TestFrameHeaderRejects(t *testing.T) {
	good := func() []byte {
		var b [frameHeaderSize]byte
		h := frameHeader{Type: frameWrite, Length: 8}
		h.encode(b[:])
		return b[:]
	}
	tests := map[string]func(b []byte) []byte{
		"short":            func(b []byte) []byte { return b[:frameHeaderSize-1] },
		"version":          func(b []byte) []byte { b[0] = 2; return b },
		"type zero":        func(b []byte) []byte { b[1] = 0; return b },
		"type unknown":     func(b []byte) []byte { b[1] = byte(frameTypeEnd); return b },
		"flags":            func(b []byte) []byte { b[2] = 0x80; return b },
		"reserved":         func(b []byte) []byte { b[31] = 1; return b },
		"huge length":      func(b []byte) []byte { b[8] = 0xff; return b },
		"atomic length":    func(b []byte) []byte { b[1] = byte(frameFetchAdd); b[11] = 9; return b },
		"ack with payload": func(b []byte) []byte { b[1] = byte(frameAck); return b },
		"nak code":         func(b []byte) []byte { b[1] = byte(frameNak); b[11] = 0; b[3] = 9; return b },
		"rnr timer":        func(b []byte) []byte { b[1] = byte(frameRNRNak); b[11] = 0; b[3] = 32; return b },
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			var h frameHeader
			err := h.decode(mutate(good()))
			require.ErrorIs(t, err, rdma.ErrProtocol)
		})
	}
}

func FuzzFrameHeader(f *testing.F) {
	var b [frameHeaderSize]byte
	(&frameHeader{Type: frameRead, PSN: 7, Length: 64, RKey: 3, RemoteAddr: 4096}).encode(b[:])
	f.Add(b[:])
	f.Add(make([]byte, frameHeaderSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		var h frameHeader
		if err := h.decode(in); err != nil {
			require.ErrorIs(t, err, rdma.ErrProtocol)
			return
		}
		// What decodes is sane and encodes back to the same bytes.
		require.LessOrEqual(t, h.Length, uint32(maxMsgSize))
		var out [frameHeaderSize]byte
		h.encode(out[:])
		require.Equal(t, in[:frameHeaderSize], out[:])
	})
}

func FuzzHello(f *testing.F) {
	f.Add((&hello{SrcQPN: 1, DstQPN: 2, SrcAddr: "127.0.0.1:1234"}).marshal())
	f.Add(marshalHelloAnswer(helloBusy))
	f.Fuzz(func(t *testing.T, in []byte) {
		if h, err := readHello(bytes.NewReader(in)); err == nil {
			require.LessOrEqual(t, len(h.SrcAddr), maxHelloAddr)
			h2, err := readHello(bytes.NewReader(h.marshal()))
			require.NoError(t, err)
			require.Equal(t, h, h2)
		} else if !errors.Is(err, rdma.ErrProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if s, err := readHelloAnswer(bytes.NewReader(in)); err == nil {
			require.LessOrEqual(t, s, helloBusy)
		}
	})
}

// guardedRegion registers the middle of a buffer whose edges hold a known
// pattern, to prove that nothing writes outside a region.
type guardedRegion struct {
	buf []byte
	mr  rdma.MR
}

const guardSize = 4096

func newGuardedRegion(t testing.TB, p rdma.PD, size int) *guardedRegion {
	buf := make([]byte, size+2*guardSize)
	for i := range buf {
		buf[i] = 0xa5
	}
	mr, err := p.RegMR(buf[guardSize:guardSize+size], rdma.AccessAll)
	require.NoError(t, err)
	return &guardedRegion{buf: buf, mr: mr}
}

func (g *guardedRegion) checkGuards(t testing.TB) {
	t.Helper()
	n := len(g.buf)
	for i := 0; i < guardSize; i++ {
		if g.buf[i] != 0xa5 || g.buf[n-1-i] != 0xa5 {
			t.Fatalf("a write landed outside the memory region (guard byte %d)", i)
		}
	}
}

// fuzzDevice opens the device, PD, CQ and guarded region a stream fuzzer
// shares between its inputs.
func fuzzDevice(f *testing.F, size int) (*Device, rdma.PD, rdma.CQ, *guardedRegion) {
	dev, err := Open(rdma.DeviceConfig{})
	require.NoError(f, err)
	f.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(f, err)
	cq, err := dev.CreateCQ(1 << 16)
	require.NoError(f, err)
	return dev, pd, cq, newGuardedRegion(f, pd, size)
}

// hostileFrames builds a plausible request stream for the seeds of the
// stream fuzzers: the fuzzer mutates it into hostile ones.
func hostileFrames(rkey uint32, addr uint64, psn uint32) []byte {
	var out []byte
	add := func(h frameHeader, payload []byte) {
		var b [frameHeaderSize]byte
		h.encode(b[:])
		out = append(out, b[:]...)
		out = append(out, payload...)
	}
	add(frameHeader{Type: frameWrite, PSN: psn, Length: 16, RKey: rkey, RemoteAddr: addr}, make([]byte, 16))
	add(frameHeader{Type: frameRead, PSN: psn + 1, Length: 32, RKey: rkey, RemoteAddr: addr + 64}, nil)
	add(frameHeader{Type: frameFetchAdd, PSN: psn + 2, Length: 8, RKey: rkey, RemoteAddr: addr + 128, CompareAdd: 1}, nil)
	add(frameHeader{Type: frameSend, PSN: psn + 3, Length: 4}, []byte("ping"))
	return out
}

// FuzzResponderStream feeds arbitrary bytes to a queue pair's responder as
// if a peer sent them: it must never panic, hang, or touch memory outside
// the registered region.
func FuzzResponderStream(f *testing.F) {
	const psn = 100
	f.Add(hostileFrames(0, 0, psn), uint16(0))
	f.Add(hostileFrames(0, 0, psn), uint16(4090))
	f.Add([]byte{1, 2, 3}, uint16(1))
	dev, pd, cq, region := fuzzDevice(f, 8192)
	f.Fuzz(func(t *testing.T, stream []byte, offset uint16) {
		// Point the seed frames at the region: the fuzzer mutates the
		// key and address from there.
		mr := region.mr
		if len(stream) >= frameHeaderSize {
			var h frameHeader
			if h.decode(stream) == nil && h.RKey == 0 {
				stream = append([]byte(nil), stream...)
				copy(stream, hostileFrames(mr.RKey(), mr.Addr()+uint64(offset), psn))
			}
		}
		q := newFuzzQP(t, pd, cq, psn)
		defer q.Close()
		q.PostRecv([]rdma.RecvWR{{ID: 1, SGL: []rdma.SGE{{Addr: mr.Addr() + 8000, Length: 192, LKey: mr.LKey()}}}})
		local, peer := net.Pipe()
		c := dev.track(local)
		status, r := q.(*qp).attachResponder(c, &hello{SrcQPN: 99, SrcAddr: "fuzz"})
		require.Equal(t, helloOK, status)
		done := make(chan struct{})
		go func() { r.run(); close(done) }()
		go io.Copy(io.Discard, peer)
		peer.SetWriteDeadline(time.Now().Add(2 * time.Second))
		peer.Write(stream)
		peer.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("responder did not stop after its peer closed")
		}
		region.checkGuards(t)
		drain(cq)
	})
}

// newFuzzQP returns a queue pair in RTR whose peer is QPN 99 at "fuzz".
func newFuzzQP(t testing.TB, pd rdma.PD, cq rdma.CQ, psn uint32) rdma.QP {
	q, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq})
	require.NoError(t, err)
	require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSInit, Access: rdma.AccessRemoteRead | rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic}))
	require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSRTR, Remote: rdma.Endpoint{QPN: 99, PSN: psn, Addr: "fuzz"}}))
	return q
}

func drain(cq rdma.CQ) {
	var wc [64]rdma.WorkCompletion
	for {
		if n, err := cq.Poll(wc[:]); n == 0 || err != nil {
			return
		}
	}
}

// FuzzRequesterStream feeds arbitrary bytes to a queue pair's requester
// as if they were the responses to its outstanding READ, WRITE and atomic:
// never a panic, a hang, or a write outside the local region.
func FuzzRequesterStream(f *testing.F) {
	const psn = 500
	seed := func(frames ...frameHeader) []byte {
		var out []byte
		for _, h := range frames {
			var b [frameHeaderSize]byte
			h.encode(b[:])
			out = append(out, b[:]...)
			if h.Type == frameReadResp {
				out = append(out, make([]byte, h.Length)...)
			}
		}
		return out
	}
	f.Add(seed(frameHeader{Type: frameAck, PSN: psn}, frameHeader{Type: frameReadResp, PSN: psn + 1, Length: 64}, frameHeader{Type: frameAtomicResp, PSN: psn + 2, CompareAdd: 7}))
	f.Add(seed(frameHeader{Type: frameRNRNak, PSN: psn, Code: 1}))
	f.Add(seed(frameHeader{Type: frameNak, PSN: psn + 1, Code: uint8(nakRemoteAccess)}))
	f.Add(seed(frameHeader{Type: frameReadResp, PSN: psn + 1, Length: 1 << 20}))
	dev, pd, cq, region := fuzzDevice(f, 4096)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(f, err)
	f.Cleanup(func() { ln.Close() })
	f.Fuzz(func(t *testing.T, stream []byte) {
		mr := region.mr
		qi, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq})
		require.NoError(t, err)
		defer qi.Close()
		q := qi.(*qp)
		q.psn, q.nextPSN = psn, psn
		require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSInit}))
		require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSRTR, Remote: rdma.Endpoint{QPN: 99, Addr: "fuzz"}}))
		require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSRTS, Timeout: 14, RetryCount: 1, RNRRetry: 1}))
		// A TCP connection, so that Poll can drive it (rx.go): half
		// the streams are read by Poll, half by the background goroutine.
		local, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		peer, err := ln.Accept()
		require.NoError(t, err)
		byPoll := len(stream)%2 == 0
		c := dev.track(local)
		q.mu.Lock()
		q.useConnLocked(c)
		if byPoll {
			q.rxMode = rxIdle
		}
		q.mu.Unlock()
		go io.Copy(io.Discard, peer)
		sge := func(off uint64, n uint32) []rdma.SGE {
			return []rdma.SGE{{Addr: mr.Addr() + off, Length: n, LKey: mr.LKey()}}
		}
		require.NoError(t, q.PostSend([]rdma.SendWR{
			{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: sge(0, 16), RKey: 1},
			{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: sge(100, 64), RKey: 1},
			{ID: 3, Opcode: rdma.OpAtomicFetchAndAdd, Flags: rdma.SendSignaled, SGL: sge(4088, 8), RKey: 1},
		}))
		// Once every request has its response, nobody reads the rest
		// of the stream (see rx.go): write it from a goroutine, which
		// the queue pair's Close ends.
		stream = bytes.Clone(stream)
		go func() {
			peer.SetWriteDeadline(time.Now().Add(2 * time.Second))
			peer.Write(stream)
			peer.Close()
		}()
		// However the stream ended, the queue pair must settle: done
		// or in error, never stuck.
		deadline := time.Now().Add(10 * time.Second)
		var wc [4]rdma.WorkCompletion
		for {
			q.mu.Lock()
			settled := q.sqHead == q.sqTail
			q.mu.Unlock()
			if settled {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("requester did not settle after its connection closed")
			}
			if byPoll {
				cq.Poll(wc[:])
			}
			time.Sleep(100 * time.Microsecond)
		}
		region.checkGuards(t)
		drain(cq)
	})
}
