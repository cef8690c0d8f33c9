package rpc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// In-process micro-benchmarks, for profiling. `octoctl bench rpc` is the
// real benchmark: two processes and a TCP baseline in the same run.

func benchCalls(b *testing.B, op uint16, payload []byte, depth int) {
	ts := newTestServer(b, ServerConfig{})
	c := dialTest(b, ts, ClientConfig{})
	ctx := ctxT(b)
	if _, err := c.Call(ctx, op, 0, payload); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				if _, err := c.Call(ctx, op, uint64(i), payload); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

func BenchmarkNullCall(b *testing.B) {
	for _, h := range []struct {
		name string
		op   uint16
	}{{"goroutine", opNull}, {"inline", opInline}} {
		for _, depth := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("%s/depth%d", h.name, depth), func(b *testing.B) { benchCalls(b, h.op, nil, depth) })
		}
	}
}

func BenchmarkEcho(b *testing.B) {
	for _, tc := range []struct{ size, depth int }{
		{1 << 10, 1}, {4 << 10, 1}, {64 << 10, 1}, {1 << 20, 1}, {64 << 10, 16}, {1 << 20, 4},
	} {
		b.Run(fmt.Sprintf("%d/depth%d", tc.size, tc.depth), func(b *testing.B) {
			benchCalls(b, opEcho, pattern(tc.size, 1), tc.depth)
		})
	}
}
