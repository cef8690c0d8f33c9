package conformance

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/fuse"
	"github.com/octofs/octofs/node/nodetest"
)

var (
	caseFilter = flag.String("conformance.case", "", "run only the cases whose name matches this regexp")
	parallel   = flag.Int("conformance.parallel", 8, "cases the child process runs at once")
	withExt4   = flag.Bool("conformance.references", false, "TestReferences: run every case on ext4 too and compare it with tmpfs (slow on slow disks)")
)

// TestMain lets the test binary double as the child process that runs
// cases (see child.go).
func TestMain(m *testing.M) {
	if v := os.Getenv(ChildEnv); v != "" {
		n, _ := strconv.Atoi(v)
		os.Exit(ServeChild(os.Stdin, os.Stdout, n))
	}
	os.Exit(m.Run())
}

// mountable skips t unless this process can mount tmpfs and FUSE file
// systems and change credentials (root with /dev/fuse).
func mountable(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the conformance suite mounts tmpfs and FUSE and runs calls as several users: it needs root (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse (%v): load the fuse module or run where it exists", err)
	}
}

// publicDir makes an empty directory every user can reach, removed when
// the test ends.
func publicDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// tmpfsBase mounts a fresh tmpfs, the reference, with the flags an octofs
// mount has (nosuid, nodev: see docs/conformance.md).
func tmpfsBase(t testing.TB) string {
	t.Helper()
	dir := publicDir(t, "octofs-conformance-tmpfs-")
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1g"); err != nil {
		t.Skipf("cannot mount the reference tmpfs at %s: %v", dir, err)
	}
	t.Cleanup(func() { unmount(t, dir) })
	return dir
}

// unmount unmounts dir, retrying while it is busy (a child may still be
// exiting) for a bounded time, then detaching it.
func unmount(t testing.TB, dir string) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := unix.Unmount(dir, 0)
		if err == nil || err == unix.EINVAL || err == unix.ENOENT {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("unmount %s: %v; detaching it", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountClient mounts c with o and returns the directory cases go in. The
// mount is unmounted when the test ends; c is closed after it.
func mountClient(t testing.TB, c *client.Client, o fuse.Options, name string) string {
	t.Helper()
	dir := publicDir(t, "octofs-conformance-mnt-")
	srv, err := fuse.Mount(dir, c, o)
	if err != nil {
		c.Close()
		t.Fatalf("mount: %v", err)
	}
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := srv.Unmount()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("unmount %s: %v; detaching it", dir, err)
				unix.Unmount(dir, unix.MNT_DETACH)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	})
	base := filepath.Join(dir, name)
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return base
}

// startCluster starts a 3-node in-process cluster on the soft provider.
func startCluster(t testing.TB) func(testing.TB) *client.Client {
	t.Helper()
	cl := nodetest.Start(t, nodetest.Options{Nodes: 3, RegionSize: 256 << 20, Logger: warnLogger(t)})
	return func(t testing.TB) *client.Client {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.New(ctx, client.Config{Admin: cl.AdminAddrs(), Token: cl.Token, Name: "conformance",
			OpTimeout: 20 * time.Second, Logger: warnLogger(t)})
		if err != nil {
			t.Fatalf("client: %v", err)
		}
		return c
	}
}

// warnLogger logs warnings to t (printed if the test fails).
func warnLogger(t testing.TB) *slog.Logger {
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

// selected is the case library, filtered by -conformance.case.
func selected(t testing.TB) []Case {
	all := All()
	if *caseFilter == "" {
		return all
	}
	re, err := regexp.Compile(*caseFilter)
	if err != nil {
		t.Fatalf("-conformance.case: %v", err)
	}
	var out []Case
	for _, c := range all {
		if re.MatchString(c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// runAll runs every case in a fresh directory under base, in one child
// process, and returns the results by case name.
func runAll(t testing.TB, base string, cases []Case) map[string]Result {
	t.Helper()
	r, err := StartRunner(*parallel)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results := make([]Result, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() { results[i] = r.Run(ctx, filepath.Join(base, caseDir(i, c.Name)), c.Steps) })
	}
	wg.Wait()
	if err := r.Close(30 * time.Second); err != nil {
		t.Errorf("child process: %v\n%s", err, r.Stderr())
	}
	out := make(map[string]Result, len(cases))
	order := make([]int, len(cases))
	for i, c := range cases {
		out[c.Name] = results[i]
		order[i] = i
	}
	sort.Slice(order, func(a, b int) bool { return results[order[a]].Elapsed > results[order[b]].Elapsed })
	var slow []string
	for _, i := range order[:min(5, len(order))] {
		slow = append(slow, fmt.Sprintf("%s %v", cases[i].Name, results[i].Elapsed.Round(time.Millisecond)))
	}
	t.Logf("slowest cases under %s: %s", base, strings.Join(slow, "; "))
	return out
}

// caseDir is a short, readable directory name for case i.
func caseDir(i int, name string) string {
	b := []byte(name)
	for j, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9') {
			b[j] = '_'
		}
	}
	if len(b) > 40 {
		b = b[:40]
	}
	return fmt.Sprintf("%03d-%s", i, b)
}

// references are the local file systems' results: tmpfs always, ext4
// when the machine has it (nil otherwise).
type references struct {
	tmpfs, ext4 map[string]Result
}

// compare checks one back end's results against the reference's, case by
// case, with the back end's known failures. On an ambiguous case (tmpfs
// and ext4 answer differently) matching either reference passes.
func compare(t *testing.T, backend string, cases []Case, refs references, got map[string]Result, known map[string]string) {
	passed, failed, knownFailed := 0, 0, 0
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			r := refs.tmpfs[c.Name]
			if r.Err != "" || len(CheckWants(c, r)) > 0 {
				t.Skip("the case is broken on the reference (see the tmpfs subtest)")
			}
			diff := Diff(c, r, got[c.Name])
			if note, ok := ambiguous[c.Name]; ok && len(diff) > 0 && refs.ext4 != nil {
				if len(Diff(c, refs.ext4[c.Name], got[c.Name])) == 0 {
					t.Logf("%s answers as ext4 does, not as tmpfs (%s)", backend, note)
					diff = nil
				}
			}
			why, listed := known[c.Name]
			switch {
			case len(diff) == 0 && listed:
				failed++
				t.Errorf("listed as a known failure (%s) on %s but it passes now: remove it from the list", why, backend)
			case len(diff) == 0:
				passed++
			case listed:
				knownFailed++
				t.Skipf("known failure (%s):\n%s", why, strings.Join(diff, "\n"))
			default:
				failed++
				t.Errorf("%s differs from the reference:\n%s", backend, strings.Join(diff, "\n"))
			}
		})
	}
	t.Logf("%s: %d cases pass, %d known failures, %d fail", backend, passed, knownFailed, failed)
}

// TestConformance runs the case library on the reference (tmpfs) and on
// octofs mounts, and compares.
func TestConformance(t *testing.T) {
	mountable(t)
	cases := selected(t)
	if len(cases) == 0 {
		t.Skip("no case matches -conformance.case")
	}
	start := time.Now()
	refs := references{tmpfs: runAll(t, tmpfsBase(t), cases)}
	ref := refs.tmpfs
	t.Logf("reference (tmpfs): %d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
	// Only the ambiguous cases run on ext4 here (creating files on a
	// disk is slow); TestReferences runs them all.
	var amb []Case
	for _, c := range cases {
		if _, ok := ambiguous[c.Name]; ok {
			amb = append(amb, c)
		}
	}
	if base, why := ext4Base(t); base != "" {
		refs.ext4 = runAll(t, base, amb)
	} else {
		t.Logf("no ext4 reference (%s): on ambiguous cases octofs must answer as tmpfs does", why)
	}
	t.Run("tmpfs", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.Name, func(t *testing.T) {
				if bad := CheckWants(c, ref[c.Name]); len(bad) > 0 {
					t.Errorf("the case's expectations do not hold on the reference:\n%s", strings.Join(bad, "\n"))
				}
			})
		}
	})
	t.Run("memory", func(t *testing.T) {
		mem := client.NewMemory(time.Now)
		base := mountClient(t, mem.Client(client.Config{Logger: warnLogger(t)}), fuse.Options{Logger: warnLogger(t)}, "memory")
		start := time.Now()
		got := runAll(t, base, cases)
		t.Logf("memory: %d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
		compare(t, "memory", cases, refs, got, memoryKnown)
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("a 3-node cluster takes seconds to start; -short runs the reference and client.Memory only")
		}
		connect := startCluster(t)
		// What users get: octofs mount's defaults (the kernel checks
		// permissions with the attributes it caches, the cluster again).
		base := mountClient(t, connect(t), fuse.Options{Logger: warnLogger(t)}, "cluster")
		start := time.Now()
		got := runAll(t, base, cases)
		t.Logf("cluster: %d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
		compare(t, "cluster", cases, refs, got, clusterKnown)
		// The cluster's own checks, with the kernel checking nothing: what
		// a client that skips the kernel's checks meets.
		// Only the cases in which someone other than root acts: root's
		// cases take the same paths through the cluster either way.
		t.Run("server-permissions", func(t *testing.T) {
			var users []Case
			for _, c := range cases {
				if nonRoot(c.Steps) {
					users = append(users, c)
				}
			}
			base := mountClient(t, connect(t), fuse.Options{ServerPermissions: true, Logger: warnLogger(t)}, "server-permissions")
			start := time.Now()
			got := runAll(t, base, users)
			t.Logf("cluster, server permissions: %d cases in %v", len(users), time.Since(start).Round(time.Millisecond))
			compare(t, "cluster (server permissions)", users, refs, got, serverKnown)
		})
	})
}

// ext4Base bind-mounts a fresh directory of an ext4 file system (the
// temporary directory's, if it is ext4) with nosuid and nodev, as a
// second local reference. It returns "" and why if there is none.
func ext4Base(t testing.TB) (string, string) {
	t.Helper()
	var st unix.Statfs_t
	tmp := os.TempDir()
	if err := unix.Statfs(tmp, &st); err != nil || st.Type != unix.EXT4_SUPER_MAGIC {
		return "", tmp + " is not on ext4"
	}
	src := publicDir(t, "octofs-conformance-ext4-src-")
	t.Cleanup(func() { os.RemoveAll(src) })
	dir := publicDir(t, "octofs-conformance-ext4-")
	if err := unix.Mount(src, dir, "", unix.MS_BIND, ""); err != nil {
		return "", fmt.Sprintf("bind mount %s: %v", src, err)
	}
	t.Cleanup(func() { unmount(t, dir) })
	if err := unix.Mount("", dir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		t.Fatalf("remount %s nosuid,nodev: %v", dir, err)
	}
	return dir, ""
}

// TestReferences compares the two local references, tmpfs and ext4: the
// cases where they differ are where "what Linux does" is not one answer
// (the ambiguous list; docs/conformance.md says what octofs is held to
// there). The list must match what the kernel does, both ways.
func TestReferences(t *testing.T) {
	if !*withExt4 {
		t.Skip("comparing tmpfs with ext4 takes a while on slow disks: run with -conformance.references")
	}
	mountable(t)
	cases := selected(t)
	base, why := ext4Base(t)
	if base == "" {
		t.Skipf("no ext4 reference: %s", why)
	}
	start := time.Now()
	ext4 := runAll(t, base, cases)
	t.Logf("ext4: %d cases in %v", len(cases), time.Since(start).Round(time.Millisecond))
	ref := runAll(t, tmpfsBase(t), cases)
	compare(t, "ext4", cases, references{tmpfs: ref}, ext4, ambiguous)
}
