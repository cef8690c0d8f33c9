package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
)

// benchClient runs the measurements against one server.
type benchClient struct {
	o      *benchRDMAOptions
	plan   *benchRDMAPlan
	dev    rdma.Device
	pd     rdma.PD
	server string
	inline int
	// tcpAddr is the TCP baseline's address, learnt from the first
	// connection unless --tcp gave it.
	tcpAddr string
}

// benchConn is one test's RDMA connection.
type benchConn struct {
	conn   *rdma.Conn
	qp     rdma.QP
	cq     rdma.CQ // the send CQ, and the receive CQ unless rcq is another
	rcq    rdma.CQ
	mr     rdma.MR
	buf    []byte
	remote benchReply
}

func (c *benchConn) close() {
	c.conn.Close()
	c.cq.Close()
	if c.rcq != c.cq {
		c.rcq.Close()
	}
	c.mr.Dereg()
	rdma.FreeBuffer(c.buf)
}

// warmup is the untimed start of each test.
func (p *benchRDMAPlan) warmup() time.Duration { return warmupFor(p.duration) }

// warmupFor is the untimed start of a measurement of d.
func warmupFor(d time.Duration) time.Duration { return min(d/5, 200*time.Millisecond) }

// testTimeout bounds one test, so that a server that stops answering
// fails the run instead of hanging it.
func (p *benchRDMAPlan) testTimeout() time.Duration { return p.warmup() + p.duration + 30*time.Second }

// dial opens the connection for one test: local memory of slots×slotSize
// bytes and a queue pair with depth requests outstanding, whose receives
// complete on a CQ of their own for a ping-pong.
func (c *benchClient) dial(ctx context.Context, test string, size, depth, slots, slotSize int) (*benchConn, error) {
	buf, err := rdma.AllocBuffer(max(slots*slotSize, 64))
	if err != nil {
		return nil, err
	}
	mr, err := c.pd.RegMR(buf, rdma.AccessAll)
	if err != nil {
		rdma.FreeBuffer(buf)
		return nil, err
	}
	cq, err := c.dev.CreateCQ(2*depth + 16)
	if err != nil {
		mr.Dereg()
		rdma.FreeBuffer(buf)
		return nil, err
	}
	rcq := cq
	if test == benchTestPingPong {
		if rcq, err = c.dev.CreateCQ(2*depth + 16); err != nil {
			cq.Close()
			mr.Dereg()
			rdma.FreeBuffer(buf)
			return nil, err
		}
	}
	req, _ := json.Marshal(benchRequest{Test: test, Size: size, Depth: depth, Poll: string(c.plan.poll)})
	conn, err := rdma.Dial(ctx, c.pd, c.server, rdma.ConnParams{
		QP: rdma.QPConfig{SendCQ: cq, RecvCQ: rcq, MaxSendWR: depth + 4, MaxRecvWR: depth + 4,
			MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: c.inline},
		PrivateData: req,
	})
	if err != nil {
		cq.Close()
		if rcq != cq {
			rcq.Close()
		}
		mr.Dereg()
		rdma.FreeBuffer(buf)
		return nil, fmt.Errorf("connect to the bench server at %s: %w", c.server, err)
	}
	bc := &benchConn{conn: conn, qp: conn.QP, cq: cq, rcq: rcq, mr: mr, buf: buf}
	if err := json.Unmarshal(conn.PrivateData, &bc.remote); err != nil {
		bc.close()
		return nil, fmt.Errorf("bench server's reply: %w", err)
	}
	if c.tcpAddr == "" {
		host, _, _ := net.SplitHostPort(c.server)
		c.tcpAddr = net.JoinHostPort(host, strconv.Itoa(bc.remote.TCPPort))
	}
	return bc, nil
}

// finish tells the server the test is over and closes the connection.
func (c *benchClient) finish(ctx context.Context, bc *benchConn) error {
	defer bc.close()
	err := bc.qp.PostSend([]rdma.SendWR{{ID: 1 << 62, Opcode: rdma.OpSendWithImm, Flags: rdma.SendSignaled, Imm: benchDoneImm}})
	if err != nil {
		return err
	}
	var wc [8]rdma.WorkCompletion
	for {
		n, err := bc.cq.Wait(ctx, wc[:])
		if err != nil {
			return fmt.Errorf("ending the test: %w", err)
		}
		for _, w := range wc[:n] {
			if w.ID == 1<<62 {
				return w.Err()
			}
		}
	}
}

// bwResult is a bandwidth measurement: what moved in how long. Turns of
// the same test add up.
type bwResult struct {
	bytes, msgs, secs float64
}

func (r *bwResult) add(o bwResult) {
	r.bytes += o.bytes
	r.msgs += o.msgs
	r.secs += o.secs
}

func (r bwResult) bytesPerSec() float64 { return r.bytes / max(r.secs, 1e-9) }
func (r bwResult) msgsPerSec() float64  { return r.msgs / max(r.secs, 1e-9) }

// bandwidth keeps depth requests of op outstanding for d (after a warmup)
// and counts the completions inside the measuring window.
func (c *benchClient) bandwidth(ctx context.Context, test string, op rdma.Opcode, size int, d time.Duration) (bwResult, error) {
	ctx, cancel := context.WithTimeout(ctx, c.plan.testTimeout())
	defer cancel()
	depth := c.plan.depth
	bc, err := c.dial(ctx, test, size, depth, depth, size)
	if err != nil {
		return bwResult{}, err
	}
	wrs := make([]rdma.SendWR, depth)
	for i := range wrs {
		wrs[i] = rdma.SendWR{ID: uint64(i), Opcode: op, Flags: rdma.SendSignaled,
			SGL:        []rdma.SGE{{Addr: bc.mr.Addr() + uint64(i*size), Length: uint32(size), LKey: bc.mr.LKey()}},
			RemoteAddr: bc.remote.Addr, RKey: bc.remote.RKey}
		if op != rdma.OpRead && size <= c.inline {
			wrs[i].Flags |= rdma.SendInline
		}
	}
	if err := bc.qp.PostSend(wrs); err != nil {
		bc.close()
		return bwResult{}, err
	}
	outstanding := depth
	pl := newPoller(c.plan.poll)
	reposts := make([]rdma.SendWR, 0, depth)
	wcs := make([]rdma.WorkCompletion, depth)
	start := time.Now()
	warmEnd := start.Add(warmupFor(d))
	deadline := warmEnd.Add(d)
	// Measure for the duration, and on until a few rounds of the queue
	// completed, so that a starved machine still yields a figure; the
	// rate is over the time actually measured.
	minCounted := int64(2 * depth)
	var counted int64
	var lastCounted time.Time
	for outstanding > 0 {
		n, err := pl.poll(ctx, bc.cq, wcs)
		if err != nil {
			bc.close()
			return bwResult{}, fmt.Errorf("%v %s: %w", op, humanBytes(size), err)
		}
		now := time.Now()
		reposts = reposts[:0]
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.WCSuccess {
				bc.close()
				return bwResult{}, fmt.Errorf("%v %s: %w", op, humanBytes(size), wc.Err())
			}
			outstanding--
			measuring := !now.After(deadline) || counted < minCounted
			if now.After(warmEnd) && measuring {
				counted++
				lastCounted = now
			}
			if measuring {
				reposts = append(reposts, wrs[wc.ID])
			}
		}
		if len(reposts) > 0 {
			if err := bc.qp.PostSend(reposts); err != nil {
				bc.close()
				return bwResult{}, err
			}
			outstanding += len(reposts)
		}
	}
	if err := c.finish(ctx, bc); err != nil {
		return bwResult{}, err
	}
	secs := lastCounted.Sub(warmEnd).Seconds()
	if counted == 0 || secs <= 0 {
		return bwResult{}, fmt.Errorf("%v %s: no completion measured", op, humanBytes(size))
	}
	return bwResult{bytes: float64(counted) * float64(size), msgs: float64(counted), secs: secs}, nil
}

// percentiles of round trips, in microseconds.
type latStats struct {
	n              int
	p50, p99, p999 float64
	min, avg       float64
}

func summarize(samples []time.Duration) latStats {
	if len(samples) == 0 {
		return latStats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(s))), len(s)-1)
		return float64(s[i].Nanoseconds()) / 1e3
	}
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return latStats{n: len(s), p50: at(0.50), p99: at(0.99), p999: at(0.999),
		min: float64(s[0].Nanoseconds()) / 1e3, avg: float64(sum.Nanoseconds()) / 1e3 / float64(len(s))}
}

// runBenchClient runs the plan against server and returns the tables.
func runBenchClient(ctx context.Context, o *benchRDMAOptions, plan *benchRDMAPlan, server, spawned string) ([]*benchTable, error) {
	if ctx == nil {
		ctx = context.Background()
	}
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
	c := &benchClient{o: o, plan: plan, dev: dev, pd: pd, server: server, inline: benchInline(dev), tcpAddr: o.tcpAddr}

	var tables []*benchTable
	if plan.write || plan.read || plan.send {
		t, err := c.bandwidthTable(ctx, spawned)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	if plan.lat {
		t, err := c.latencyTable(ctx)
		if err != nil {
			return nil, err
		}
		tables = append(tables, t)
	}
	return tables, nil
}

const mib = 1 << 20

// bwSlices is how many turns each bandwidth test takes.
const bwSlices = 5

// bwTargets are the bandwidth targets of issue 9, as a ratio to the TCP
// stream, checked for RDMA_WRITE and RDMA_READ.
var bwTargets = []struct {
	size int
	min  float64
}{{64 << 10, 0.8}, {256 << 10, 0.8}, {1 << 20, 0.9}}

func (c *benchClient) bandwidthTable(ctx context.Context, spawned string) (*benchTable, error) {
	p := c.plan
	t := &benchTable{
		Title: fmt.Sprintf("rdma bandwidth: provider %s, device %s, %d outstanding, %v per test",
			c.dev.Provider(), c.dev.Name(), p.depth, p.duration),
		Columns: []string{"test", "size", "MiB/s", "Kmsg/s", "TCP MiB/s", "vs TCP"},
	}
	type op struct {
		name string
		test string
		code rdma.Opcode
		on   bool
	}
	ops := []op{
		{"RDMA_WRITE", benchTestWrite, rdma.OpWrite, p.write},
		{"RDMA_READ", benchTestRead, rdma.OpRead, p.read},
		{"SEND", benchTestSend, rdma.OpSend, p.send},
	}
	// Measure size by size, TCP beside the RDMA tests of that size, and
	// in turns: each test runs bwSlices times for a slice of the
	// duration, one after the other, so that all the figures of a size,
	// the TCP stream's included, come from the same spans of time and a
	// drift in the machine's load moves them alike. Print op by op.
	slice := max(p.duration/bwSlices, 10*time.Millisecond)
	results := make(map[string]map[int]bwResult)
	tcp := make(map[int]bwResult)
	for _, size := range p.sizes {
		for range bwSlices {
			for _, o := range ops {
				if !o.on {
					continue
				}
				r, err := c.bandwidth(ctx, o.test, o.code, size, slice)
				if err != nil {
					return nil, err
				}
				if results[o.name] == nil {
					results[o.name] = make(map[int]bwResult)
				}
				acc := results[o.name][size]
				acc.add(r)
				results[o.name][size] = acc
			}
			r, err := tcpStream(ctx, c.tcpAddr, size, slice)
			if err != nil {
				return nil, err
			}
			acc := tcp[size]
			acc.add(r)
			tcp[size] = acc
		}
	}
	for _, o := range ops {
		if !o.on {
			continue
		}
		for _, size := range p.sizes {
			r, b := results[o.name][size], tcp[size].bytesPerSec()
			t.add(o.name, humanBytes(size), figure(r.bytesPerSec()/mib), figure(r.msgsPerSec()/1e3),
				figure(b/mib), ratio(r.bytesPerSec(), b))
		}
	}
	if spawned != "" {
		t.note("%s", spawned)
	}
	t.note("client host: %s", hostLoad())
	t.note("TCP: a stream between the same two processes (%s), one write per message, Go defaults (TCP_NODELAY)", c.tcpAddr)
	t.note("the tests took turns, %d slices of %v each, so that each size's figures come from the same spans of time", bwSlices, slice)
	t.note("polling: %s", pollDescription(p.poll))
	for _, o := range ops[:2] {
		for _, tg := range bwTargets {
			if r, ok := results[o.name][tg.size]; ok && tcp[tg.size].secs > 0 {
				x := r.bytesPerSec() / tcp[tg.size].bytesPerSec()
				t.note("target: %s %s >= %.2fx TCP stream: %.2fx %s", humanBytes(tg.size), o.name, tg.min, x, verdict(x >= tg.min))
			}
		}
	}
	return t, nil
}

func (c *benchClient) latencyTable(ctx context.Context) (*benchTable, error) {
	p := c.plan
	const size = 8
	t := &benchTable{
		Title: fmt.Sprintf("rdma latency: round trips of one %d-byte request at a time, µs, %v per test, the tests taking %d turns",
			size, p.duration, latSlices),
		Columns: []string{"test", "size", "p50", "p99", "p99.9", "samples", "TCP p50", "vs TCP"},
	}
	caps := c.dev.Caps()
	rows := []struct {
		name string
		test string
		op   rdma.Opcode
		on   bool
	}{
		{"RDMA_READ", benchTestRead, rdma.OpRead, true},
		{"SEND ping-pong", benchTestPingPong, rdma.OpSend, true},
		{"ATOMIC_FETCH_AND_ADD", benchTestAtomic, rdma.OpAtomicFetchAndAdd, caps.Atomics},
		{"ATOMIC_CMP_AND_SWP", benchTestAtomic, rdma.OpAtomicCmpAndSwp, caps.Atomics},
	}
	tcpAddr := c.tcpAddrOrDial(ctx)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(len(rows)+1)*p.testTimeout())
	defer cancel()
	var probes []latProbe
	closed := false
	defer func() {
		if !closed {
			closeProbes(ctx, probes) // a failure is being returned already
		}
	}()
	tcpProbe, err := newTCPLatProbe(ctx, tcpAddr, size)
	if err != nil {
		return nil, err
	}
	probes = append(probes, tcpProbe)
	for _, r := range rows {
		if !r.on {
			continue
		}
		pr, err := c.newRDMALatProbe(ctx, r.test, r.op, size)
		if err != nil {
			return nil, err
		}
		probes = append(probes, pr)
	}
	samples, err := runLatProbes(ctx, probes, p.warmup(), p.duration)
	if err != nil {
		return nil, err
	}
	// Ending the tests tells the server; a failure there fails the run.
	closed = true
	if err := closeProbes(ctx, probes); err != nil {
		return nil, err
	}
	tcp := summarize(samples[0])
	var read, send latStats
	next := 1
	for _, r := range rows {
		if !r.on {
			t.add(r.name, humanBytes(size), "-", "-", "-", "0", fmt.Sprintf("%.1f", tcp.p50), "no atomics")
			continue
		}
		s := summarize(samples[next])
		next++
		switch r.op {
		case rdma.OpRead:
			read = s
		case rdma.OpSend:
			send = s
		}
		t.add(r.name, humanBytes(size), fmt.Sprintf("%.1f", s.p50), fmt.Sprintf("%.1f", s.p99), fmt.Sprintf("%.1f", s.p999),
			strconv.Itoa(s.n), fmt.Sprintf("%.1f", tcp.p50), ratio(s.p50, tcp.p50))
	}
	t.add("TCP ping-pong", humanBytes(size), fmt.Sprintf("%.1f", tcp.p50), fmt.Sprintf("%.1f", tcp.p99), fmt.Sprintf("%.1f", tcp.p999),
		strconv.Itoa(tcp.n), fmt.Sprintf("%.1f", tcp.p50), ratio(tcp.p50, tcp.p50))
	t.note("vs TCP: p50 over the TCP ping-pong's p50 (lower is better); every figure is a full round trip")
	t.note("the tests took turns, %v each, so that all were measured across the same spans of time", p.duration/latSlices)
	t.note("polling: %s (the ping-pong's server too)", pollDescription(p.poll))
	for _, tg := range []struct {
		name string
		s    latStats
		max  float64
	}{{"RDMA_READ", read, 1.2}, {"SEND ping-pong", send, 1.3}} {
		if tcp.p50 > 0 && tg.s.n > 0 {
			x := tg.s.p50 / tcp.p50
			t.note("target: 8B %s p50 <= %.1fx TCP ping-pong p50: %.2fx %s", tg.name, tg.max, x, verdict(x <= tg.max))
		}
	}
	return t, nil
}

// tcpAddrOrDial returns the TCP baseline's address, learning it from a
// short connection if no test has connected yet.
func (c *benchClient) tcpAddrOrDial(ctx context.Context) string {
	if c.tcpAddr == "" {
		if bc, err := c.dial(ctx, benchTestRead, 8, 1, 1, 8); err == nil {
			c.finish(ctx, bc)
		}
	}
	return c.tcpAddr
}

// hostLoad describes the client's machine, since other work on it moves
// every figure: CPUs and the load average when the run ends.
func hostLoad() string {
	s := fmt.Sprintf("%d CPUs", runtime.NumCPU())
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) >= 3 {
			s += fmt.Sprintf(", load average %s %s %s", f[0], f[1], f[2])
		}
	}
	return s
}

func verdict(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(NOT met)"
}

func pollDescription(m pollMode) string {
	switch m {
	case pollSpin:
		return "spin: CQ.Poll in a tight loop (blocks in CQ.Wait after 20ms idle, or twice the longest recent wait)"
	case pollYield:
		return "yield: CQ.Poll with runtime.Gosched between empty polls (blocks in CQ.Wait after 20ms idle, or twice the longest recent wait)"
	case pollHybrid:
		return fmt.Sprintf("hybrid: up to %d empty CQ.Polls, then CQ.Wait", hybridPolls)
	default:
		return "wait: CQ.Wait blocks until a completion arrives"
	}
}
