package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	gofuse "github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/cobra"

	"github.com/octofs/octofs/client"
	octofuse "github.com/octofs/octofs/fuse"
)

// This file is `octoctl bench fuse`: file operations through an octofs
// FUSE mount, beside the same operations through go-fuse's loopback file
// system over tmpfs (the ceiling of a Go FUSE server on this machine) and
// through the client library's native API (what FUSE costs). The targets
// take turns, round by round, so that all three see the same load on a
// shared machine; both mounts are served by this process with the same
// mount options. The targets are in bench_fuse_targets.go.

type benchFuseOptions struct {
	cluster    *clusterFlags
	octofs     string
	nodes      int
	duration   time.Duration
	rounds     int
	workers    int
	files      int
	size       int
	keepDir    string
	readAhead  int
	cpuProfile string
	// worker and workerRoot make this process a child that runs one test
	// in a mounted directory (see benchFuseTarget).
	worker     string
	workerRoot string
}

func newBenchFuseCmd() *cobra.Command {
	o := &benchFuseOptions{}
	cmd := &cobra.Command{
		Use:   "fuse",
		Short: "File operations through an octofs FUSE mount, beside go-fuse's loopback over tmpfs and the native API",
		Long: `Measures, through an octofs FUSE mount, go-fuse's loopback file system over
tmpfs (the FUSE ceiling on this machine) and the client library's native
API (client.FS):

  create (open O_CREAT|O_EXCL, close) with --workers goroutines in one
  directory and in a directory each, stat, open-read-close of 4 KiB files,
  remove (in one directory and in a directory each); 1 MiB sequential write
  and read bandwidth of one --file-mib file.

The three targets take turns: --rounds rounds, each running every test on
each target for --duration, in a rotating order; a figure is the
operations of all rounds over their time. For the octofs mount and the
native API the table also shows the cluster RPCs per operation (from the
client's counters), which is where their time goes: the kernel serialises
creates and removes in one directory, so their rate there is one over the
sum of the round trips each takes.

Needs root and /dev/fuse (both mounts are made by this process). Without
--server it starts a 3-node cluster of ` + "`octofs serve`" + ` processes on loopback
with regions on tmpfs (stopped at the end); with --server and the token it
measures that cluster, in a directory of its own that it removes
afterwards.

Targets (issue 14): metadata rates and bandwidth through the octofs mount
at least 0.7x the loopback's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.worker != "" {
				return runBenchFuseWorker(cmd.OutOrStdout(), o.workerRoot, o.worker)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchFuse(ctx, cmd, o)
		},
	}
	o.cluster = addClusterFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.octofs, "octofs", "", "the octofs program for the cluster this command starts (default: next to octoctl, else on PATH)")
	f.IntVar(&o.nodes, "nodes", 3, "nodes of the cluster this command starts")
	f.DurationVar(&o.duration, "duration", time.Second, "measuring time of each test on each target in each round")
	f.IntVar(&o.rounds, "rounds", 3, "rounds of every test on every target, taking turns")
	f.IntVar(&o.workers, "workers", 4, "goroutines issuing metadata operations at once")
	f.IntVar(&o.files, "files", 2000, "most files a create test makes in a round (and the stat, read and remove tests use)")
	f.IntVar(&o.size, "file-mib", 64, "size of the bandwidth tests' file, in MiB")
	f.StringVar(&o.keepDir, "work-dir", "", "where the started cluster's data goes (default: a temporary directory on tmpfs, removed)")
	f.IntVar(&o.readAhead, "max-readahead", octofuse.DefaultMaxReadAhead, "both mounts' read-ahead, in bytes")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (which serves both mounts) to this file")
	f.StringVar(&o.worker, "worker", "", "run one test (JSON) in --worker-root and print the result: what the command runs in its child processes")
	f.StringVar(&o.workerRoot, "worker-root", "", "the directory --worker works in")
	f.MarkHidden("worker")
	f.MarkHidden("worker-root")
	return cmd
}

// benchFuseTest is one row of the table.
type benchFuseTest struct {
	name string
	// kind names what the test does (benchFuseSpec.Test).
	kind string
	// bandwidth: the figure is MiB/s, not operations per second.
	bandwidth bool
}

var benchFuseTests = []benchFuseTest{
	{name: "create, 1 dir", kind: "create-shared"},
	{name: "create, dir per worker", kind: "create-own"},
	{name: "stat", kind: "stat"},
	{name: "open-read-close 4KiB", kind: "read-small"},
	{name: "remove, 1 dir", kind: "remove-shared"},
	{name: "remove, dir per worker", kind: "remove-own"},
	{name: "write 1MiB seq (MiB/s)", kind: "write-seq", bandwidth: true},
	{name: "read 1MiB seq (MiB/s)", kind: "read-seq", bandwidth: true},
}

// benchFuseSum accumulates one test on one target over the rounds.
type benchFuseSum struct {
	ops     float64 // operations, or MiB
	count   int     // operations (for RPCs per operation)
	elapsed time.Duration
	rpcs    uint64
}

func (s benchFuseSum) rate() float64 {
	if s.elapsed <= 0 {
		return 0
	}
	return s.ops / s.elapsed.Seconds()
}

func (s benchFuseSum) rpcsPerOp() string {
	if s.count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", float64(s.rpcs)/float64(s.count))
}

// rpcCount is the client's RPCs so far, keep-alives (which tick on their
// own) left out.
func rpcCount(c *client.Client) uint64 {
	st := c.Stats()
	return st.TotalRPCs() - st.RPCs["keepalive"]
}

func runBenchFuse(ctx context.Context, cmd *cobra.Command, o *benchFuseOptions) error {
	if os.Geteuid() != 0 {
		return errors.New("bench fuse mounts two file systems: run it as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("bench fuse needs /dev/fuse (%v): modprobe fuse", err)
	}
	if o.workers < 1 || o.files < o.workers || o.size < 1 || o.rounds < 1 || o.duration < 50*time.Millisecond {
		return errors.New("--workers, --files, --file-mib, --rounds must be positive (files at least workers), --duration at least 50ms")
	}
	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	admin, token := o.cluster.servers, ""
	var where string
	if cmd.Flags().Changed("server") || os.Getenv("OCTOFS_ADMIN") != "" {
		if token, err = o.cluster.tokenValue(); err != nil {
			return err
		}
		if token == "" {
			return errors.New("bench fuse needs the cluster token: pass --token-file <data-dir>/token (of any node), --token or OCTOFS_TOKEN")
		}
		where = "cluster at " + strings.Join(admin, ",")
	} else {
		tc, dir, err := startBenchCluster(ctx, &benchMetaOptions{octofs: o.octofs, nodes: o.nodes, keepDir: o.keepDir})
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
		where = fmt.Sprintf("%d octofs serve processes on loopback started by this command", len(tc.Nodes))
	}
	cctx, cancel := context.WithTimeout(ctx, o.cluster.timeout)
	c, err := client.New(cctx, client.Config{Admin: admin, Token: token, Name: "octoctl-bench-fuse", OpTimeout: 30 * time.Second})
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()

	// The octofs mount.
	octoMnt, err := os.MkdirTemp("", "octoctl-bench-fuse-octofs-")
	if err != nil {
		return err
	}
	defer os.Remove(octoMnt)
	srv, err := octofuse.Mount(octoMnt, c, octofuse.Options{MaxReadAhead: o.readAhead})
	if err != nil {
		return err
	}
	defer srv.Unmount()

	// The loopback over tmpfs, with the same options.
	shm := "/dev/shm"
	if st, err := os.Stat(shm); err != nil || !st.IsDir() {
		shm = os.TempDir()
	}
	backing, err := os.MkdirTemp(shm, "octoctl-bench-fuse-backing-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(backing)
	loopMnt, err := os.MkdirTemp("", "octoctl-bench-fuse-loopback-")
	if err != nil {
		return err
	}
	defer os.Remove(loopMnt)
	lroot, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		return err
	}
	timeout := octofuse.DefaultTimeout
	neg := time.Duration(0)
	lsrv, err := gofs.Mount(loopMnt, lroot, &gofs.Options{EntryTimeout: &timeout, AttrTimeout: &timeout, NegativeTimeout: &neg,
		MountOptions: gofuse.MountOptions{FsName: "loopback", Name: "loopback", MaxWrite: octofuse.DefaultMaxWrite,
			MaxReadAhead: o.readAhead, MaxBackground: octofuse.DefaultMaxBackground, DirectMount: true,
			EnableLocks: true, DisableReadDirPlus: true, Options: []string{"default_permissions"},
			// go-fuse splices the loopback's reads from the backing file
			// through a pipe, which fails for 1 MiB replies when the pipe
			// cannot grow past 1 MiB (fs.pipe-max-size) and logs each time;
			// pread and writev, as octofs's replies go, is what it falls
			// back to anyway.
			DisableSplice:     true,
			ExtraCapabilities: gofuse.CAP_ATOMIC_O_TRUNC}})
	if err != nil {
		return fmt.Errorf("mount the loopback: %w", err)
	}
	defer lsrv.Unmount()
	if err := octofuse.SetReadAhead(loopMnt, o.readAhead); err != nil {
		return err
	}

	// Each target works in a directory of its own.
	run := fmt.Sprintf("bench-fuse-%d", time.Now().UnixNano())
	octoDir := filepath.Join(octoMnt, run)
	if err := os.Mkdir(octoDir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(octoDir)
	native := nativeFS{c.FS(client.Cred{}), "/" + run}
	targets := []benchFuseTarget{
		{name: "octofs", root: octoDir, c: c},
		{name: "loopback", root: loopMnt},
		{name: "native", fs: native, c: c},
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	// Warm-up, untimed: the first write to each partition pins it through
	// raft, which would be charged to whichever target ran first.
	if err := native.mkdir("warm"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for i := range o.files {
		name := fmt.Sprintf("warm/%d", i)
		if err := native.writeSmall(name, []byte("warm")); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if err := native.remove(name); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	if err := native.remove("warm"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	sums := map[string]map[string]*benchFuseSum{}
	for _, t := range benchFuseTests {
		sums[t.name] = map[string]*benchFuseSum{}
		for _, tg := range targets {
			sums[t.name][tg.name] = &benchFuseSum{}
		}
	}
	for round := range o.rounds {
		for k := range targets {
			tg := targets[(round+k)%len(targets)]
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := benchFuseRound(ctx, o, self, tg, round, sums); err != nil {
				return fmt.Errorf("%s, round %d: %w", tg.name, round+1, err)
			}
		}
	}
	t := &benchTable{
		Title: fmt.Sprintf("bench fuse: ops/s (or MiB/s) with %d workers, %d rounds of %v per test and target, taking turns; %s",
			o.workers, o.rounds, o.duration, where),
		Columns: []string{"TEST", "OCTOFS FUSE", "LOOPBACK FUSE (tmpfs)", "OCTOFS/LOOPBACK", "NATIVE API", "FUSE/NATIVE", "RPCs/OP FUSE", "RPCs/OP NATIVE"},
	}
	for _, test := range benchFuseTests {
		r := sums[test.name]
		oc, lo, na := r["octofs"], r["loopback"], r["native"]
		fr, nr := "-", "-"
		if !test.bandwidth {
			fr, nr = oc.rpcsPerOp(), na.rpcsPerOp()
		}
		t.add(test.name, figure(oc.rate()), figure(lo.rate()), ratio(oc.rate(), lo.rate()), figure(na.rate()), ratio(oc.rate(), na.rate()), fr, nr)
	}
	t.note("both mounts are served by this process with the same options: 1 MiB max write, %d KiB read-ahead, 1s entry and attribute timeouts, default_permissions", o.readAhead>>10)
	t.note("the kernel takes a directory's lock for each create and remove in it: in one directory they run one at a time, one round trip chain each")
	t.note("stat through a mount is mostly the kernel's attribute cache (a lookup per file and second); the native API resolves the path at the cluster every time")
	t.note("targets (issue 14): OCTOFS/LOOPBACK at least 0.70x for every row")
	return t.print(cmd.OutOrStdout(), o.cluster.json)
}

// benchFuseTarget is a target: a mounted directory, which a child process
// works in (so that the process making the system calls is not the one
// answering them, as with any real mount), or the native API, used in
// this process. c, if set, is the client whose RPCs are counted.
type benchFuseTarget struct {
	name string
	root string
	fs   benchFS
	c    *client.Client
}

// benchFuseRound runs every test once on tg, in a directory of the round's,
// and adds the results to sums.
func benchFuseRound(ctx context.Context, o *benchFuseOptions, self string, tg benchFuseTarget, round int, sums map[string]map[string]*benchFuseSum) error {
	dir := fmt.Sprintf("r%d", round)
	run := func(spec benchFuseSpec) (benchFuseResult, error) {
		spec.Dir, spec.Workers, spec.Duration, spec.Files, spec.SizeMiB = dir, o.workers, o.duration, o.files/o.workers, o.size
		if tg.fs != nil {
			return runBenchFuseSpec(tg.fs, spec)
		}
		return runBenchFuseChild(ctx, self, tg.root, spec)
	}
	if _, err := run(benchFuseSpec{Test: "setup"}); err != nil {
		return err
	}
	var made map[string][]int
	for _, test := range benchFuseTests {
		var rpcs uint64
		if tg.c != nil {
			rpcs = rpcCount(tg.c)
		}
		res, err := run(benchFuseSpec{Test: test.kind, Made: made[test.kind]})
		if err != nil {
			return err
		}
		s := sums[test.name][tg.name]
		s.elapsed += res.Elapsed
		if test.bandwidth {
			s.ops += float64(res.Ops * o.size)
		} else {
			s.ops += float64(res.Ops)
			s.count += res.Ops
			if tg.c != nil {
				s.rpcs += rpcCount(tg.c) - rpcs
			}
		}
		switch test.kind {
		case "create-shared":
			made = map[string][]int{"stat": res.Made, "read-small": res.Made, "remove-shared": res.Made, "write-small": res.Made}
		case "create-own":
			made["remove-own"] = res.Made
		case "stat":
			// The files are written (untimed) for the reads.
			if _, err := run(benchFuseSpec{Test: "write-small", Made: made["write-small"]}); err != nil {
				return err
			}
		}
	}
	_, err := run(benchFuseSpec{Test: "teardown"})
	return err
}

// benchFuseSpec is one test of one round on one target, as the child
// process gets it (JSON in --worker).
type benchFuseSpec struct {
	Test     string        `json:"test"`
	Dir      string        `json:"dir"`
	Workers  int           `json:"workers"`
	Duration time.Duration `json:"duration"`
	// Files is how many files a worker creates at most.
	Files int `json:"files"`
	// Made is how many files each worker created (for the tests that use
	// them).
	Made    []int `json:"made,omitempty"`
	SizeMiB int   `json:"size_mib"`
}

// benchFuseResult is a test's outcome: operations (or whole-file passes
// for the bandwidth tests) in Elapsed, and for a create how many files
// each worker made.
type benchFuseResult struct {
	Ops     int           `json:"ops"`
	Elapsed time.Duration `json:"elapsed"`
	Made    []int         `json:"made,omitempty"`
}

// runBenchFuseChild runs spec in a child process working in root.
func runBenchFuseChild(ctx context.Context, self, root string, spec benchFuseSpec) (benchFuseResult, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return benchFuseResult{}, err
	}
	cmd := exec.CommandContext(ctx, self, "bench", "fuse", "--worker", string(js), "--worker-root", root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return benchFuseResult{}, fmt.Errorf("%s: %w: %s", spec.Test, err, strings.TrimSpace(stderr.String()))
	}
	var res benchFuseResult
	if err := json.Unmarshal(out, &res); err != nil {
		return benchFuseResult{}, fmt.Errorf("%s: the worker's answer %q: %w", spec.Test, out, err)
	}
	return res, nil
}

// runBenchFuseWorker is the child process: it runs one test in root and
// prints the result as JSON.
func runBenchFuseWorker(w io.Writer, root, specJSON string) error {
	var spec benchFuseSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		return fmt.Errorf("--worker: %w", err)
	}
	res, err := runBenchFuseSpec(dirFS{root}, spec)
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(res)
}

// runBenchFuseSpec runs one test on fsys.
func runBenchFuseSpec(fsys benchFS, spec benchFuseSpec) (benchFuseResult, error) {
	dir := spec.Dir
	shared := func(w, i int) string { return fmt.Sprintf("%s/w%d-%d", dir, w, i) }
	own := func(w, i int) string { return fmt.Sprintf("%s/w%d/%d", dir, w, i) }
	result := func(n int, el time.Duration, err error) (benchFuseResult, error) {
		if err != nil {
			return benchFuseResult{}, fmt.Errorf("%s: %w", spec.Test, err)
		}
		return benchFuseResult{Ops: n, Elapsed: el}, nil
	}
	// each runs op on every file each worker made, until the time is up
	// (cycling) or, with once, the files run out.
	each := func(once bool, limit time.Duration, op func(name string) error, name func(w, i int) string) (benchFuseResult, error) {
		if len(spec.Made) != spec.Workers {
			return benchFuseResult{}, fmt.Errorf("%s: no files made", spec.Test)
		}
		return result(timed(spec.Workers, limit, 0, func(w, i int) error {
			k := spec.Made[w]
			if k == 0 || once && i >= k {
				return errStop
			}
			return op(name(w, i%k))
		}))
	}
	switch spec.Test {
	case "setup":
		if err := fsys.mkdir(dir); err != nil {
			return result(0, 0, err)
		}
		for w := range spec.Workers {
			if err := fsys.mkdir(fmt.Sprintf("%s/w%d", dir, w)); err != nil {
				return result(0, 0, err)
			}
		}
		return benchFuseResult{}, nil
	case "teardown":
		for w := range spec.Workers {
			if err := fsys.remove(fmt.Sprintf("%s/w%d", dir, w)); err != nil {
				return result(0, 0, err)
			}
		}
		return result(0, 0, fsys.remove(dir))
	case "create-shared", "create-own":
		name := shared
		if spec.Test == "create-own" {
			name = own
		}
		made := make([]int, spec.Workers)
		res, err := result(timed(spec.Workers, spec.Duration, spec.Files, func(w, i int) error {
			if err := fsys.create(name(w, i)); err != nil {
				return err
			}
			made[w]++
			return nil
		}))
		res.Made = made
		return res, err
	case "stat":
		return each(false, spec.Duration, fsys.stat, shared)
	case "write-small":
		small := make([]byte, 4096)
		return each(true, time.Hour, func(name string) error { return fsys.writeSmall(name, small) }, shared)
	case "read-small":
		bufs := make(chan []byte, spec.Workers)
		for range spec.Workers {
			bufs <- make([]byte, 4096)
		}
		return each(false, spec.Duration, func(name string) error {
			b := <-bufs
			defer func() { bufs <- b }()
			return fsys.readSmall(name, b)
		}, shared)
	case "remove-shared":
		return each(true, time.Hour, fsys.remove, shared)
	case "remove-own":
		return each(true, time.Hour, fsys.remove, own)
	case "write-seq", "read-seq":
		chunk := make([]byte, 1<<20)
		for i := range chunk {
			chunk[i] = byte(i * 31)
		}
		big := dir + "/big"
		if spec.Test == "write-seq" {
			// A fresh file first (untimed), then overwrites.
			if err := fsys.writeSeq(big, chunk, spec.SizeMiB); err != nil {
				return result(0, 0, err)
			}
			return result(timed(1, spec.Duration, 0, func(_, _ int) error { return fsys.writeSeq(big, chunk, spec.SizeMiB) }))
		}
		res, err := result(timed(1, spec.Duration, 0, func(_, _ int) error {
			got, err := fsys.readSeq(big, chunk)
			if err == nil && got != spec.SizeMiB<<20 {
				err = fmt.Errorf("read %d bytes of %d", got, spec.SizeMiB<<20)
			}
			return err
		}))
		if err == nil {
			err = fsys.remove(big)
		}
		return res, err
	}
	return benchFuseResult{}, fmt.Errorf("unknown test %q", spec.Test)
}

// errStop ends a worker of timed early without an error.
var errStop = errors.New("stop")

// timed runs op(worker, i) for i = 0, 1, ... in each of workers
// goroutines until limit passes or a worker has done max operations (if
// max > 0) or op returns errStop, and returns the operations done and the
// time taken.
func timed(workers int, limit time.Duration, max int, op func(w, i int) error) (int, time.Duration, error) {
	var (
		wg    sync.WaitGroup
		total atomic.Int64
		mu    sync.Mutex
		first error
	)
	start := time.Now()
	deadline := start.Add(limit)
	for w := range workers {
		wg.Go(func() {
			for i := 0; max <= 0 || i < max; i++ {
				if time.Now().After(deadline) {
					return
				}
				if err := op(w, i); err != nil {
					if err != errStop {
						mu.Lock()
						if first == nil {
							first = err
						}
						mu.Unlock()
					}
					return
				}
				total.Add(1)
			}
		})
	}
	wg.Wait()
	return int(total.Load()), time.Since(start), first
}
