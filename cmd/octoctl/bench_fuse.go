package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
// through the client library's native API (what FUSE costs), taking turns
// in one run. Both mounts are served by this process with the same mount
// options.

type benchFuseOptions struct {
	cluster  *clusterFlags
	octofs   string
	nodes    int
	duration time.Duration
	workers  int
	files    int
	size     int
	keepDir  string
}

func newBenchFuseCmd() *cobra.Command {
	o := &benchFuseOptions{}
	cmd := &cobra.Command{
		Use:   "fuse",
		Short: "File operations through an octofs FUSE mount, beside go-fuse's loopback over tmpfs and the native API",
		Long: `Measures, through an octofs FUSE mount, go-fuse's loopback file system over
tmpfs (the FUSE ceiling on this machine) and the client library's native
API (client.FS), taking turns in one run:

  create (open O_CREAT|O_EXCL, close), stat, open-read-close of 4 KiB
  files, and remove rates with --workers goroutines; 1 MiB sequential
  write and read bandwidth of one file.

Needs root and /dev/fuse (both mounts are made by this process). Without
--server it starts a 3-node cluster of ` + "`octofs serve`" + ` processes on loopback
(stopped at the end); with --server and the token it measures that
cluster, in a directory of its own that it removes afterwards.

Targets (issue 14): metadata rates and bandwidth through the octofs mount
at least 0.7x the loopback's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBenchFuse(ctx, cmd, o)
		},
	}
	o.cluster = addClusterFlags(cmd)
	f := cmd.Flags()
	f.StringVar(&o.octofs, "octofs", "", "the octofs program for the cluster this command starts (default: next to octoctl, else on PATH)")
	f.IntVar(&o.nodes, "nodes", 3, "nodes of the cluster this command starts")
	f.DurationVar(&o.duration, "duration", 2*time.Second, "measuring time of each test on each target")
	f.IntVar(&o.workers, "workers", 4, "goroutines issuing metadata operations at once")
	f.IntVar(&o.files, "files", 2000, "most files a create test makes (and the stat, read and remove tests use)")
	f.IntVar(&o.size, "file-mib", 64, "size of the bandwidth tests' file, in MiB")
	f.StringVar(&o.keepDir, "work-dir", "", "where the started cluster's data goes (default: a temporary directory, removed)")
	return cmd
}

// benchFS is one target: a mount (a directory) or the native API.
type benchFS interface {
	create(name string) error
	stat(name string) error
	readSmall(name string, buf []byte) error
	writeSmall(name string, data []byte) error
	remove(name string) error
	mkdir(name string) error
	writeSeq(name string, chunk []byte, n int) error
	readSeq(name string, chunk []byte) (int, error)
}

// dirFS is a directory of a mounted file system.
type dirFS struct{ root string }

func (d dirFS) p(name string) string { return filepath.Join(d.root, name) }

func (d dirFS) create(name string) error {
	f, err := os.OpenFile(d.p(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
func (d dirFS) stat(name string) error { _, err := os.Stat(d.p(name)); return err }
func (d dirFS) readSmall(name string, buf []byte) error {
	f, err := os.Open(d.p(name))
	if err != nil {
		return err
	}
	_, err = f.Read(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
func (d dirFS) writeSmall(name string, data []byte) error {
	return os.WriteFile(d.p(name), data, 0o644)
}
func (d dirFS) remove(name string) error { return os.Remove(d.p(name)) }
func (d dirFS) mkdir(name string) error  { return os.Mkdir(d.p(name), 0o755) }
func (d dirFS) writeSeq(name string, chunk []byte, n int) error {
	f, err := os.OpenFile(d.p(name), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := f.WriteAt(chunk, int64(i*len(chunk))); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
func (d dirFS) readSeq(name string, chunk []byte) (int, error) {
	f, err := os.Open(d.p(name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total := 0
	for {
		n, err := f.Read(chunk)
		total += n
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// nativeFS is the client library's native API under a directory.
type nativeFS struct {
	fs   *client.FS
	root string
}

func (n nativeFS) p(name string) string { return n.root + "/" + name }

func (n nativeFS) create(name string) error {
	f, err := n.fs.OpenFile(n.p(name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
func (n nativeFS) stat(name string) error { _, err := n.fs.Stat(n.p(name)); return err }
func (n nativeFS) readSmall(name string, buf []byte) error {
	f, err := n.fs.Open(n.p(name))
	if err != nil {
		return err
	}
	_, err = f.Read(buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
func (n nativeFS) writeSmall(name string, data []byte) error {
	return n.fs.WriteFile(n.p(name), data, 0o644)
}
func (n nativeFS) remove(name string) error { return n.fs.Remove(n.p(name)) }
func (n nativeFS) mkdir(name string) error  { return n.fs.Mkdir(n.p(name), 0o755) }
func (n nativeFS) writeSeq(name string, chunk []byte, count int) error {
	f, err := n.fs.OpenFile(n.p(name), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	for i := range count {
		if _, err := f.WriteAt(chunk, int64(i*len(chunk))); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
func (n nativeFS) readSeq(name string, chunk []byte) (int, error) {
	f, err := n.fs.Open(n.p(name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	total := 0
	for {
		k, err := f.Read(chunk)
		total += k
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

func runBenchFuse(ctx context.Context, cmd *cobra.Command, o *benchFuseOptions) error {
	if os.Geteuid() != 0 {
		return errors.New("bench fuse mounts two file systems: run it as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("bench fuse needs /dev/fuse (%v): modprobe fuse", err)
	}
	if o.workers < 1 || o.files < o.workers || o.size < 1 || o.duration < 50*time.Millisecond {
		return errors.New("--workers, --files, --file-mib must be positive (files at least workers), --duration at least 50ms")
	}
	admin, token := o.cluster.servers, ""
	var where string
	var err error
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
	srv, err := octofuse.Mount(octoMnt, c, octofuse.Options{})
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
			MaxReadAhead: octofuse.DefaultMaxWrite, MaxBackground: octofuse.DefaultMaxBackground, DirectMount: true,
			EnableLocks: true, DisableReadDirPlus: true, ExtraCapabilities: gofuse.CAP_ATOMIC_O_TRUNC}})
	if err != nil {
		return fmt.Errorf("mount the loopback: %w", err)
	}
	defer lsrv.Unmount()

	// Each target works in a directory of its own.
	run := fmt.Sprintf("bench-fuse-%d", time.Now().UnixNano())
	octoDir := filepath.Join(octoMnt, run)
	if err := os.Mkdir(octoDir, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(octoDir)
	targets := []struct {
		name string
		fs   benchFS
	}{
		{"octofs", dirFS{octoDir}},
		{"loopback", dirFS{loopMnt}},
		{"native", nativeFS{c.FS(client.Cred{}), "/" + run}},
	}
	type result struct{ octofs, loopback, native float64 }
	results := map[string]*result{}
	set := func(test, target string, v float64) {
		r := results[test]
		if r == nil {
			r = &result{}
			results[test] = r
		}
		switch target {
		case "octofs":
			r.octofs = v
		case "loopback":
			r.loopback = v
		default:
			r.native = v
		}
	}
	// Warm-up, untimed: the first write to each partition pins it through
	// raft, which would be charged to whichever target ran first.
	warm := nativeFS{c.FS(client.Cred{}), "/" + run}
	if err := warm.mkdir("warm"); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	for i := range o.files {
		name := fmt.Sprintf("warm/%d", i)
		if err := warm.writeSmall(name, []byte("warm")); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
		if err := warm.remove(name); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	small := make([]byte, 4096)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 31)
	}
	for round, tg := range targets {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := tg.fs.mkdir(fmt.Sprintf("m%d", round)); err != nil {
			return fmt.Errorf("%s: mkdir: %w", tg.name, err)
		}
		dir := fmt.Sprintf("m%d", round)
		// create: each worker makes files until the time or the files run out.
		made := make([][]string, o.workers)
		n, el, err := timed(o.workers, o.duration, o.files/o.workers, func(w, i int) error {
			name := fmt.Sprintf("%s/w%d-%d", dir, w, i)
			if err := tg.fs.create(name); err != nil {
				return err
			}
			made[w] = append(made[w], name)
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: create: %w", tg.name, err)
		}
		set("create", tg.name, float64(n)/el.Seconds())
		// stat of the created files, round robin.
		n, el, err = timed(o.workers, o.duration, 0, func(w, i int) error {
			if len(made[w]) == 0 {
				return errStop
			}
			return tg.fs.stat(made[w][i%len(made[w])])
		})
		if err != nil {
			return fmt.Errorf("%s: stat: %w", tg.name, err)
		}
		set("stat", tg.name, float64(n)/el.Seconds())
		// open-read-close of 4 KiB files (written untimed).
		for w := range made {
			for _, name := range made[w] {
				if err := tg.fs.writeSmall(name, small); err != nil {
					return fmt.Errorf("%s: write: %w", tg.name, err)
				}
			}
		}
		bufs := make([][]byte, o.workers)
		for w := range bufs {
			bufs[w] = make([]byte, 4096)
		}
		n, el, err = timed(o.workers, o.duration, 0, func(w, i int) error {
			if len(made[w]) == 0 {
				return errStop
			}
			return tg.fs.readSmall(made[w][i%len(made[w])], bufs[w])
		})
		if err != nil {
			return fmt.Errorf("%s: open-read-close: %w", tg.name, err)
		}
		set("open-read-close 4KiB", tg.name, float64(n)/el.Seconds())
		// remove every created file.
		n, el, err = timed(o.workers, time.Hour, 0, func(w, i int) error {
			if i >= len(made[w]) {
				return errStop
			}
			return tg.fs.remove(made[w][i])
		})
		if err != nil {
			return fmt.Errorf("%s: remove: %w", tg.name, err)
		}
		set("remove", tg.name, float64(n)/el.Seconds())
		// 1 MiB sequential write (a fresh file, then overwrites) and read.
		big := fmt.Sprintf("%s/big", dir)
		if err := tg.fs.writeSeq(big, chunk, o.size); err != nil {
			return fmt.Errorf("%s: write: %w", tg.name, err)
		}
		var bytes atomic.Int64
		_, el, err = timed(1, o.duration, 0, func(_, _ int) error {
			if err := tg.fs.writeSeq(big, chunk, o.size); err != nil {
				return err
			}
			bytes.Add(int64(o.size) << 20)
			return nil
		})
		if err != nil {
			return fmt.Errorf("%s: sequential write: %w", tg.name, err)
		}
		set("write 1MiB seq (MiB/s)", tg.name, float64(bytes.Load())/float64(1<<20)/el.Seconds())
		bytes.Store(0)
		_, el, err = timed(1, o.duration, 0, func(_, _ int) error {
			got, err := tg.fs.readSeq(big, chunk)
			bytes.Add(int64(got))
			if err == nil && got != o.size<<20 {
				err = fmt.Errorf("read %d bytes of %d", got, o.size<<20)
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("%s: sequential read: %w", tg.name, err)
		}
		set("read 1MiB seq (MiB/s)", tg.name, float64(bytes.Load())/float64(1<<20)/el.Seconds())
		if err := tg.fs.remove(big); err != nil {
			return fmt.Errorf("%s: remove: %w", tg.name, err)
		}
	}
	t := &benchTable{
		Title:   fmt.Sprintf("bench fuse: ops/s (or MiB/s) with %d workers, %v per test; %s", o.workers, o.duration, where),
		Columns: []string{"TEST", "OCTOFS FUSE", "LOOPBACK FUSE (tmpfs)", "OCTOFS/LOOPBACK", "NATIVE API", "FUSE/NATIVE"},
	}
	for _, name := range []string{"create", "stat", "open-read-close 4KiB", "remove", "write 1MiB seq (MiB/s)", "read 1MiB seq (MiB/s)"} {
		r := results[name]
		t.add(name, figure(r.octofs), figure(r.loopback), ratio(r.octofs, r.loopback), figure(r.native), ratio(r.octofs, r.native))
	}
	t.note("both mounts are served by this process with the same options (1 MiB max write and read-ahead, 1s entry and attribute timeouts)")
	t.note("stat through a mount is mostly the kernel's attribute cache; the native API resolves the path at the cluster every time")
	t.note("targets (issue 14): OCTOFS/LOOPBACK at least 0.70x for every row")
	return t.print(cmd.OutOrStdout(), o.cluster.json)
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
