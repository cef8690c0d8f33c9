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
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/client/proctest"
)

// This file is `octoctl bench meta`: namespace operations through the
// client library against a cluster, each beside a null RPC measured at the
// same depth in the same run, and the null RPC beside a TCP ping-pong of
// the same size between two processes. The workloads are in
// bench_meta_ops.go. Like `bench rdma`, it measures a cluster it is given
// (--server) or starts one of its own: three `octofs serve` processes on
// loopback, stopped when it ends.

type benchMetaOptions struct {
	cluster  *clusterFlags
	octofs   string
	nodes    int
	duration time.Duration
	depths   string
	tests    string
	dirSize  int
	keepDir  string
	tcpServe bool
	profile  string
}

func newBenchMetaCmd() *cobra.Command {
	o := &benchMetaOptions{}
	cmd := &cobra.Command{
		Use:   "meta",
		Short: "Namespace operation rates and null-RPC latency through the client library, beside a null RPC and TCP",
		Long: `Measures the namespace through the client library (package client), the way
the FUSE mount and programs reach it:

  a null RPC's round trip (p50, p99) and rate, beside a TCP request/response
  of the same size between this process and another one on the same host;
  create, stat, unlink, mkdir, readdir and rename rates with 1 and 16
  operations in flight, each beside the null-RPC rate at the same depth,
  and the RPCs each operation took (round trips per op).

Without --server it starts a 3-node cluster of ` + "`octofs serve`" + ` processes on
loopback (file-backed regions under a temporary directory; --octofs names
the program, by default the octofs next to octoctl or on PATH) and stops
it at the end. With --server and the token it measures that cluster
instead, in a directory of its own that it removes afterwards.

Targets (issue 12): null RPC p50 at most 1.3x the TCP ping-pong; stat at
least 0.7x and single-partition create at least 0.5x the null-RPC rate at
the same depth; 16 in flight at least 3x the rate of 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.tcpServe {
				return serveBenchMetaTCP(cmd.Context(), cmd.OutOrStdout())
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopProfile, err := startCPUProfile(o.profile)
			if err != nil {
				return err
			}
			defer stopProfile()
			return runBenchMeta(ctx, cmd, o)
		},
	}
	o.cluster = addClusterFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.octofs, "octofs", "", "the octofs program for the cluster this command starts (default: next to octoctl, else on PATH)")
	f.IntVar(&o.nodes, "nodes", 3, "nodes of the cluster this command starts")
	f.DurationVar(&o.duration, "duration", 2*time.Second, "measuring time of each test at each depth")
	f.StringVar(&o.depths, "depths", "1,16", "operations in flight, comma-separated")
	f.StringVar(&o.tests, "tests", "null,create,stat,unlink,mkdir,readdir,rename", "tests to run")
	f.IntVar(&o.dirSize, "readdir-entries", 100, "entries of the directory readdir lists (one request per listing)")
	f.StringVar(&o.keepDir, "work-dir", "", "where the started cluster's data goes (default: a temporary directory, removed)")
	f.StringVar(&o.profile, "cpuprofile", "", "write a CPU profile of this process (the client side) to this file")
	f.BoolVar(&o.tcpServe, "tcp-serve", false, "run the TCP baseline's echo server (started by the benchmark itself)")
	f.MarkHidden("tcp-serve")
	return cmd
}

// benchMetaPlan is what to measure.
type benchMetaPlan struct {
	duration time.Duration
	depths   []int
	tests    map[string]bool
	dirSize  int
}

var benchMetaTests = []string{"null", "create", "stat", "unlink", "mkdir", "readdir", "rename"}

func (o *benchMetaOptions) plan() (*benchMetaPlan, error) {
	p := &benchMetaPlan{duration: o.duration, tests: map[string]bool{}, dirSize: o.dirSize}
	if o.duration < 50*time.Millisecond {
		return nil, fmt.Errorf("--duration %v: give at least 50ms per test", o.duration)
	}
	if o.dirSize < 1 || o.dirSize > 100000 {
		return nil, fmt.Errorf("--readdir-entries %d: give 1 to 100000", o.dirSize)
	}
	for _, s := range strings.Split(o.depths, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || d < 1 || d > 256 {
			return nil, fmt.Errorf("--depths: %q is not a depth from 1 to 256", s)
		}
		p.depths = append(p.depths, d)
	}
	for _, t := range strings.Split(o.tests, ",") {
		t = strings.TrimSpace(t)
		if !strings.Contains(","+strings.Join(benchMetaTests, ",")+",", ","+t+",") {
			return nil, fmt.Errorf("--tests: unknown test %q (have %s)", t, strings.Join(benchMetaTests, ", "))
		}
		p.tests[t] = true
	}
	return p, nil
}

func runBenchMeta(ctx context.Context, cmd *cobra.Command, o *benchMetaOptions) error {
	plan, err := o.plan()
	if err != nil {
		return err
	}
	admin, token := o.cluster.servers, ""
	var where string
	if cmd.Flags().Changed("server") || os.Getenv("OCTOFS_ADMIN") != "" {
		if token, err = o.cluster.tokenValue(); err != nil {
			return err
		}
		if token == "" {
			return errors.New("bench meta needs the cluster token: pass --token-file <data-dir>/token (of any node), --token or OCTOFS_TOKEN")
		}
		where = "cluster at " + strings.Join(admin, ",")
	} else {
		tc, dir, err := startBenchCluster(ctx, o)
		if err != nil {
			return err
		}
		defer func() {
			tc.Stop()
			if o.keepDir == "" {
				os.RemoveAll(dir)
			}
		}()
		admin, token = tc.AdminAddrs(), tc.Token
		where = fmt.Sprintf("%d octofs serve processes on loopback started by this command (data in %s)", len(tc.Nodes), dir)
	}
	tcp, err := spawnBenchMetaTCP(ctx)
	if err != nil {
		return err
	}
	defer tcp.stop()

	cctx, cancel := context.WithTimeout(ctx, o.cluster.timeout)
	c, err := client.New(cctx, client.Config{Admin: admin, Token: token, Name: "octoctl-bench-meta", OpTimeout: 30 * time.Second})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	tables, err := benchMeta(ctx, c, tcp.addr, plan, where)
	if err != nil {
		return err
	}
	for _, t := range tables {
		if err := t.print(cmd.OutOrStdout(), o.cluster.json); err != nil {
			return err
		}
	}
	return nil
}

// startBenchCluster starts the cluster the benchmark runs against.
func startBenchCluster(ctx context.Context, o *benchMetaOptions) (*proctest.Cluster, string, error) {
	bin, err := findOctofs(o.octofs)
	if err != nil {
		return nil, "", err
	}
	dir := o.keepDir
	if dir == "" {
		// Regions on tmpfs where there is one: a plain file on a disk
		// makes every durable append an msync to the disk, which measures
		// the disk, not octofs (pmem persists in a fence).
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
		if dir, err = os.MkdirTemp(base, "octoctl-bench-meta-"); err != nil {
			return nil, "", err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	tc, err := proctest.Start(ctx, proctest.Options{Binary: bin, Dir: dir, Nodes: o.nodes, Args: []string{"--log-level", "warn"}})
	if err != nil {
		if o.keepDir == "" {
			os.RemoveAll(dir)
		}
		return nil, "", fmt.Errorf("start the benchmark's cluster: %w", err)
	}
	return tc, dir, nil
}

// findOctofs returns the octofs program: the one named, else the one next
// to this program, else the one on PATH.
func findOctofs(named string) (string, error) {
	if named != "" {
		return named, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "octofs")
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	p, err := exec.LookPath("octofs")
	if err != nil {
		return "", errors.New("no octofs program next to octoctl or on PATH: build it (make build) or give --octofs, or measure a running cluster with --server")
	}
	return p, nil
}

// benchMetaTCPPrefix starts the line the TCP echo child prints once it
// listens, followed by its address.
const benchMetaTCPPrefix = "octoctl-bench-meta-tcp "

// serveBenchMetaTCP runs the TCP baseline's server until stdin closes.
func serveBenchMetaTCP(ctx context.Context, w io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	fmt.Fprintf(w, "%s%s\n", benchMetaTCPPrefix, ln.Addr())
	serveTCPBaseline(ctx, ln)
	return nil
}

// benchMetaTCP is the TCP baseline's child process.
type benchMetaTCP struct {
	child *benchChild
	addr  string
}

func (t *benchMetaTCP) stop() { t.child.stop() }

// spawnBenchMetaTCP starts `octoctl bench meta --tcp-serve`: the TCP
// ping-pong runs between two processes, as the RPCs do.
func spawnBenchMetaTCP(ctx context.Context) (*benchMetaTCP, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start the TCP baseline: %w", err)
	}
	cmd := exec.Command(exe, "bench", "meta", "--tcp-serve")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the TCP baseline: %w", err)
	}
	child := &benchChild{cmd: cmd, stdin: stdin}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), benchMetaTCPPrefix); ok {
				ready <- addr
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			child.stop()
			return nil, errors.New("the TCP baseline exited before it was ready")
		}
		return &benchMetaTCP{child: child, addr: addr}, nil
	case <-time.After(30 * time.Second):
		child.stop()
		return nil, errors.New("the TCP baseline did not start within 30s")
	case <-ctx.Done():
		child.stop()
		return nil, ctx.Err()
	}
}
