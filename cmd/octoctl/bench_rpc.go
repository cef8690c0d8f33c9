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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
	"github.com/octofs/octofs/rdma/rpc"
)

// This file is `octoctl bench rpc`: rdma/rpc's calls between two
// processes, each figure beside a TCP request/response of the same size at
// the same depth between the same two processes in the same run. The
// server side is bench_rpc_server.go, the measurements bench_rpc_probe.go.

type benchRPCOptions struct {
	serve     bool
	listen    string
	connect   string
	provider  string
	device    string
	gidIndex  int
	softAddr  string
	tcpListen string
	tcpAddr   string
	depths    string
	sizes     string
	duration  time.Duration
	workers   int
	asJSON    bool
	// exitWithParent makes a spawned server exit when its stdin closes.
	exitWithParent bool
}

func newBenchRPCCmd() *cobra.Command {
	o := &benchRPCOptions{}
	cmd := &cobra.Command{
		Use:   "rpc",
		Short: "rdma/rpc null-call latency and rate at several depths, and large messages, beside TCP",
		Long: `Measures rdma/rpc (self-identified RPC over RC send/receive) between two
processes:

  null calls (a header, no payload) with 1, 16 and 64 calls in flight on one
  connection: round-trip p50/p99 and calls per second;
  echo calls of larger payloads (request and reply of the same size, beyond
  a receive buffer they go by RDMA READ), one at a time;

and, between the same two processes in the same run, a TCP request/response
of the same size (the RPC header included) at the same depth: one
connection, that many requests pipelined on it. Each row shows octofs/TCP.
The RPC and TCP tests take turns, so both see the same load.

Run the server with --serve and the client with --connect, on one host or
two; with neither, the command starts the server as a child process on
loopback and stops it at the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBenchRPC(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.serve, "serve", false, "run the server side and wait for clients")
	f.StringVar(&o.listen, "listen", "127.0.0.1:18530", "server: host:port of the connection manager (port 0: any)")
	f.StringVar(&o.connect, "connect", "", "client: the server's --listen address")
	f.StringVar(&o.provider, "provider", provider.Default, "RDMA provider: "+strings.Join(provider.Names(), "|")+" (verbs needs a binary built with -tags verbs)")
	f.StringVar(&o.device, "device", "", "verbs: device name such as rxe0 (default: the first active one)")
	f.IntVar(&o.gidIndex, "gid-index", -1, "verbs: GID index (negative: pick a RoCE v2 GID automatically)")
	f.StringVar(&o.softAddr, "soft-addr", "", "soft: host:port of this side's software NIC (default: the address that reaches the peer, port 0)")
	f.StringVar(&o.tcpListen, "tcp-listen", "", "server: host:port of the TCP baseline (default: --listen's host, the next port)")
	f.StringVar(&o.tcpAddr, "tcp", "", "client: the TCP baseline's host:port (default: --connect's host, the next port)")
	f.StringVar(&o.depths, "depths", "1,16,64", "calls in flight for the null-call tests (at most "+strconv.Itoa(rpc.DefaultSlots)+")")
	f.StringVar(&o.sizes, "sizes", "1K,4K,64K,1M", "payload sizes of the echo tests (suffixes K and M are binary; empty: none)")
	f.DurationVar(&o.duration, "duration", 2*time.Second, "measuring time of each test (RPC and TCP each get this much, in turns)")
	f.IntVar(&o.workers, "workers", 0, "server: completion-queue workers (0: rdma/rpc's default)")
	f.BoolVar(&o.asJSON, "json", false, "print the tables as JSON, one object per line")
	f.BoolVar(&o.exitWithParent, "exit-with-parent", false, "server: exit when standard input closes (set by the client that spawns it)")
	f.MarkHidden("exit-with-parent")
	return cmd
}

// benchRPCPlan is what the client measures, parsed from the flags.
type benchRPCPlan struct {
	depths   []int
	sizes    []int
	duration time.Duration
}

func (o *benchRPCOptions) plan() (*benchRPCPlan, error) {
	p := &benchRPCPlan{duration: o.duration}
	if o.duration < 10*time.Millisecond {
		return nil, fmt.Errorf("--duration %v: give at least 10ms per test", o.duration)
	}
	for _, s := range strings.Split(o.depths, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || d < 1 || d > rpc.DefaultSlots {
			return nil, fmt.Errorf("--depths: %q: give calls in flight from 1 to %d", s, rpc.DefaultSlots)
		}
		p.depths = append(p.depths, d)
	}
	if strings.TrimSpace(o.sizes) != "" {
		for _, s := range strings.Split(o.sizes, ",") {
			n, err := parseRPCBenchSize(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("--sizes: %w", err)
			}
			p.sizes = append(p.sizes, n)
		}
	}
	return p, nil
}

// parseRPCBenchSize parses 4096, 4K, 4KiB, 1M, 1MiB, up to rpc's default
// largest message.
func parseRPCBenchSize(s string) (int, error) {
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
	if err != nil || n <= 0 || n*mult > rpc.DefaultMaxMessage {
		return 0, fmt.Errorf("size %q: give a byte count from 1 to %s, such as 4096 or 64K", s, humanBytes(rpc.DefaultMaxMessage))
	}
	return n * mult, nil
}

func runBenchRPC(ctx context.Context, w io.Writer, o *benchRPCOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.serve && o.connect != "" {
		return errors.New("--serve and --connect exclude each other: the server listens, the client connects")
	}
	if o.serve {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
		defer stop()
		return serveBenchRPC(ctx, o, os.Stdout)
	}
	plan, err := o.plan()
	if err != nil {
		return err
	}
	server, tcpAddr, spawned := o.connect, o.tcpAddr, ""
	if server == "" {
		child, addr, tcp, err := spawnBenchRPCServer(ctx, o)
		if err != nil {
			return err
		}
		defer child.stop()
		server, tcpAddr = addr, tcp
		spawned = fmt.Sprintf("server: child process %d on %s, TCP baseline on %s", child.cmd.Process.Pid, addr, tcp)
	}
	if tcpAddr == "" {
		if tcpAddr, err = nextPort(server); err != nil {
			return fmt.Errorf("--connect %q: %w (give --tcp)", server, err)
		}
	}
	tables, err := runBenchRPCClient(ctx, o, plan, server, tcpAddr, spawned)
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

// nextPort returns addr with its port plus one: where a server listens for
// the TCP baseline by default.
func nextPort(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil || p == 0 || p >= 65535 {
		return "", fmt.Errorf("port %q has no next port", port)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+1)), nil
}

// rpcBenchDeviceConfig is the rdma.DeviceConfig of one side; peer is the
// address the other side is reached at, which picks the soft NIC's.
func (o *benchRPCOptions) deviceConfig(peer string) (rdma.DeviceConfig, error) {
	cfg := rdma.DeviceConfig{Device: o.device, GIDIndex: o.gidIndex, Addr: o.softAddr}
	if cfg.Addr != "" || o.provider != "soft" {
		return cfg, nil
	}
	host, port, err := net.SplitHostPort(peer)
	if err != nil {
		return cfg, fmt.Errorf("address %q: %w", peer, err)
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		return cfg, fmt.Errorf("address %q: the soft provider needs the address peers reach this host at; give --soft-addr", peer)
	}
	// The source address the kernel picks towards the peer (no packet
	// is sent).
	c, err := net.Dial("udp", net.JoinHostPort(host, port))
	if err != nil {
		return cfg, fmt.Errorf("find the local address towards %s: %w (give --soft-addr)", peer, err)
	}
	defer c.Close()
	cfg.Addr = net.JoinHostPort(c.LocalAddr().(*net.UDPAddr).IP.String(), "0")
	return cfg, nil
}

// benchRPCReadyPrefix starts the line a server prints once it accepts
// connections, followed by its connection manager's and its TCP
// baseline's addresses.
const benchRPCReadyPrefix = "octoctl-bench-rpc-ready "

// benchRPCChild is a server started by the client on loopback.
type benchRPCChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func spawnBenchRPCServer(ctx context.Context, o *benchRPCOptions) (*benchRPCChild, string, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, "", "", fmt.Errorf("find this program to start the server: %w", err)
	}
	args := []string{"bench", "rpc", "--serve", "--exit-with-parent", "--listen", "127.0.0.1:0", "--tcp-listen", "127.0.0.1:0",
		"--provider", o.provider, "--gid-index", strconv.Itoa(o.gidIndex), "--workers", strconv.Itoa(o.workers)}
	if o.device != "" {
		args = append(args, "--device", o.device)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", "", err
	}
	// The child exits when its stdin closes, so it cannot outlive a
	// client that dies without stopping it.
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", "", fmt.Errorf("start the bench server: %w", err)
	}
	child := &benchRPCChild{cmd: cmd, stdin: stdin}
	ready := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line, ok := strings.CutPrefix(sc.Text(), benchRPCReadyPrefix); ok {
				ready <- strings.Fields(line)
			}
		}
		close(ready)
	}()
	select {
	case f, ok := <-ready:
		if !ok || len(f) != 2 {
			child.stop()
			return nil, "", "", errors.New("the bench server exited before it was ready (its errors are above)")
		}
		return child, f[0], f[1], nil
	case <-time.After(30 * time.Second):
		child.stop()
		return nil, "", "", errors.New("the bench server did not become ready within 30s")
	case <-ctx.Done():
		child.stop()
		return nil, "", "", ctx.Err()
	}
}

// stop ends the child by its PID: SIGTERM, then SIGKILL if it lingers.
func (c *benchRPCChild) stop() {
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

// rpcLat summarizes round trips in microseconds.
type rpcLat struct {
	n        int
	p50, p99 float64
}

func summarizeRPC(samples []time.Duration) rpcLat {
	if len(samples) == 0 {
		return rpcLat{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	at := func(q float64) float64 {
		return float64(s[min(int(q*float64(len(s))), len(s)-1)].Nanoseconds()) / 1e3
	}
	return rpcLat{n: len(s), p50: at(0.50), p99: at(0.99)}
}

func usec(v float64) string { return fmt.Sprintf("%.1f", v) }
