package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
)

// The client opens one RDMA connection per test. Its private data names
// the test; the server's reply describes the memory the client may target
// and where the TCP baseline listens. Both are JSON, so that no hand-written
// decoder faces the network.

// benchRequest is the client's private data.
type benchRequest struct {
	Test  string `json:"test"`
	Size  int    `json:"size"`
	Depth int    `json:"depth"`
	// Poll is how the client waits for completions: the server of a
	// ping-pong waits the same way (empty: the server's own --poll).
	Poll string `json:"poll,omitempty"`
}

// Tests a connection can be for.
const (
	benchTestWrite    = "write"
	benchTestRead     = "read"
	benchTestSend     = "send"
	benchTestPingPong = "pingpong"
	benchTestAtomic   = "atomic"
)

// benchReply is the server's private data.
type benchReply struct {
	Addr    uint64 `json:"addr"`
	RKey    uint32 `json:"rkey"`
	Len     int    `json:"len"`
	TCPPort int    `json:"tcp_port"`
	Device  string `json:"device"`
}

// benchDoneImm, sent as the immediate of a zero-length SEND_WITH_IMM, ends
// a test: the server then tears its side of the connection down.
const benchDoneImm = 0xD0_4E_D0_4E

// pollMode is how a side waits for completions.
type pollMode string

const (
	pollSpin   pollMode = "spin"
	pollYield  pollMode = "yield"
	pollHybrid pollMode = "hybrid"
	pollWait   pollMode = "wait"
)

// parsePollMode parses --poll. "auto" picks what measured best for the
// provider: the soft provider's completions are produced by its own
// goroutines, and on a two-core machine any busy loop takes the CPU they
// need (yield even starves Go's netpoller: an 8-byte SEND ping-pong went
// from ~0.13 ms to ~16 ms), so it waits; the verbs provider's come from
// the NIC, and CQ.Wait would add an interrupt and a system call, so it
// spins like perftest.
//
// auto spins only where the process has more than one CPU: on a machine
// of one (a test VM), a process that spins takes the CPU from the
// kernel's work on the completions it waits for (rxe is such work): in
// make vm-test's single-CPU guests spinning made a SEND ping-pong 2 to 5
// times slower than waiting (docs/rdma-verbs.md).
func parsePollMode(s, providerName string) (pollMode, error) {
	if s == "auto" {
		if providerName == "verbs" && runtime.NumCPU() > 1 {
			return pollSpin, nil
		}
		return pollWait, nil
	}
	switch m := pollMode(s); m {
	case pollSpin, pollYield, pollHybrid, pollWait:
		return m, nil
	}
	return "", fmt.Errorf("--poll %q: give auto, spin, yield, hybrid or wait", s)
}

// hybridPolls is how often hybrid polls an empty queue (a few µs) before
// it blocks.
const hybridPolls = 200

// busyLimit is how long spin and yield poll an empty queue at the least
// before they block in CQ.Wait: far longer than any gap inside a
// measurement on real hardware, short enough that an idle side does not
// hold a core. A poller spins longer when the completions it waits for
// take longer (maxBusyLimit at most), see poller.
const (
	busyLimit    = 20 * time.Millisecond
	maxBusyLimit = time.Second
)

// poller waits for completions as its mode says: spin polls in a tight
// loop; yield calls runtime.Gosched between empty polls so that the
// provider's goroutines get the CPU on a small machine; hybrid polls a
// few µs, then blocks; wait blocks in CQ.Wait at once.
//
// spin and yield poll for twice the longest recent wait (busyLimit at the
// least), so that waits as long as a round trip never block: under QEMU's
// emulation an rxe round trip of a SEND ping-pong takes longer than
// busyLimit, and blocking in CQ.Wait (arming the CQ, an interrupt, a
// completion event, a wake-up) on both sides of every round trip made it
// 5x perftest's, which spins without limit.
type poller struct {
	mode  pollMode
	limit time.Duration // how long to spin before blocking
}

func newPoller(mode pollMode) *poller { return &poller{mode: mode, limit: busyLimit} }

// poll returns at least one completion from cq.
func (p *poller) poll(ctx context.Context, cq rdma.CQ, wc []rdma.WorkCompletion) (int, error) {
	if p.mode == pollHybrid {
		for range hybridPolls {
			n, err := cq.Poll(wc)
			if n > 0 || err != nil {
				return n, err
			}
		}
	}
	if p.mode == pollSpin || p.mode == pollYield {
		var start, until time.Time
		for i := 1; ; i++ {
			n, err := cq.Poll(wc)
			if n > 0 || err != nil {
				if !start.IsZero() {
					p.learn(time.Since(start))
				}
				return n, err
			}
			if p.mode == pollYield {
				runtime.Gosched()
			}
			if i%1024 == 0 {
				now := time.Now()
				if start.IsZero() {
					start, until = now, now.Add(p.limit)
				} else if now.After(until) {
					break
				}
			}
		}
		n, err := cq.Wait(ctx, wc)
		if n > 0 && !start.IsZero() {
			p.learn(time.Since(start))
		}
		return n, err
	}
	return cq.Wait(ctx, wc)
}

// learn adjusts the spin limit to a wait of d: twice the longest recent
// wait, decaying by an eighth per wait towards busyLimit.
func (p *poller) learn(d time.Duration) {
	p.limit = max(p.limit-p.limit/8, 2*d, busyLimit)
	p.limit = min(p.limit, maxBusyLimit)
}

// benchServer answers the client's connections.
type benchServer struct {
	dev     rdma.Device
	pd      rdma.PD
	poll    pollMode
	tcpPort int
	inline  int
	wg      sync.WaitGroup
}

func serveBenchRDMA(ctx context.Context, o *benchRDMAOptions, out io.Writer) error {
	mode, err := parsePollMode(o.poll, o.provider)
	if err != nil {
		return err
	}
	host, port, err := net.SplitHostPort(o.listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", o.listen, err)
	}
	cfg := rdma.DeviceConfig{Device: o.device, GIDIndex: o.gidIndex, Addr: o.softAddr}
	if cfg.Addr == "" && o.provider == "soft" {
		if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
			return fmt.Errorf("--listen %q: with the soft provider, listen on the address clients reach, or give --soft-addr", o.listen)
		}
		cfg.Addr = net.JoinHostPort(host, "0")
	}
	dev, err := provider.Open(o.provider, cfg)
	if err != nil {
		return fmt.Errorf("open %s device: %w", o.provider, err)
	}
	defer dev.Close()
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	ln, err := rdma.Listen(pd, o.listen)
	if err != nil {
		return err
	}
	defer ln.Close()

	tcpListen := o.tcpListen
	if tcpListen == "" {
		p, _ := strconv.Atoi(port)
		if p != 0 {
			p++
		}
		tcpListen = net.JoinHostPort(host, strconv.Itoa(p))
	}
	tln, err := net.Listen("tcp", tcpListen)
	if err != nil {
		return fmt.Errorf("TCP baseline: %w (choose another port with --tcp-listen)", err)
	}
	defer tln.Close()
	s := &benchServer{dev: dev, pd: pd, poll: mode, tcpPort: tln.Addr().(*net.TCPAddr).Port, inline: benchInline(dev)}
	go serveTCPBaseline(ctx, tln)

	fmt.Fprintf(os.Stderr, "octoctl bench rdma: serving on %s (device %s, provider %s), TCP baseline on %s, polling %s\n",
		ln.Addr(), dev.Name(), dev.Provider(), tln.Addr(), mode)
	fmt.Fprintf(out, "%s%s\n", benchReadyPrefix, ln.Addr())
	// A spawned server exits when its parent closes stdin.
	if o.exitWithParent {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go func() {
			io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	defer s.wg.Wait()
	for {
		req, err := ln.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := s.handle(ctx, req); err != nil {
				fmt.Fprintf(os.Stderr, "octoctl bench rdma: connection from QP %d: %v\n", req.Remote.QPN, err)
			}
		}()
	}
}

// benchInline is the inline limit both sides use for small messages, as
// perftest does by default.
func benchInline(dev rdma.Device) int { return min(dev.Caps().MaxInline, 256) }

// handle serves one test's connection until the client says it is done.
func (s *benchServer) handle(ctx context.Context, req *rdma.ConnRequest) error {
	var br benchRequest
	if err := json.Unmarshal(req.PrivateData, &br); err != nil {
		req.Reject("malformed bench request")
		return fmt.Errorf("malformed request: %w", err)
	}
	if br.Size < 1 || br.Size > maxBenchSize || br.Depth < 1 || br.Depth > 1024 {
		req.Reject("bench request out of range")
		return fmt.Errorf("request out of range: %+v", br)
	}
	// Memory: the region clients target, then a reply buffer, then the
	// receive slots.
	target := 64
	recvSlots, slotSize := 4, 64 // enough for the done message
	switch br.Test {
	case benchTestWrite, benchTestRead, benchTestAtomic:
		target = max(br.Size, 64)
	case benchTestSend:
		recvSlots, slotSize = min(2*br.Depth, 128), br.Size
	case benchTestPingPong:
		recvSlots, slotSize = 4, br.Size
	default:
		req.Reject("unknown bench test " + br.Test)
		return fmt.Errorf("unknown test %q", br.Test)
	}
	replyOff := target
	slotsOff := replyOff + br.Size
	buf, err := rdma.AllocBuffer(slotsOff + recvSlots*slotSize)
	if err != nil {
		req.Reject(err.Error())
		return err
	}
	defer rdma.FreeBuffer(buf)
	mr, err := s.pd.RegMR(buf, rdma.AccessAll)
	if err != nil {
		req.Reject(err.Error())
		return err
	}
	defer mr.Dereg()
	sendDepth := br.Depth + 4
	cq, err := s.dev.CreateCQ(sendDepth + recvSlots + 4)
	if err != nil {
		req.Reject(err.Error())
		return err
	}
	defer cq.Close()
	// A ping-pong's receives complete on a CQ of their own, the only one
	// its server waits on (see pingPong).
	rcq := cq
	if br.Test == benchTestPingPong {
		if rcq, err = s.dev.CreateCQ(recvSlots + 4); err != nil {
			req.Reject(err.Error())
			return err
		}
		defer rcq.Close()
	}
	recv := func(slot int) rdma.RecvWR {
		return rdma.RecvWR{ID: uint64(slot), SGL: []rdma.SGE{{Addr: mr.Addr() + uint64(slotsOff+slot*slotSize), Length: uint32(slotSize), LKey: mr.LKey()}}}
	}
	reply, _ := json.Marshal(benchReply{Addr: mr.Addr(), RKey: mr.RKey(), Len: target, TCPPort: s.tcpPort, Device: s.dev.Name()})
	conn, err := req.Accept(ctx, rdma.ConnParams{
		QP: rdma.QPConfig{SendCQ: cq, RecvCQ: rcq, MaxSendWR: sendDepth, MaxRecvWR: recvSlots + 4,
			MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: s.inline},
		PrivateData: reply,
		Setup: func(qp rdma.QP) error {
			wrs := make([]rdma.RecvWR, recvSlots)
			for i := range wrs {
				wrs[i] = recv(i)
			}
			return qp.PostRecv(wrs)
		},
	})
	if err != nil {
		return err
	}
	defer conn.Close()
	qp := conn.QP

	replyWR := []rdma.SendWR{{Opcode: rdma.OpSend, Flags: rdma.SendSignaled,
		SGL: []rdma.SGE{{Addr: mr.Addr() + uint64(replyOff), Length: uint32(br.Size), LKey: mr.LKey()}}}}
	if br.Size <= s.inline {
		replyWR[0].Flags |= rdma.SendInline
	}
	if br.Test == benchTestPingPong {
		mode := s.poll
		if m, err := parsePollMode(br.Poll, s.dev.Provider()); br.Poll != "" && err == nil {
			mode = m
		}
		return pingPong(ctx, qp, cq, rcq, newPoller(mode), replyWR, recv)
	}
	wcs := make([]rdma.WorkCompletion, recvSlots+sendDepth)
	var pl *poller
	reposts := make([]rdma.RecvWR, 0, recvSlots)
	// Every test but the ping-pong leaves the server idle, so it blocks
	// rather than spins.
	pl = newPoller(pollWait)
	// Replies wait for room in the send queue: a reply's slot is free
	// only once the client acknowledged it.
	owed, inFlight := 0, 0
	for {
		n, err := pl.poll(ctx, cq, wcs)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		reposts = reposts[:0]
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.WCSuccess {
				return fmt.Errorf("completion %d: %v", wc.ID, wc.Status)
			}
			if wc.Opcode != rdma.WCRecv {
				inFlight-- // a reply's completion
				continue
			}
			if wc.HasImm && wc.Imm == benchDoneImm {
				return nil
			}
			if br.Test == benchTestPingPong {
				owed++
			}
			reposts = append(reposts, recv(int(wc.ID)))
		}
		if len(reposts) > 0 {
			if err := qp.PostRecv(reposts); err != nil {
				return err
			}
		}
		for ; owed > 0 && inFlight < sendDepth; owed, inFlight = owed-1, inFlight+1 {
			if err := qp.PostSend(replyWR); err != nil {
				return err
			}
		}
	}
}

// pingSignalEvery is how often a ping-pong's SEND is signaled, on both
// sides, as perftest's ib_send_lat signals them: the unsignaled ones are
// freed by the next signaled completion (a send queue of 5 holds them).
const pingSignalEvery = 4

// pingPong answers each message with one of the same size until the
// client says it is done, the way perftest's ib_send_lat does: receives
// complete on a CQ of their own, the only one waited on; replies are
// signaled one in pingSignalEvery and their completions reaped only when
// the send queue needs the room (by then the completion is there: the
// client's later messages acknowledged the reply); and a reply goes out
// before its receive is posted again. On rxe in QEMU guests a ping-pong
// with one CQ for both, every reply signaled and the receive reposted
// first took two completion events per round trip on each side where
// perftest takes none.
func pingPong(ctx context.Context, qp rdma.QP, scq, rcq rdma.CQ, pl *poller, reply []rdma.SendWR, recv func(int) rdma.RecvWR) error {
	var wcs, swcs [8]rdma.WorkCompletion
	base := reply[0].Flags &^ rdma.SendSignaled
	sent, unreaped := 0, 0 // replies posted; posted and not yet freed
	reap := func() error {
		n, err := pl.poll(ctx, scq, swcs[:])
		if err != nil {
			return err
		}
		for _, wc := range swcs[:n] {
			if wc.Status != rdma.WCSuccess {
				return fmt.Errorf("reply %d: %v", wc.ID, wc.Status)
			}
			unreaped -= pingSignalEvery
		}
		return nil
	}
	for {
		n, err := pl.poll(ctx, rcq, wcs[:])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, wc := range wcs[:n] {
			if wc.Status != rdma.WCSuccess {
				return fmt.Errorf("completion %d: %v", wc.ID, wc.Status)
			}
			if wc.HasImm && wc.Imm == benchDoneImm {
				return nil
			}
			for unreaped >= pingSignalEvery {
				if err := reap(); err != nil {
					return err
				}
			}
			reply[0].Flags = base
			if sent%pingSignalEvery == pingSignalEvery-1 {
				reply[0].Flags |= rdma.SendSignaled
			}
			if err := qp.PostSend(reply); err != nil {
				return err
			}
			sent++
			unreaped++
			if err := qp.PostRecv([]rdma.RecvWR{recv(int(wc.ID))}); err != nil {
				return err
			}
		}
	}
}
