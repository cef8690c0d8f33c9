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
		"write":        {Type: frameWrite, PSN: 0xfffff0, Length: 4096, RKey: 0x1234, RemoteAddr: 0xdeadbeef000},
		"send imm":     {Type: frameSendImm, Flags: flagHasImm | flagSolicited, PSN: 1, Length: 1, Imm: 0xabcdef01},
		"send and ack": {Type: frameSend, Flags: flagAck, PSN: 9, Length: 8, AckPSN: 0xffffff},
		"cas":          {Type: frameCmpSwp, PSN: 2, Length: 8, RKey: 1, RemoteAddr: 8, CompareAdd: 1, Swap: 2},
		"nak":          {Type: frameNak, PSN: 3, Code: uint8(nakRemoteAccess)},
		"rnr":          {Type: frameRNRNak, PSN: 4, Code: 31},
		"atomic ack":   {Type: frameAtomicResp, PSN: 5, CompareAdd: 99, Flags: flagAck, AckPSN: 4},
		"ack":          {Type: frameAck, Flags: flagAck, AckPSN: 77},
		"read tail":    {Type: frameReadResp, PSN: 6, Length: readTailMax, RemoteAddr: 1 << 20},
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

func TestSetAck(t *testing.T) {
	var b [frameHeaderSize]byte
	(&frameHeader{Type: frameReadResp, PSN: 3, Length: 8}).encode(b[:])
	setAck(b[:], 0x123456)
	var h frameHeader
	require.NoError(t, h.decode(b[:]))
	require.Equal(t, frameHeader{Type: frameReadResp, PSN: 3, Length: 8, Flags: flagAck, AckPSN: 0x123456}, h)
}

func TestFrameHeaderRejects(t *testing.T) {
	good := func() []byte {
		var b [frameHeaderSize]byte
		h := frameHeader{Type: frameWrite, Length: 8}
		h.encode(b[:])
		return b[:]
	}
	tests := map[string]func(b []byte) []byte{
		"short":             func(b []byte) []byte { return b[:frameHeaderSize-1] },
		"version 1":         func(b []byte) []byte { b[0] = 1; return b },
		"type zero":         func(b []byte) []byte { b[1] = 0; return b },
		"type unknown":      func(b []byte) []byte { b[1] = byte(frameTypeEnd); return b },
		"flags":             func(b []byte) []byte { b[2] = 0x80; return b },
		"ack without flag":  func(b []byte) []byte { b[15] = 1; return b },
		"huge length":       func(b []byte) []byte { b[8] = 0xff; return b },
		"atomic length":     func(b []byte) []byte { b[1] = byte(frameFetchAdd); b[11] = 9; return b },
		"ack with payload":  func(b []byte) []byte { b[1] = byte(frameAck); b[2] = flagAck; return b },
		"ack without ack":   func(b []byte) []byte { b[1] = byte(frameAck); b[11] = 0; return b },
		"nak code":          func(b []byte) []byte { b[1] = byte(frameNak); b[11] = 0; b[3] = 9; return b },
		"rnr timer":         func(b []byte) []byte { b[1] = byte(frameRNRNak); b[11] = 0; b[3] = 32; return b },
		"read data too far": func(b []byte) []byte { b[1] = byte(frameReadResp); b[27] = 0x40; return b },
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
	(&frameHeader{Type: frameSendImm, Flags: flagAck | flagHasImm, PSN: 7, Length: 8, AckPSN: 6, Imm: 1}).encode(b[:])
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
		if h.Flags&flagAck == 0 {
			require.Zero(t, h.AckPSN)
		}
		var out [frameHeaderSize]byte
		h.encode(out[:])
		require.Equal(t, in[:frameHeaderSize], out[:])
	})
}

func TestHelloRoundTrip(t *testing.T) {
	h := hello{SrcQPN: 0xabcdef, DstQPN: 2, DstSecret: [rdma.SecretSize]byte{1, 15: 2}, SrcAddr: "10.0.0.1:4791"}
	got, err := readHello(bytes.NewReader(h.marshal()))
	require.NoError(t, err)
	require.Equal(t, &h, got)
	a := helloAnswer{Status: helloOK, Proof: [rdma.SecretSize]byte{3: 9}}
	gotA, err := readHelloAnswer(bytes.NewReader(a.marshal()))
	require.NoError(t, err)
	require.Equal(t, &a, gotA)
	// A refusal carries no proof.
	bad := helloAnswer{Status: helloWrongPeer, Proof: [rdma.SecretSize]byte{1}}
	_, err = readHelloAnswer(bytes.NewReader(bad.marshal()))
	require.ErrorIs(t, err, rdma.ErrProtocol)
	// Version 1's hello is refused.
	old := h.marshal()
	old[3] = 1
	_, err = readHello(bytes.NewReader(old))
	require.ErrorIs(t, err, rdma.ErrProtocol)
}

func FuzzHello(f *testing.F) {
	f.Add((&hello{SrcQPN: 1, DstQPN: 2, DstSecret: [rdma.SecretSize]byte{7}, SrcAddr: "127.0.0.1:1234"}).marshal())
	f.Add((&helloAnswer{Status: helloOK, Proof: [rdma.SecretSize]byte{1}}).marshal())
	f.Add((&helloAnswer{Status: helloBusy}).marshal())
	f.Fuzz(func(t *testing.T, in []byte) {
		if h, err := readHello(bytes.NewReader(in)); err == nil {
			require.LessOrEqual(t, len(h.SrcAddr), maxHelloAddr)
			h2, err := readHello(bytes.NewReader(h.marshal()))
			require.NoError(t, err)
			require.Equal(t, h, h2)
		} else if !errors.Is(err, rdma.ErrProtocol) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		if a, err := readHelloAnswer(bytes.NewReader(in)); err == nil {
			require.LessOrEqual(t, a.Status, helloBusy)
			a2, err := readHelloAnswer(bytes.NewReader(a.marshal()))
			require.NoError(t, err)
			require.Equal(t, a, a2)
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

func newGuardedRegion(t testing.TB, p rdma.PD, size int, access rdma.Access) *guardedRegion {
	buf := make([]byte, size+2*guardSize)
	for i := range buf {
		buf[i] = 0xa5
	}
	mr, err := p.RegMR(buf[guardSize:guardSize+size], access)
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

// Seeds of the link fuzzer: the fuzzed queue pair's peer is QPN 99 with
// first PSN peerPSN; the fuzzed queue pair's own requests start at
// ownPSN.
const (
	peerPSN = 100
	ownPSN  = 500
)

// linkSeed is a plausible stream from the peer: its requests to the
// fuzzed queue pair, interleaved with responses to the fuzzed queue
// pair's own requests (WRITE, READ of 64 bytes, FETCH_AND_ADD, SEND), some
// acknowledgements riding on requests. The fuzzer mutates it into
// hostile ones; keys and addresses are pointed at the regions per input:
// the peer WRITEs and FETCH_AND_ADDs at wkey/waddr, READs at rkey/raddr.
func linkSeed(wkey uint32, waddr uint64, rkey uint32, raddr uint64) []byte {
	var out []byte
	add := func(h frameHeader, payload []byte) {
		var b [frameHeaderSize]byte
		h.encode(b[:])
		out = append(out, b[:]...)
		out = append(out, payload...)
	}
	add(frameHeader{Type: frameWrite, PSN: peerPSN, Length: 16, RKey: wkey, RemoteAddr: waddr}, make([]byte, 16))
	add(frameHeader{Type: frameRead, PSN: peerPSN + 1, Length: 32, RKey: rkey, RemoteAddr: raddr + 64, Flags: flagAck, AckPSN: ownPSN}, nil)
	add(frameHeader{Type: frameReadResp, PSN: ownPSN + 1, Length: 64}, make([]byte, 64))
	add(frameHeader{Type: frameFetchAdd, PSN: peerPSN + 2, Length: 8, RKey: wkey, RemoteAddr: waddr + 128, CompareAdd: 1}, nil)
	add(frameHeader{Type: frameAtomicResp, PSN: ownPSN + 2, CompareAdd: 7}, nil)
	add(frameHeader{Type: frameSendImm, PSN: peerPSN + 3, Length: 4, Flags: flagHasImm | flagAck, AckPSN: ownPSN + 3, Imm: 5}, []byte("ping"))
	return out
}

// FuzzLinkStream feeds arbitrary bytes to a queue pair's link as if its
// peer sent them, while the queue pair has its own requests in flight and
// receives posted: requests and responses, in any order, cut anywhere.
// It must never panic, hang, or touch memory outside the registered
// regions, and the queue pair must settle: everything it posted
// completes, successfully or not.
//
// The peer may write one region (remote write and atomics) and read
// another; the queue pair's own buffers are a third, local only. No
// memory is then both written by the link's reader and read by its
// writer, which the race detector would report: a peer writing memory
// this side is sending from, or a READ whose data a later WRITE
// overwrites before the response goes out, are races of the
// application's making, as on a NIC, not of the provider's.
func FuzzLinkStream(f *testing.F) {
	f.Add(linkSeed(0, 0, 0, 0), uint16(0))
	f.Add(linkSeed(0, 0, 0, 0), uint16(4090))
	f.Add(linkSeed(0, 0, 0, 0)[:200], uint16(8))
	f.Add([]byte{2, 3, 4}, uint16(1))
	dev, err := Open(rdma.DeviceConfig{})
	require.NoError(f, err)
	f.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(f, err)
	cq, err := dev.CreateCQ(1 << 16)
	require.NoError(f, err)
	writable := newGuardedRegion(f, pd, 8192, rdma.AccessLocalWrite|rdma.AccessRemoteWrite|rdma.AccessRemoteAtomic)
	readable := newGuardedRegion(f, pd, 8192, rdma.AccessRemoteRead)
	own := newGuardedRegion(f, pd, 8192, rdma.AccessLocalWrite)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(f, err)
	f.Cleanup(func() { ln.Close() })
	f.Fuzz(func(t *testing.T, stream []byte, offset uint16) {
		// Point the seed's frames at the regions: the fuzzer mutates the
		// keys and addresses from there.
		if len(stream) >= frameHeaderSize {
			var h frameHeader
			if h.decode(stream) == nil && h.RKey == 0 {
				stream = bytes.Clone(stream)
				w, r := writable.mr, readable.mr
				seed := linkSeed(w.RKey(), w.Addr()+uint64(offset%8192), r.RKey(), r.Addr()+uint64(offset%8192))
				copy(stream, seed[:min(len(seed), len(stream))])
			}
		}
		qi, err := pd.CreateQP(rdma.QPConfig{SendCQ: cq, RecvCQ: cq})
		require.NoError(t, err)
		defer qi.Close()
		q := qi.(*qp)
		q.psn, q.nextPSN = ownPSN, ownPSN
		require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSInit, Access: rdma.AccessRemoteRead | rdma.AccessRemoteWrite | rdma.AccessRemoteAtomic}))
		// "0fuzz" sorts before the device's address: the fuzzed queue
		// pair accepts rather than dials (qp.dialsPeer).
		require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSRTR, Remote: rdma.Endpoint{QPN: 99, PSN: peerPSN, Addr: "0fuzz"}}))
		require.NoError(t, q.Modify(rdma.QPAttr{State: rdma.QPSRTS, Timeout: 14, RetryCount: 1, RNRRetry: 1}))
		mr := own.mr
		sge := func(off uint64, n uint32) []rdma.SGE {
			return []rdma.SGE{{Addr: mr.Addr() + off, Length: n, LKey: mr.LKey()}}
		}
		require.NoError(t, q.PostRecv([]rdma.RecvWR{{ID: 10, SGL: sge(6000, 192)}, {ID: 11, SGL: sge(6200, 64)}}))
		require.NoError(t, q.PostSend([]rdma.SendWR{
			{ID: 1, Opcode: rdma.OpWrite, Flags: rdma.SendSignaled, SGL: sge(0, 16), RKey: 1},
			{ID: 2, Opcode: rdma.OpRead, Flags: rdma.SendSignaled, SGL: sge(100, 64), RKey: 1},
			{ID: 3, Opcode: rdma.OpAtomicFetchAndAdd, Flags: rdma.SendSignaled, SGL: sge(4088, 8), RKey: 1},
			{ID: 4, Opcode: rdma.OpSend, Flags: rdma.SendSignaled, SGL: sge(200, 8)},
		}))
		local, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		peer, err := ln.Accept()
		require.NoError(t, err)
		require.True(t, dev.track(local))
		// Half the streams are read by CQ.Poll (a driver), half by the
		// link's background goroutine.
		byPoll := len(stream)%2 == 0
		q.mu.Lock()
		q.attachLinkLocked(local)
		if byPoll {
			q.link.mode = rxIdle
		}
		q.mu.Unlock()
		go io.Copy(io.Discard, peer)
		stream = bytes.Clone(stream)
		go func() {
			peer.SetWriteDeadline(time.Now().Add(2 * time.Second))
			peer.Write(stream)
			peer.Close()
		}()
		// However the stream ends (the peer closes), the queue pair
		// settles: everything completes, or fails and is flushed.
		deadline := time.Now().Add(10 * time.Second)
		var wc [8]rdma.WorkCompletion
		for {
			q.mu.Lock()
			settled := q.sqHead == q.sqTail && q.rqHead == q.rqTail && q.placing == 0
			q.mu.Unlock()
			if settled {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("queue pair did not settle after its link closed")
			}
			if byPoll {
				cq.Poll(wc[:])
			}
			time.Sleep(100 * time.Microsecond)
		}
		for _, g := range []*guardedRegion{writable, readable, own} {
			g.checkGuards(t)
		}
		for {
			if n, err := cq.Poll(wc[:]); n == 0 || err != nil {
				break
			}
		}
	})
}
