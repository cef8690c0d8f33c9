package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/client/proctest"
	"github.com/octofs/octofs/rdma/provider"
)

// This file is `octoctl bench data`: file data through the client
// library's native API (package client: FS, FSFile, registered buffers)
// against a cluster, each figure beside the raw one-sided RDMA operation
// of the same provider, from the same process, on the same remote memory,
// in the same run (a dpclient.Baseline: bench_data_raw.go). The
// measurements are in bench_data_run.go. Like `bench meta`, it measures a
// cluster it is given (--server) or starts one of its own: `octofs serve`
// processes on loopback, stopped when it ends.

type benchDataOptions struct {
	cluster  *clusterFlags
	octofs   string
	nodes    int
	size     string
	rounds   int
	reads    int
	provider string
	keepDir  string
}

func newBenchDataCmd() *cobra.Command {
	o := &benchDataOptions{}
	cmd := &cobra.Command{
		Use:   "data",
		Short: "File read/write bandwidth and 4 KiB read latency through the client library, beside raw RDMA READ/WRITE",
		Long: `Measures file data through the client library's native API (package client),
the way programs and the FUSE mount move it, each beside raw one-sided RDMA
operations of the same provider from the same process to the same node
memory, interleaved 4 MiB by 4 MiB in the same run:

  1 MiB sequential writes to a new file, beside raw 1 MiB WRITEs into the
  blocks of a fallocated file (as fresh: never written); overwrites and
  reads of the file, beside raw WRITEs and READs of the same blocks; and,
  for reference, raw 1 MiB WRITE and READ of one resident MiB again and
  again, which is what bench rdma measures;
  4 KiB random reads of the file with its extents cached, beside raw 4 KiB
  READs of the same blocks, with the client's counters: RDMA READs and
  RPCs per read.

Without --server it starts a cluster of --nodes ` + "`octofs serve`" + ` processes on
loopback (file-backed regions in a temporary directory on tmpfs where there is
one, else on disk; --work-dir chooses; --octofs names
the program, by default the octofs next to octoctl or on PATH) and stops it
at the end. With --server and the token it measures that cluster, in a
directory of its own that it removes afterwards.

Targets (issue 13): sequential read and write at least 0.9x the raw READ
and WRITE; 4 KiB reads with a warm extent cache one RDMA READ and no RPC
each, p50 at most 1.2x the raw 4 KiB READ.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchData(ctx, cmd, o)
		},
	}
	o.cluster = addClusterFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.octofs, "octofs", "", "the octofs program for the cluster this command starts (default: next to octoctl, else on PATH)")
	f.IntVar(&o.nodes, "nodes", 3, "nodes of the cluster this command starts")
	f.StringVar(&o.size, "size", "64M", "bytes of each file the bandwidth tests move (a multiple of 4M)")
	f.IntVar(&o.rounds, "rounds", 3, "rounds of the bandwidth tests (each a new file); the tables show medians")
	f.IntVar(&o.reads, "reads", 2000, "4 KiB reads of the latency test")
	f.StringVar(&o.provider, "provider", provider.Default, "RDMA provider of the client and the baseline: "+strings.Join(provider.Names(), "|"))
	f.StringVar(&o.keepDir, "work-dir", "", "where the started cluster's data goes (default: a temporary directory, removed)")
	return cmd
}

// benchDataPlan is what to measure.
type benchDataPlan struct {
	size   uint64
	rounds int
	reads  int
}

func (o *benchDataOptions) plan() (*benchDataPlan, error) {
	n, err := parseSize(o.size)
	if err != nil {
		return nil, fmt.Errorf("--size: %w", err)
	}
	p := &benchDataPlan{size: uint64(n), rounds: o.rounds, reads: o.reads}
	switch {
	case p.size%benchDataChunk != 0:
		return nil, fmt.Errorf("--size %s: give a multiple of 4M (the chunk size), such as 64M", o.size)
	case o.rounds < 1 || o.rounds > 100:
		return nil, fmt.Errorf("--rounds %d: give 1 to 100", o.rounds)
	case o.reads < 10 || o.reads > 1_000_000:
		return nil, fmt.Errorf("--reads %d: give 10 to 1000000", o.reads)
	}
	return p, nil
}

func runBenchData(ctx context.Context, cmd *cobra.Command, o *benchDataOptions) error {
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
			return errors.New("bench data needs the cluster token: pass --token-file <data-dir>/token (of any node), --token or OCTOFS_TOKEN")
		}
		where = "cluster at " + strings.Join(admin, ",")
	} else {
		tc, dir, err := startBenchDataCluster(ctx, o, plan)
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
		where = fmt.Sprintf("%d octofs serve processes on loopback started by this command (regions are files in %s)", len(tc.Nodes), dir)
	}
	cctx, cancel := context.WithTimeout(ctx, o.cluster.timeout)
	c, err := client.New(cctx, client.Config{Admin: admin, Token: token, Provider: o.provider, Name: "octoctl-bench-data", OpTimeout: 30 * time.Second})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, o.cluster.timeout)
	raw, err := openRawData(rctx, admin, token, o.provider)
	cancel()
	if err != nil {
		return err
	}
	defer raw.close()
	tables, err := benchData(ctx, c, raw, plan, where)
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

// startBenchDataCluster starts the cluster the benchmark runs against,
// with regions large enough for every round's two files.
func startBenchDataCluster(ctx context.Context, o *benchDataOptions, p *benchDataPlan) (*proctest.Cluster, string, error) {
	bin, err := findOctofs(o.octofs)
	if err != nil {
		return nil, "", err
	}
	dir := o.keepDir
	if dir == "" {
		// Regions on tmpfs where there is one (as bench meta does): on a
		// plain file on a disk every fence is an msync to the disk, which
		// measures the disk, not octofs (pmem persists in a fence). Give
		// --work-dir on a disk to see that.
		base := ""
		if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
			base = "/dev/shm"
		}
		if dir, err = os.MkdirTemp(base, "octoctl-bench-data-"); err != nil {
			return nil, "", err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	// Each node holds about its share of every file, with room for pools
	// and logs; at least the usual 256 MiB.
	region := max(int64(256<<20), int64(2*uint64(p.rounds+1)*p.size/uint64(max(o.nodes, 1)))+128<<20)
	tc, err := proctest.Start(ctx, proctest.Options{Binary: bin, Dir: dir, Nodes: o.nodes, RegionSize: region,
		Args: []string{"--log-level", "warn"}})
	if err != nil {
		if o.keepDir == "" {
			os.RemoveAll(dir)
		}
		return nil, "", fmt.Errorf("start the benchmark's cluster: %w", err)
	}
	return tc, dir, nil
}
