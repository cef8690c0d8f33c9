package soft

import (
	"context"
	"fmt"
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
