package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
)

// This file is `octoctl bench rdma`, the octofs counterpart of perftest's
// ib_write_bw, ib_read_bw, ib_send_bw, ib_send_lat, ib_read_lat and
// ib_atomic_lat, with a plain-TCP baseline measured between the same two
// processes in the same run. The server is bench_rdma_server.go, the RDMA
// client bench_rdma_client.go, the TCP baseline bench_rdma_tcp.go.

// benchRDMAOptions are the command's flags.
type benchRDMAOptions struct {
	serve     bool
	listen    string
	connect   string
	provider  string
	device    string
	gidIndex  int
	softAddr  string
	tcpListen string
	tcpAddr   string
	sizes     string
	depth     int
	duration  time.Duration
	tests     string
	poll      string
	asJSON    bool
	// exitWithParent makes a spawned server exit when its stdin closes.
	exitWithParent bool
}

func newBenchRDMACmd() *cobra.Command {
	o := &benchRDMAOptions{}
	cmd := &cobra.Command{
		Use:   "rdma",
		Short: "RDMA WRITE/READ/SEND bandwidth and READ/SEND/atomic latency, beside plain TCP",
		Long: `Measures the RDMA layer the way perftest does, between two processes:

  bandwidth and message rate of RDMA WRITE, RDMA READ and SEND at each size,
  with --depth requests outstanding (ib_write_bw, ib_read_bw, ib_send_bw);
  round-trip latency of an 8-byte READ, an 8-byte SEND ping-pong and the two
  8-byte atomics, one request at a time (ib_read_lat, ib_send_lat,
  ib_atomic_lat);

and, between the same two processes in the same run, plain TCP: stream
bandwidth with one write per message at each size, and an 8-byte ping-pong.
Each row shows the ratio octofs/TCP.

Run the server with --serve and the client with --connect, on one host or
two (the TCP baseline listens on the port after --listen's unless
--tcp-listen says otherwise; the server tells the client which):

  octoctl bench rdma --serve --listen 10.0.0.1:18515 --provider verbs --device rxe0
  octoctl bench rdma --connect 10.0.0.1:18515 --provider verbs --device rxe0

With neither flag, the command starts the server as a child process of its
own on loopback, runs the client against it and stops the child.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchRDMA(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.serve, "serve", false, "run the server side and wait for clients")
	f.StringVar(&o.listen, "listen", "127.0.0.1:18515", "server: host:port of the connection manager (port 0: any)")
	f.StringVar(&o.connect, "connect", "", "client: the server's --listen address")
	f.StringVar(&o.provider, "provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), "|")+" (verbs needs a binary built with -tags verbs)")
	f.StringVar(&o.device, "device", "", "verbs: device name such as rxe0 (default: the first active one)")
	f.IntVar(&o.gidIndex, "gid-index", -1, "verbs: GID index (negative: pick a RoCE v2 GID automatically)")
	f.StringVar(&o.softAddr, "soft-addr", "", "soft: host:port of this side's software NIC (default: the address that reaches the peer, port 0)")
	f.StringVar(&o.tcpListen, "tcp-listen", "", "server: host:port of the TCP baseline (default: --listen's host, the next port)")
	f.StringVar(&o.tcpAddr, "tcp", "", "client: the TCP baseline's host:port (default: what the server announces, on --connect's host)")
	f.StringVar(&o.sizes, "sizes", "64,256,1K,4K,16K,64K,256K,1M", "message sizes for the bandwidth tests (suffixes K and M are binary)")
	f.IntVar(&o.depth, "depth", 16, "outstanding requests in the bandwidth tests")
	f.DurationVar(&o.duration, "duration", time.Second, "measuring time of each test")
	f.StringVar(&o.tests, "tests", "write,read,send,lat", "which tests to run: write, read, send (bandwidth), lat (latency)")
	f.StringVar(&o.poll, "poll", "auto", "how the client and server wait for completions: spin (Poll in a tight loop), yield (Poll, runtime.Gosched between empty polls), hybrid (a few µs of Poll, then CQ.Wait), wait (CQ.Wait), auto (wait for soft; spin for verbs on more than one CPU, else wait)")
	f.BoolVar(&o.asJSON, "json", false, "print the tables as JSON, one object per line")
	f.BoolVar(&o.exitWithParent, "exit-with-parent", false, "server: exit when standard input closes (set by the client that spawns it)")
	f.MarkHidden("exit-with-parent")
	return cmd
}

// benchRDMAPlan is what the client measures, parsed from the flags.
type benchRDMAPlan struct {
	sizes    []int
	depth    int
	duration time.Duration
	write    bool
	read     bool
	send     bool
	lat      bool
	poll     pollMode
}

func (o *benchRDMAOptions) plan() (*benchRDMAPlan, error) {
	p := &benchRDMAPlan{depth: o.depth, duration: o.duration}
	var err error
	if p.poll, err = parsePollMode(o.poll, o.provider); err != nil {
		return nil, err
	}
	if o.depth < 1 || o.depth > 1024 {
		return nil, fmt.Errorf("--depth %d: give 1 to 1024 outstanding requests", o.depth)
	}
	if o.duration < 10*time.Millisecond {
		return nil, fmt.Errorf("--duration %v: give at least 10ms per test", o.duration)
	}
	for _, s := range strings.Split(o.sizes, ",") {
		n, err := parseSize(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--sizes: %w", err)
		}
		p.sizes = append(p.sizes, n)
	}
	for _, t := range strings.Split(o.tests, ",") {
		switch strings.TrimSpace(t) {
		case "write":
			p.write = true
		case "read":
			p.read = true
		case "send":
			p.send = true
		case "lat":
			p.lat = true
		case "all":
			p.write, p.read, p.send, p.lat = true, true, true, true
		default:
			return nil, fmt.Errorf("--tests: unknown test %q (have write, read, send, lat)", t)
		}
	}
	return p, nil
}

// maxBenchSize bounds message sizes: the verbs maximum message is 1 GiB
// and every size is allocated depth times.
const maxBenchSize = 64 << 20

// parseSize parses 4096, 4K, 4KiB, 1M, 1MiB.
func parseSize(s string) (int, error) {
	mult := 1
	u := strings.ToUpper(s)
	for _, suf := range []struct {
		s string
		m int
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"K", 1 << 10}, {"M", 1 << 20}, {"B", 1}} {
		if strings.HasSuffix(u, suf.s) {
			u, mult = strings.TrimSuffix(u, suf.s), suf.m
			break
		}
	}
	n, err := strconv.Atoi(u)
	if err != nil || n <= 0 || n*mult > maxBenchSize {
		return 0, fmt.Errorf("size %q: give a byte count from 1 to %s, such as 4096 or 64K", s, humanBytes(maxBenchSize))
	}
	return n * mult, nil
}

func runBenchRDMA(ctx context.Context, w io.Writer, o *benchRDMAOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.serve && o.connect != "" {
		return errors.New("--serve and --connect exclude each other: the server listens, the client connects")
	}
	if o.serve {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return serveBenchRDMA(ctx, o, os.Stdout)
	}
	plan, err := o.plan()
	if err != nil {
		return err
	}
	server := o.connect
	spawned := ""
	if server == "" {
		child, addr, err := spawnBenchServer(ctx, o)
		if err != nil {
			return err
		}
		defer child.stop()
		server = addr
		spawned = fmt.Sprintf("server: child process %d on %s", child.cmd.Process.Pid, addr)
	}
	tables, err := runBenchClient(ctx, o, plan, server, spawned)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if err := t.print(w, o.asJSON); err != nil {
			return err
		}
	}
	return nil
}

// deviceConfig is the rdma.DeviceConfig of one side; peer is the address
// the other side is reached at, which picks the soft NIC's address.
func (o *benchRDMAOptions) deviceConfig(peer string) (rdma.DeviceConfig, error) {
	cfg := rdma.DeviceConfig{Device: o.device, GIDIndex: o.gidIndex, Addr: o.softAddr}
	if cfg.Addr == "" && o.provider == "soft" {
		host, err := localHostFor(peer)
		if err != nil {
			return cfg, err
		}
		cfg.Addr = net.JoinHostPort(host, "0")
	}
	return cfg, nil
}

// localHostFor returns the local address that reaches addr: the server's
// own listening host if it is a specific one, else the source address the
// kernel picks for a route to addr (no packet is sent).
func localHostFor(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return "", fmt.Errorf("address %q: the soft provider needs the address peers reach this host at; give --soft-addr", addr)
	}
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return "", fmt.Errorf("find the local address towards %s: %w (give --soft-addr)", addr, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String(), nil
}

// benchChild is a server started by the client on loopback.
type benchChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// benchReadyPrefix starts the line a server prints once it accepts
// connections, followed by its connection manager's address.
const benchReadyPrefix = "octoctl-bench-rdma-ready "

// spawnBenchServer starts `octoctl bench rdma --serve` as a child on
// loopback and returns it with the address it listens on.
func spawnBenchServer(ctx context.Context, o *benchRDMAOptions) (*benchChild, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", fmt.Errorf("find this program to start the server: %w", err)
	}
	args := []string{"bench", "rdma", "--serve", "--exit-with-parent", "--listen", "127.0.0.1:0", "--tcp-listen", "127.0.0.1:0",
		"--provider", o.provider, "--poll", o.poll, "--gid-index", strconv.Itoa(o.gidIndex)}
	if o.device != "" {
		args = append(args, "--device", o.device)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	// The child exits when its stdin closes, so it cannot outlive a
	// client that dies without stopping it.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start the bench server: %w", err)
	}
	child := &benchChild{cmd: cmd, stdin: stdin}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), benchReadyPrefix); ok {
				ready <- line
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			child.stop()
			return nil, "", errors.New("the bench server exited before it was ready (its errors are above)")
		}
		return child, addr, nil
	case <-time.After(30 * time.Second):
		child.stop()
		return nil, "", errors.New("the bench server did not become ready within 30s")
	case <-ctx.Done():
		child.stop()
		return nil, "", ctx.Err()
	}
}

// stop ends the child by its PID: SIGTERM, then SIGKILL if it lingers.
func (c *benchChild) stop() {
	c.stdin.Close()
	pid := c.cmd.Process.Pid
	syscall.Kill(pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(pid, syscall.SIGKILL)
		<-done
	}
}
