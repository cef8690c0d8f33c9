package fuse

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node/nodetest"
)

// This file is the tests' harness: the back ends a mount can be made of
// (client.Memory in this process, a 3-node node/nodetest cluster), mount
// points other users can reach, and cleanup that unmounts before the
// cluster stops.

// TestMain lets the test binary double as the helper that runs one system
// call as another user (see helper_test.go).
func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(helperMain())
	}
	flag.Parse()
	abortBeforeTimeout()
	code := m.Run()
	stopHelpers()
	if sourceDir != "" {
		os.RemoveAll(sourceDir)
	}
	os.Exit(code)
}

// mounted are the FUSE connections of this process's mounts (fusectl's
// numbers: the minor device number of the mount), for abortBeforeTimeout.
var mounted sync.Map // connection number -> mount point

// abortBeforeTimeout aborts (and detaches) every FUSE mount of this
// process shortly before go test's -test.timeout kills it: a test stuck on a request to
// its own mount must fail, not hang, and must not leave the process
// hanging in exit while it flushes a descriptor of that mount (seen once:
// only an abort through fusectl freed it).
func abortBeforeTimeout() {
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	d, ok := f.Value.(flag.Getter).Get().(time.Duration)
	if !ok || d <= 0 {
		return
	}
	time.AfterFunc(d-min(d/10, 30*time.Second), func() {
		mounted.Range(func(k, v any) bool {
			fmt.Fprintf(os.Stderr, "fuse tests: the %v timeout is near: aborting the FUSE connection of %s\n", d, v)
			if err := abortConnection(k.(uint32)); err != nil {
				fmt.Fprintf(os.Stderr, "fuse tests: %v\n", err)
			}
			// The process may die before its cleanups run: leave no
			// dead mount behind.
			syscall.Unmount(v.(string), syscall.MNT_DETACH)
			return true
		})
	})
}

// abortConnection aborts FUSE connection n through fusectl, mounting
// fusectl first if it is not.
func abortConnection(n uint32) error {
	const ctl = "/sys/fs/fuse/connections"
	abort := filepath.Join(ctl, fmt.Sprint(n), "abort")
	if _, err := os.Stat(abort); err != nil {
		if err := syscall.Mount("fusectl", ctl, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mounting fusectl at %s: %w", ctl, err)
		}
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

// connectionOf returns the fusectl number of the FUSE mount at dir.
func connectionOf(dir string) (uint32, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return 0, err
	}
	return unix.Minor(st.Dev), nil
}

// mountable skips the test unless this process can mount FUSE file
// systems (root and /dev/fuse).
func mountable(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse (%v): load the fuse module or run where it exists", err)
	}
}

// mountPoint makes an empty directory every local user can reach (t's
// temporary directories are 0700), removed when the test ends.
func mountPoint(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "octofs-fuse-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// fixture is a cluster and a way to mount it.
type fixture struct {
	name string
	// connect returns a new client of the cluster (another "host")
	// logging to log.
	connect func(t testing.TB, log *slog.Logger) *client.Client
	// stop, if set, makes the cluster unreachable (every node gone).
	stop func()
	// gaps are the tags of cases this back end is known not to pass
	// through a mount, with why; serverGaps the same with
	// Options.ServerPermissions.
	gaps, serverGaps map[string]string
}

// newClient is connect with the test's log.
func (f *fixture) newClient(t testing.TB) *client.Client { return f.connect(t, testLogger(t)) }

// mount mounts a new client of the fixture's cluster and returns the
// mount point; it is unmounted when the test ends, before the cluster
// stops.
func (f *fixture) mount(t testing.TB, o Options) (string, *Server) {
	t.Helper()
	return mountClient(t, f.newClient(t), o)
}

// mountClient mounts c (which the test may watch, e.g. its RPC counters)
// and closes it after the unmount when the test ends.
func mountClient(t testing.TB, c *client.Client, o Options) (string, *Server) {
	t.Helper()
	dir := mountPoint(t)
	srv, err := Mount(dir, c, o)
	if err != nil {
		c.Close()
		t.Fatalf("mount: %v", err)
	}
	conn, err := connectionOf(dir)
	if err == nil {
		mounted.Store(conn, dir)
	}
	t.Cleanup(func() {
		if err := unmountBounded(srv, 10*time.Second); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
		mounted.Delete(conn)
		c.Close()
	})
	return dir, srv
}

// unmountBounded unmounts, retrying while the mount is busy (a helper
// process may still be exiting), for at most limit. If it cannot, the
// kernel connection is aborted so that nothing hangs.
func unmountBounded(srv *Server, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := srv.Unmount()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			syscall.Unmount(srv.Dir(), syscall.MNT_DETACH)
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// memoryGaps are what client.Memory's namespace does not model (its doc
// says so): test them against a cluster.
var memoryGaps = map[string]string{
	"sticky":    "client.Memory has no sticky directories",
	"setgid":    "client.Memory has no setgid directories",
	"killpriv":  "client.Memory does not clear setuid/setgid bits",
	"exchange":  "client.Memory has no RENAME_EXCHANGE",
	"loop":      "client.Memory has no directory loop check",
	"chownperm": "client.Memory lets an owner chown to any group",
	"ctime":     "client.Memory does not keep Linux's ctime rules",
	"dirperm":   "client.Memory does not check write permission on a moved directory",
}

// memoryMountGaps are memoryGaps the kernel's own checks do not cover.
var memoryMountGaps = map[string]string{
	"setgid":   memoryGaps["setgid"],
	"killpriv": memoryGaps["killpriv"],
	"exchange": memoryGaps["exchange"],
	"ctime":    memoryGaps["ctime"],
}

// memoryFixture is an in-memory cluster (client.Memory).
func memoryFixture(t testing.TB) *fixture {
	mountable(t)
	mem := client.NewMemory(time.Now)
	return &fixture{name: "memory", gaps: memoryMountGaps, serverGaps: memoryGaps,
		connect: func(testing.TB, *slog.Logger) *client.Client { return mem.Client(client.Config{}) }}
}

// clusterFixture starts a 3-node in-process cluster (node/nodetest) on the
// soft RDMA provider. It skips the test if the nodes do not serve the
// namespace (the metadata service is not wired into node/ yet).
func clusterFixture(t testing.TB) *fixture {
	mountable(t)
	if testing.Short() {
		t.Skip("a 3-node cluster takes seconds to start; -short runs the in-memory back end only")
	}
	cl := nodetest.Start(t, nodetest.Options{Nodes: 3, RegionSize: 256 << 20})
	f := &fixture{name: "cluster", stop: cl.Stop}
	f.connect = func(t testing.TB, log *slog.Logger) *client.Client {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.New(ctx, client.Config{Admin: cl.AdminAddrs(), Token: cl.Token, Name: "fuse-test",
			OpTimeout: 20 * time.Second, Logger: log})
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		return c
	}
	probeNamespace(t, f)
	return f
}

// probeNamespace skips t if the cluster's nodes have no namespace service
// (they answer "unknown op").
func probeNamespace(t testing.TB, f *fixture) {
	t.Helper()
	var unknown atomic.Bool
	h := &watchHandler{match: "unknown op", seen: &unknown}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := f.connect(t, slog.New(h))
	defer c.Close()
	_, err := c.GetAttr(ctx, client.Cred{}, cluster.RootInode)
	if err != nil && unknown.Load() {
		t.Skip("the cluster's nodes do not serve the namespace yet (no metadata service registered in node/); these tests run once it is")
	}
	if err != nil {
		t.Fatalf("getattr of the root on a fresh cluster: %v", err)
	}
}

// testLogger logs to t (printed only when the test fails), until the test
// ends.
func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// watchHandler notes whether any record's text contains match.
type watchHandler struct {
	match string
	seen  *atomic.Bool
	attrs []slog.Attr
}

func (h *watchHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *watchHandler) Handle(_ context.Context, r slog.Record) error {
	var b bytes.Buffer
	th := slog.NewTextHandler(&b, nil)
	r.AddAttrs(h.attrs...)
	th.Handle(context.Background(), r)
	if strings.Contains(b.String(), h.match) {
		h.seen.Store(true)
	}
	return nil
}

func (h *watchHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &watchHandler{match: h.match, seen: h.seen, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *watchHandler) WithGroup(string) slog.Handler { return h }

// fixtures are the back ends every mount test runs on.
var fixtures = []struct {
	name  string
	start func(testing.TB) *fixture
}{
	{"memory", memoryFixture},
	{"cluster", clusterFixture},
}

// forEachFixture runs run as a subtest per back end.
func forEachFixture(t *testing.T, run func(t *testing.T, f *fixture)) {
	for _, fx := range fixtures {
		t.Run(fx.name, func(t *testing.T) { run(t, fx.start(t)) })
	}
}

// subdir makes a fresh directory for one case under the mount, mode 0755.
func subdir(t testing.TB, mnt, name string) string {
	t.Helper()
	d := filepath.Join(mnt, strings.ReplaceAll(name, "/", "_"))
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatalf("mkdir %s: %v", d, err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatalf("chmod %s: %v", d, err)
	}
	return d
}
