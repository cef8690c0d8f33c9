package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/client/proctest"
)

// `octofs mount` as a user runs it: a separate process mounting a cluster
// of `octofs serve` processes, unmounted by SIGTERM, fusermount3 -u and
// umount, as a daemon, with operator errors, and with its cluster killed
// under it.

func TestMountCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root (CI runs as root)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no /dev/fuse (%v)", err)
	}
	if testing.Short() {
		t.Skip("builds octofs and starts a 3-node cluster of processes")
	}
	ctx := context.Background()
	_, file, _, _ := runtime.Caller(0)
	bin, err := proctest.Build(ctx, filepath.Join(filepath.Dir(file), "..", ".."), t.TempDir(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := proctest.Start(ctx, proctest.Options{Binary: bin, Dir: t.TempDir(), Args: []string{"--log-level", "warn"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Stop)
	cluster := strings.Join(cl.AdminAddrs(), ",")
	args := func(dir string, extra ...string) []string {
		return append([]string{"mount", "--cluster", cluster, "--token-file", cl.TokenFile}, append(extra, dir)...)
	}

	unmounts := map[string]func(t *testing.T, m *mountProc){
		"SIGTERM": func(t *testing.T, m *mountProc) { m.cmd.Process.Signal(syscall.SIGTERM) },
		"fusermount3 -u": func(t *testing.T, m *mountProc) {
			if _, err := exec.LookPath("fusermount3"); err != nil {
				t.Skip("fusermount3 is not installed (apt-get install fuse3)")
			}
			if out, err := exec.Command("fusermount3", "-u", m.dir).CombinedOutput(); err != nil {
				t.Fatalf("fusermount3 -u: %v: %s", err, out)
			}
		},
		"umount": func(t *testing.T, m *mountProc) {
			if out, err := exec.Command("umount", m.dir).CombinedOutput(); err != nil {
				t.Fatalf("umount: %v: %s", err, out)
			}
		},
	}
	for name, unmount := range unmounts {
		t.Run("foreground/"+name, func(t *testing.T) {
			m := startMount(t, bin, args(mountDir(t)))
			roundTrip(t, m.dir)
			unmount(t, m)
			if err := m.wait(20 * time.Second); err != nil {
				t.Errorf("octofs mount after %s: %v\n%s", name, err, m.log())
			}
			if mounted(m.dir) {
				t.Errorf("%s is still mounted", m.dir)
			}
		})
	}

	t.Run("daemon", func(t *testing.T) {
		dir := mountDir(t)
		out, err := exec.Command(bin, args(dir, "--daemon")...).CombinedOutput()
		if err != nil {
			t.Fatalf("octofs mount --daemon: %v: %s", err, out)
		}
		if !mounted(dir) || !strings.Contains(string(out), "mounted "+dir) {
			t.Fatalf("octofs mount --daemon said %q; mounted: %v", out, mounted(dir))
		}
		t.Cleanup(func() { forceUnmount(dir) })
		roundTrip(t, dir)
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v: %s", err, out)
		}
	})

	// As mount(8) runs it: /sbin/mount.octofs for fstab type "octofs",
	// and as mount.fuse3 runs it for type "fuse.octofs": `octofs SOURCE
	// DIR -o ...`.
	t.Run("helper", func(t *testing.T) {
		helpers := t.TempDir()
		for _, name := range []string{"mount.octofs", "octofs"} {
			if err := os.Symlink(bin, filepath.Join(helpers, name)); err != nil {
				t.Fatal(err)
			}
		}
		dir := mountDir(t)
		t.Cleanup(func() { forceUnmount(dir) })
		helper := exec.Command(filepath.Join(helpers, "mount.octofs"), cluster, dir, "-o", "rw,nosuid,token_file="+cl.TokenFile+",ro,noatime,noexec,attr_timeout=2")
		helper.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"} // as bare as mount(8)'s
		if out, err := helper.CombinedOutput(); err != nil {
			t.Fatalf("mount.octofs: %v: %s", err, out)
		}
		m := mountEntry(dir)
		if len(m) < 4 || m[0] != cluster || m[2] != "fuse.octofs" {
			t.Fatalf("/proc/mounts says %q, want source %s, type fuse.octofs", m, cluster)
		}
		for _, opt := range []string{"ro", "noatime", "noexec", "nosuid", "nodev"} {
			if !slices.Contains(strings.Split(m[3], ","), opt) {
				t.Errorf("/proc/mounts options %s, want %s among them", m[3], opt)
			}
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Errorf("a write in the read-only mount: %v, want EROFS", err)
		}
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v: %s", err, out)
		}

		// mount.fuse3 runs the program by name through /bin/sh, with
		// mount(8)'s sanitized environment: the test runs it as
		// mount.fuse3 would rather than install it on the system's PATH.
		fuse3 := exec.Command(filepath.Join(helpers, "octofs"), cluster, dir, "-o", "nosuid,nodev,token_file="+cl.TokenFile)
		fuse3.Env = []string{}
		if out, err := fuse3.CombinedOutput(); err != nil {
			t.Fatalf("octofs SOURCE DIR -o ...: %v: %s", err, out)
		}
		if m := mountEntry(dir); len(m) < 3 || m[2] != "fuse.octofs" {
			t.Fatalf("/proc/mounts says %q after octofs SOURCE DIR -o ...", m)
		}
		roundTrip(t, dir)
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v: %s", err, out)
		}
	})

	t.Run("errors", func(t *testing.T) {
		dir := mountDir(t)
		file := filepath.Join(dir, "file")
		os.WriteFile(file, nil, 0o644)
		bad := filepath.Join(t.TempDir(), "token")
		os.WriteFile(bad, []byte("not-the-token\n"), 0o600)
		for name, tc := range map[string]struct {
			args []string
			want string
		}{
			"no cluster":   {[]string{"mount", "--token-file", cl.TokenFile, dir}, "--cluster is required"},
			"no token":     {[]string{"mount", "--cluster", cluster, dir}, "no cluster token"},
			"wrong token":  {[]string{"mount", "--cluster", cluster, "--token-file", bad, "--connect-timeout", "3s", dir}, "token"},
			"no such dir":  {args(filepath.Join(dir, "nothing")), "mount point"},
			"not a dir":    {args(file), "not a directory"},
			"max write":    {args(dir, "--max-write", "4194304"), "--max-write"},
			"write behind": {args(dir, "--write-behind", "-5"), "--write-behind"},
			"unreachable":  {[]string{"mount", "--cluster", "127.0.0.1:1", "--token-file", cl.TokenFile, "--connect-timeout", "3s", dir}, "check"},
			"daemon fails": {args(file, "--daemon"), "not a directory"},
		} {
			t.Run(name, func(t *testing.T) {
				// None mounts: they may run at once (two wait out
				// --connect-timeout).
				t.Parallel()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				out, err := exec.CommandContext(ctx, bin, tc.args...).CombinedOutput()
				if err == nil {
					forceUnmount(dir)
					t.Fatalf("octofs %v succeeded: %s", tc.args, out)
				}
				if !strings.Contains(string(out), tc.want) {
					t.Errorf("octofs %v: %q, want it to say %q", tc.args, out, tc.want)
				}
			})
		}
	})

	// Last: it kills the cluster.
	t.Run("lost cluster", func(t *testing.T) {
		m := startMount(t, bin, args(mountDir(t), "--op-timeout", "5s"))
		roundTrip(t, m.dir)
		f := filepath.Join(m.dir, "kept")
		if err := os.WriteFile(f, []byte("kept"), 0o644); err != nil {
			t.Fatal(err)
		}
		for i := range cl.Nodes {
			cl.Kill(i)
		}
		// Each call fails with EIO or ETIMEDOUT within the op timeout
		// and some slack for a loaded machine; none hangs. They run at
		// once, as a mount's callers would.
		type outcome struct {
			name string
			err  error
			took time.Duration
		}
		calls := map[string]func() error{
			"lookup": func() error { _, err := os.Stat(filepath.Join(m.dir, "never-made")); return err },
			"open":   func() error { _, err := os.ReadFile(f); return err },
			"create": func() error { return os.WriteFile(filepath.Join(m.dir, "new"), []byte("x"), 0o644) },
		}
		done := make(chan outcome, len(calls))
		start := time.Now()
		for name, call := range calls {
			go func() { err := call(); done <- outcome{name, err, time.Since(start)} }()
		}
		limit := time.After(40 * time.Second)
		for range calls {
			select {
			case o := <-done:
				if !errors.Is(o.err, syscall.EIO) && !errors.Is(o.err, syscall.ETIMEDOUT) {
					t.Errorf("%s with the cluster gone: %v, want EIO or ETIMEDOUT", o.name, o.err)
				}
				t.Logf("%s with the cluster gone: %v after %v", o.name, o.err, o.took.Round(time.Millisecond))
			case <-limit:
				t.Fatalf("a call with the cluster gone still waits after 40s: the mount hangs")
			}
		}
		m.cmd.Process.Signal(syscall.SIGTERM)
		if err := m.wait(30 * time.Second); err != nil {
			t.Errorf("octofs mount after SIGTERM with the cluster gone: %v\n%s", err, m.log())
		}
		if mounted(m.dir) {
			t.Errorf("%s is still mounted", m.dir)
		}
	})
}

// mountProc is a foreground `octofs mount`.
type mountProc struct {
	cmd  *exec.Cmd
	dir  string
	out  *strings.Builder
	done chan error
}

func (m *mountProc) log() string { return m.out.String() }

// wait waits for the process to exit, at most limit.
func (m *mountProc) wait(limit time.Duration) error {
	select {
	case err := <-m.done:
		return err
	case <-time.After(limit):
		return errors.New("still running after " + limit.String())
	}
}

// startMount starts `octofs args...` in the foreground and waits until its
// mount point is mounted. The process and the mount are gone when the
// test ends.
func startMount(t *testing.T, bin string, args []string) *mountProc {
	t.Helper()
	m := &mountProc{cmd: exec.Command(bin, args...), dir: args[len(args)-1], out: &strings.Builder{}, done: make(chan error, 1)}
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { m.done <- m.cmd.Wait() }()
	t.Cleanup(func() {
		m.cmd.Process.Kill()
		forceUnmount(m.dir)
	})
	deadline := time.Now().Add(60 * time.Second)
	for !mounted(m.dir) {
		select {
		case err := <-m.done:
			t.Fatalf("octofs mount exited: %v\n%s", err, m.log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not mounted after 60s\n%s", m.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return m
}

// mountDir is an empty mount point.
func mountDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "octofs-mount-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	return dir
}

// mounted reports whether dir is a FUSE mount point now.
func mounted(dir string) bool {
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == dir && strings.HasPrefix(f[2], "fuse") {
			return true
		}
	}
	return false
}

// mountEntry returns the fields of dir's line in /proc/self/mounts
// (source, mount point, type, options, ...), or nil.
func mountEntry(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[1] == dir {
			return f
		}
	}
	return nil
}

// forceUnmount detaches dir if it is still mounted (cleanup only).
func forceUnmount(dir string) {
	if mounted(dir) {
		syscall.Unmount(dir, syscall.MNT_DETACH)
	}
}

// roundTrip writes, reads and removes a file in the mount.
func roundTrip(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "roundtrip")
	if err := os.WriteFile(p, []byte("hello"), 0o644); err != nil {
		t.Fatalf("write in the mount: %v", err)
	}
	if got, err := os.ReadFile(p); err != nil || string(got) != "hello" {
		t.Fatalf("read in the mount: %q, %v", got, err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatalf("remove in the mount: %v", err)
	}
}
