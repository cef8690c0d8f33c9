package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/rdma/provider"
	"github.com/octofs/octofs/rdma/rpc"
)

// rpcBenchSlices is how many turns each probe takes: the RPC and TCP tests
// of a row alternate in slices of the measuring time, so that a drift in
// the machine's load moves both alike.
const rpcBenchSlices = 10

// rpcProbeResult accumulates a probe's turns.
type rpcProbeResult struct {
	samples []time.Duration
	calls   int
	elapsed time.Duration
}

func (r *rpcProbeResult) rate() float64 {
	if r.elapsed <= 0 {
		return 0
	}
	return float64(r.calls) / r.elapsed.Seconds()
}

// rpcBenchProbe issues calls of one kind, depth at a time, for a while.
type rpcBenchProbe interface {
	run(ctx context.Context, d time.Duration, r *rpcProbeResult) error
	close() error
}

// rpcCallProbe makes calls on one rdma/rpc connection from depth
// goroutines.
type rpcCallProbe struct {
	c       *rpc.Client
	op      uint16
	payload []byte
	depth   int
	ids     atomic.Uint64
}

func (p *rpcCallProbe) run(ctx context.Context, d time.Duration, r *rpcProbeResult) error {
	start := time.Now()
	deadline := start.Add(d)
	lats := make([][]time.Duration, p.depth)
	errs := make([]error, p.depth)
	var wg sync.WaitGroup
	for g := range p.depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				got, err := p.c.Call(ctx, p.op, p.ids.Add(1), p.payload)
				if err == nil && len(got) != len(p.payload) {
					err = fmt.Errorf("reply of %d bytes to a request of %d", len(got), len(p.payload))
				}
				if err != nil {
					errs[g] = err
					return
				}
				lats[g] = append(lats[g], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	r.elapsed += time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("rpc calls: %w", err)
	}
	for _, l := range lats {
		r.samples = append(r.samples, l...)
		r.calls += len(l)
	}
	return nil
}

func (p *rpcCallProbe) close() error { return nil }

// tcpPipeProbe keeps depth size-byte requests in flight on one TCP
// connection: a writer sends while fewer than depth are unanswered, a
// reader reads the replies in order.
type tcpPipeProbe struct {
	conn  *net.TCPConn
	br    *bufio.Reader
	size  int
	depth int
	stop  func() bool
}

func newTCPPipeProbe(ctx context.Context, addr string, size, depth int) (*tcpPipeProbe, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("TCP baseline: %w", err)
	}
	line, _ := json.Marshal(rpcBenchTCPRequest{Size: size})
	if _, err := c.Write(append(line, '\n')); err != nil {
		c.Close()
		return nil, fmt.Errorf("TCP baseline: %w", err)
	}
	tc := c.(*net.TCPConn)
	return &tcpPipeProbe{conn: tc, br: bufio.NewReaderSize(tc, 64<<10), size: size, depth: depth,
		stop: context.AfterFunc(ctx, func() { c.Close() })}, nil
}

func (p *tcpPipeProbe) run(_ context.Context, d time.Duration, r *rpcProbeResult) error {
	start := time.Now()
	deadline := start.Add(d)
	window := make(chan struct{}, p.depth)
	sent := make(chan time.Time, p.depth)
	werr := make(chan error, 1)
	go func() {
		defer close(sent)
		req := make([]byte, p.size)
		for time.Now().Before(deadline) {
			window <- struct{}{}
			sent <- time.Now()
			if _, err := p.conn.Write(req); err != nil {
				werr <- err
				return
			}
		}
	}()
	buf := make([]byte, p.size)
	var rerr error
	for t0 := range sent {
		if rerr == nil {
			if _, err := io.ReadFull(p.br, buf); err != nil {
				// Unblock the writer and let it end.
				rerr = err
				p.conn.Close()
			} else {
				r.samples = append(r.samples, time.Since(t0))
				r.calls++
			}
		}
		<-window
	}
	r.elapsed += time.Since(start)
	select {
	case err := <-werr:
		return fmt.Errorf("TCP request/response: %w", err)
	default:
	}
	if rerr != nil {
		return fmt.Errorf("TCP request/response: %w", rerr)
	}
	return nil
}

func (p *tcpPipeProbe) close() error {
	p.stop()
	return p.conn.Close()
}

// measurePair warms a and b up, then has them take turns for d each in
// all.
func measurePair(ctx context.Context, a, b rpcBenchProbe, d time.Duration) (ra, rb rpcProbeResult, err error) {
	warm := min(d/5, 200*time.Millisecond)
	var scratch rpcProbeResult
	if err := a.run(ctx, warm, &scratch); err != nil {
		return ra, rb, err
	}
	if err := b.run(ctx, warm, &scratch); err != nil {
		return ra, rb, err
	}
	slice := d / rpcBenchSlices
	for range rpcBenchSlices {
		if err := a.run(ctx, slice, &ra); err != nil {
			return ra, rb, err
		}
		if err := b.run(ctx, slice, &rb); err != nil {
			return ra, rb, err
		}
	}
	return ra, rb, nil
}

// runBenchRPCClient connects to the bench server and measures the plan.
func runBenchRPCClient(ctx context.Context, o *benchRPCOptions, plan *benchRPCPlan, server, tcpAddr, spawned string) ([]*benchTable, error) {
	cfg, err := o.deviceConfig(server)
	if err != nil {
		return nil, err
	}
	dev, err := provider.Open(o.provider, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s device: %w", o.provider, err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return nil, err
	}
	defer pd.Close()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := rpc.Dial(dctx, pd, server, rpc.ClientConfig{Device: dev, PrivateData: []byte(benchRPCHello)})
	cancel()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if c.Slots() < maxDepth(plan.depths) {
		return nil, fmt.Errorf("the server grants %d calls in flight, --depths asks for %d", c.Slots(), maxDepth(plan.depths))
	}

	null, err := nullTable(ctx, c, tcpAddr, plan)
	if err != nil {
		return nil, err
	}
	null.note("provider %s, device %s; %s", dev.Provider(), dev.Name(), spawned)
	null.note("client host: %s", rpcHostLoad())
	tables := []*benchTable{null}
	if len(plan.sizes) > 0 {
		t, err := echoTable(ctx, c, tcpAddr, plan)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	return tables, nil
}

func maxDepth(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func nullTable(ctx context.Context, c *rpc.Client, tcpAddr string, plan *benchRPCPlan) (*benchTable, error) {
	size := rpc.HeaderSize
	t := &benchTable{
		Title: fmt.Sprintf("rpc null calls: round trips (µs) and calls/s with N in flight on one connection, beside TCP request/response of %s each way, %v each, in %d turns",
			humanBytes(size), plan.duration, rpcBenchSlices),
		Columns: []string{"in flight", "p50", "p99", "calls/s", "TCP p50", "TCP p99", "TCP calls/s", "p50 vs TCP", "rate vs TCP", "rate vs 1"},
	}
	var p50Ratio1 float64
	rates, tcpRates := map[int]float64{}, map[int]float64{}
	for _, depth := range plan.depths {
		tcp, err := newTCPPipeProbe(ctx, tcpAddr, size, depth)
		if err != nil {
			return nil, err
		}
		rr, tr, err := measurePair(ctx, &rpcCallProbe{c: c, op: benchRPCNull, depth: depth}, tcp, plan.duration)
		tcp.close()
		if err != nil {
			return nil, err
		}
		rl, tl := summarizeRPC(rr.samples), summarizeRPC(tr.samples)
		if depth == 1 {
			p50Ratio1 = rl.p50 / tl.p50
		}
		rates[depth], tcpRates[depth] = rr.rate(), tr.rate()
		vs1 := "-"
		if rates[1] > 0 {
			vs1 = ratio(rr.rate(), rates[1])
		}
		t.add(fmt.Sprint(depth), usec(rl.p50), usec(rl.p99), fmt.Sprintf("%.0f", rr.rate()),
			usec(tl.p50), usec(tl.p99), fmt.Sprintf("%.0f", tr.rate()),
			ratio(rl.p50, tl.p50), ratio(rr.rate(), tr.rate()), vs1)
	}
	t.note("TCP: one connection, N requests pipelined on it; the server answers whatever has arrived in one write (Go defaults, TCP_NODELAY)")
	t.note("RPC: N goroutines calling on one rdma/rpc connection (one queue pair)")
	if rate1 := rates[1]; rate1 > 0 {
		t.note("target: null RPC p50 at 1 in flight <= 1.3x TCP: %.2fx %s", p50Ratio1, rpcVerdict(p50Ratio1 <= 1.3))
		if r16, ok := rates[16]; ok {
			t.note("target: 16 in flight >= 3x the rate of 1: %.2fx %s (TCP: %s)", r16/rate1, rpcVerdict(r16/rate1 >= 3), ratio(tcpRates[16], tcpRates[1]))
		}
	}
	return t, nil
}

func echoTable(ctx context.Context, c *rpc.Client, tcpAddr string, plan *benchRPCPlan) (*benchTable, error) {
	t := &benchTable{
		Title:   fmt.Sprintf("rpc echo calls, one at a time: request and reply of the same payload, µs, beside TCP request/response of the same size, %v each", plan.duration),
		Columns: []string{"payload", "path", "p50", "p99", "MiB/s each way", "TCP p50", "TCP MiB/s", "p50 vs TCP"},
	}
	inline := rpc.DefaultInlineSize - rpc.HeaderSize
	for _, size := range plan.sizes {
		tcp, err := newTCPPipeProbe(ctx, tcpAddr, size+rpc.HeaderSize, 1)
		if err != nil {
			return nil, err
		}
		payload := make([]byte, size)
		for i := range payload {
			payload[i] = byte(i)
		}
		rr, tr, err := measurePair(ctx, &rpcCallProbe{c: c, op: benchRPCEcho, payload: payload, depth: 1}, tcp, plan.duration)
		tcp.close()
		if err != nil {
			return nil, err
		}
		rl, tl := summarizeRPC(rr.samples), summarizeRPC(tr.samples)
		path := "inline SEND"
		if size > inline {
			path = "RDMA READ both ways"
		}
		t.add(humanBytes(size), path, usec(rl.p50), usec(rl.p99), figure(rr.rate()*float64(size)/(1<<20)),
			usec(tl.p50), figure(tr.rate()*float64(size)/(1<<20)), ratio(rl.p50, tl.p50))
	}
	t.note("payloads over %d bytes (a %d-byte receive buffer less the header) go by RDMA READ of the sender's buffer: the server READs the request, the client READs the reply and releases it", inline, rpc.DefaultInlineSize)
	return t, nil
}

func rpcVerdict(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(NOT met)"
}

// rpcHostLoad describes the client's machine: CPUs and the load average.
func rpcHostLoad() string {
	s := fmt.Sprintf("%d CPUs", runtime.NumCPU())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			s += fmt.Sprintf(", load average %s %s %s", f[0], f[1], f[2])
		}
	}
	return s
}
