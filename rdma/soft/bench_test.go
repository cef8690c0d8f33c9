package soft

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/octofs/octofs/rdma"
)

// Micro-benchmarks of the provider inside one process, for profiling it.
// `octoctl bench rdma` is the real benchmark: two processes, many sizes,
// and a plain TCP baseline beside every figure.

func benchOp(b *testing.B, op rdma.Opcode, size, depth int) {
	p := newPair(b)
	wr := rdma.SendWR{Opcode: op, Flags: rdma.SendSignaled,
		SGL:        []rdma.SGE{{Addr: p.mrA.Addr(), Length: uint32(size), LKey: p.mrA.LKey()}},
		RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}
	wrs := []rdma.SendWR{wr}
	var wc [64]rdma.WorkCompletion
	ctx := context.Background()
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	inflight := 0
	for i := 0; i < b.N; i++ {
		for inflight >= depth {
			n, err := p.cqA.Wait(ctx, wc[:])
			if err != nil || wc[0].Status != rdma.WCSuccess {
				b.Fatal(err, wc[0].Status)
			}
			inflight -= n
		}
		if err := p.qpA.PostSend(wrs); err != nil {
			b.Fatal(err)
		}
		inflight++
	}
	for inflight > 0 {
		n, _ := p.cqA.Wait(ctx, wc[:])
		inflight -= n
	}
}

func BenchmarkSoft(b *testing.B) {
	for _, tc := range []struct {
		op          rdma.Opcode
		size, depth int
	}{
		{rdma.OpRead, 8, 1}, {rdma.OpWrite, 8, 1}, {rdma.OpWrite, 64, 16},
		{rdma.OpWrite, 64 << 10, 16}, {rdma.OpWrite, 64 << 10, 16}, {rdma.OpRead, 64 << 10, 16}, {rdma.OpWrite, 1 << 20, 16}, {rdma.OpRead, 1 << 20, 16},
	} {
		b.Run(fmt.Sprintf("%v/%d/depth%d", tc.op, tc.size, tc.depth), func(b *testing.B) { benchOp(b, tc.op, tc.size, tc.depth) })
	}
}

// BenchmarkPingPong is an 8-byte SEND ping-pong, a goroutine answering
// every message, each side waiting in CQ.Wait: the path of an RPC.
func BenchmarkPingPong(b *testing.B) {
	p := newPair(b)
	sge := func(m rdma.MR, off uint64) []rdma.SGE {
		return []rdma.SGE{{Addr: m.Addr() + off, Length: 8, LKey: m.LKey()}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	recvB := []rdma.RecvWR{{ID: 1, SGL: sge(p.mrB, 0)}}
	sendB := []rdma.SendWR{{ID: 2, Opcode: rdma.OpSend, Flags: rdma.SendSignaled | rdma.SendInline, SGL: sge(p.mrB, 64)}}
	if err := p.qpB.PostRecv(recvB); err != nil {
		b.Fatal(err)
	}
	go func() {
		var wc [4]rdma.WorkCompletion
		for {
			n, err := p.cqB.Wait(ctx, wc[:])
			if err != nil {
				return
			}
			for _, w := range wc[:n] {
				if w.Status != rdma.WCSuccess {
					return
				}
				if w.Opcode == rdma.WCRecv {
					p.qpB.PostRecv(recvB)
					p.qpB.PostSend(sendB)
				}
			}
		}
	}()
	recvA := []rdma.RecvWR{{ID: 1, SGL: sge(p.mrA, 0)}}
	sendA := []rdma.SendWR{{ID: 2, Opcode: rdma.OpSend, Flags: rdma.SendSignaled | rdma.SendInline, SGL: sge(p.mrA, 64)}}
	var wc [4]rdma.WorkCompletion
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := p.qpA.PostRecv(recvA); err != nil {
			b.Fatal(err)
		}
		if err := p.qpA.PostSend(sendA); err != nil {
			b.Fatal(err)
		}
		for got := false; !got; {
			n, err := p.cqA.Wait(ctx, wc[:])
			if err != nil {
				b.Fatal(err)
			}
			for _, w := range wc[:n] {
				if w.Status != rdma.WCSuccess {
					b.Fatal(w.Status)
				}
				got = got || w.Opcode == rdma.WCRecv
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(p.devA.Stats().ACKFrames+p.devB.Stats().ACKFrames)/float64(b.N), "ackframes/op")
}

// BenchmarkTCPPingPong is the baseline of BenchmarkPingPong: 8 bytes each
// way over a TCP connection between two goroutines.
func BenchmarkTCPPingPong(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 8)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 8)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			b.Fatal(err)
		}
	}
}
