// Command vmtest is octofs's VM harness (make vm-test): it boots a cluster
// of QEMU guests on this machine, joined by a virtual Ethernet link with
// Soft-RoCE (rxe) on it, and runs named test steps inside them through a
// guest agent:
//
//   - rxe:         every guest has an active rxe0 and reaches its peers;
//   - conformance: the rdma conformance suite with the verbs provider;
//   - devdax:      registering an emulated NVDIMM (devdax) for RDMA;
//   - perftest:    ib_write_bw, ib_read_bw, ib_read_lat, ib_send_lat
//     between two guests, the raw baseline;
//   - bench:       octoctl bench rdma --provider verbs between the same
//     guests, printed beside perftest with ratios;
//   - fs:          an octofs cluster, one `octofs serve` per guest on its
//     devdax NVDIMM, mounted with FUSE in vm1: go-fuse's posixtest and a
//     copy-and-verify of a tree, with the verbs provider on rxe0 and then
//     the soft provider on the same guests, printed side by side.
//
// It ends with one "N passed, N failed" line and kills every process it
// started, on success, failure, panic or signal. vmtest/mkimage.sh builds
// the guest kernel and initramfs from Debian packages; binaries reach the
// guests through a read-only 9p share. docs/rdma-verbs.md has the details.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// step is one named stage of the run. Steps run in order; a step that
// needs something an earlier one failed to provide skips.
type step struct {
	name string
	doc  string
	run  func(ctx context.Context, c *cluster, r *report) error
}

// steps is the plan.
var steps = []step{
	{"rxe", "each guest has an active rxe0 and reaches its peers over it", stepRXE},
	{"conformance", "rdma conformance suite and the provider's own tests, verbs provider on rxe0 (vm1)", stepConformance},
	{"devdax", "register an emulated NVDIMM (devdax) as an RDMA region (vm1)", stepDevDax},
	{"fsdax", "an fsdax mapping cannot be registered (vm2's NVDIMM, ext4 -o dax)", stepFsDax},
	{"perftest", "perftest baseline between vm1 and vm2", stepPerftest},
	{"bench", "octoctl bench rdma --provider verbs between vm1 and vm2, beside perftest", stepBench},
	{"fs", "an octofs cluster on the guests' devdax NVDIMMs mounted in vm1: posixtest and a copied tree, verbs on rxe0 beside soft", stepFS},
}

func main() {
	var (
		work     = flag.String("work", ".work/vm", "cache and run directory (gitignored)")
		nvms     = flag.Int("vms", 2, "number of guests (3 or more share the hub the same way)")
		only     = flag.String("steps", "", "comma-separated steps to run (default all: "+stepNames()+")")
		mtu      = flag.Int("mtu", 9000, "MTU of the virtual link")
		keep     = flag.Bool("keep", false, "keep the guests running after the steps until Ctrl-C (to attach to their consoles)")
		link     = flag.String("link", "auto", "how guests are linked: hub (an L2 hub in the harness), direct (two guests, one NIC listening for the other), auto (direct for two guests)")
		deadline = flag.Duration("timeout", 25*time.Minute, "bound on the whole run")
	)
	flag.Func("bench-poll", "`modes` (comma-separated: spin, yield, hybrid, wait) in which the bench step runs its latency tests again, beside perftest", func(s string) error {
		for _, m := range strings.Split(s, ",") {
			switch m = strings.TrimSpace(m); m {
			case "spin", "yield", "hybrid", "wait", "auto":
				benchPolls = append(benchPolls, m)
			default:
				return fmt.Errorf("unknown polling mode %q", m)
			}
		}
		return nil
	})
	flag.Func("exec", "`vmN:command` to run in a guest after the steps, its output printed (repeatable; for debugging)", func(s string) error {
		name, cmd, ok := strings.Cut(s, ":")
		if !ok || !strings.HasPrefix(name, "vm") {
			return fmt.Errorf("want vmN:command, got %q", s)
		}
		execs = append(execs, execCmd{name, cmd})
		return nil
	})
	flag.Parse()
	os.Exit(run(*work, *nvms, *only, *mtu, *keep, *link, *deadline))
}

func stepNames() string {
	var n []string
	for _, s := range steps {
		n = append(n, s.name)
	}
	return strings.Join(n, ",")
}

func run(work string, nvms int, only string, mtu int, keep bool, link string, deadline time.Duration) (code int) {
	start := time.Now()
	r := &report{}
	procs := &procTable{}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	var c *cluster
	// Whatever happens, every guest and process goes.
	defer func() {
		if p := recover(); p != nil {
			fmt.Fprintf(os.Stderr, "vmtest: panic: %v\n", p)
			r.fail("harness", fmt.Sprint(p))
		}
		if c != nil {
			c.shutdown()
		}
		if pids := procs.killAll(); len(pids) > 0 {
			fmt.Printf("vmtest: killed leftover processes %v\n", pids)
		}
		r.summary(time.Since(start))
		if r.failed > 0 || r.passed == 0 {
			code = 1
		}
	}()

	if nvms < 2 {
		r.fail("setup", "need at least 2 guests")
		return 1
	}
	switch {
	case link == "auto" && nvms == 2:
		link = "direct"
	case link == "auto":
		link = "hub"
	case link == "direct" && nvms != 2:
		r.fail("setup", "-link direct joins exactly two guests; use -link hub")
		return 1
	case link != "hub" && link != "direct":
		r.fail("setup", "-link is hub, direct or auto")
		return 1
	}
	selected := map[string]bool{}
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			if !slices.ContainsFunc(steps, func(st step) bool { return st.name == s }) {
				r.fail("setup", fmt.Sprintf("unknown step %q (have %s)", s, stepNames()))
				return 1
			}
			selected[s] = true
		}
	}

	root, err := repoRoot()
	if err != nil {
		r.fail("setup", err.Error())
		return 1
	}
	if !filepath.IsAbs(work) {
		work = filepath.Join(root, work)
	}

	// 1. Image and binaries.
	t := time.Now()
	if err := buildImage(ctx, root, work, procs); err != nil {
		r.fail("image", err.Error())
		return 1
	}
	share := filepath.Join(work, "share")
	octoctlErr, fsErr, err := buildBinaries(ctx, root, share, procs)
	if err != nil {
		r.fail("build", err.Error())
		return 1
	}
	r.pass("image+build", fmt.Sprintf("kernel, initramfs and guest binaries ready in %.0fs", time.Since(t).Seconds()))

	// 2. The cluster.
	t = time.Now()
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		r.fail("boot", "qemu-system-x86_64 not found: apt-get install qemu-system-x86")
		return 1
	}
	runDir := filepath.Join(work, "run")
	os.RemoveAll(runDir)
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		r.fail("boot", err.Error())
		return 1
	}
	bc := bootConfig{
		Qemu: qemu, Kernel: filepath.Join(work, "vmlinuz"), Initrd: filepath.Join(work, "initramfs.gz"),
		Share: share, RunDir: runDir, HubSock: filepath.Join(runDir, "hub.sock"), MTU: mtu,
	}
	c, err = startCluster(ctx, bc, nvms, link == "direct", procs)
	if err != nil {
		r.fail("boot", err.Error())
		return 1
	}
	c.share = share
	if octoctlErr != nil {
		c.octoctlErr = octoctlErr.Error()
	}
	if fsErr != nil {
		c.fsErr = fsErr.Error()
	}
	r.pass("boot", fmt.Sprintf("%d guests up in %.0fs (%s, %s link, MTU %d), consoles in %s", nvms, time.Since(t).Seconds(), c.vms[0].hello.Kernel, link, mtu, runDir))

	// 3. The steps.
	for _, s := range steps {
		if len(selected) > 0 && !selected[s.name] {
			continue
		}
		if ctx.Err() != nil {
			r.fail(s.name, "not run: "+context.Cause(ctx).Error())
			continue
		}
		fmt.Printf("== %s: %s\n", s.name, s.doc)
		t := time.Now()
		if err := s.run(ctx, c, r); err != nil {
			r.fail(s.name, err.Error())
		}
		fmt.Printf("   (%s took %.0fs)\n", s.name, time.Since(t).Seconds())
	}
	for _, e := range execs {
		v := c.vm(e.vm)
		if v == nil {
			r.fail("exec", "no guest "+e.vm)
			continue
		}
		fmt.Printf("== exec %s: %s\n", e.vm, e.cmd)
		out, err := v.run(ctx, 5*time.Minute, nil, "sh", "-c", e.cmd)
		fmt.Print(out)
		if err != nil {
			r.fail("exec "+e.vm, err.Error())
		} else {
			r.pass("exec "+e.vm, e.cmd)
		}
	}
	if keep {
		fmt.Println("vmtest: guests kept running; attach with: socat STDIO,raw,echo=0 UNIX-CONNECT:" + filepath.Join(runDir, "vm1-console.sock") + "   (Ctrl-C here stops them)")
		<-ctx.Done()
	}
	return 0
}

// execCmd is a -exec command: run cmd in guest vm after the steps.
type execCmd struct{ vm, cmd string }

var execs []execCmd

// benchPolls are the extra polling modes of the bench step's latency
// tests (-bench-poll).
var benchPolls []string

// vm returns the guest called name, or nil.
func (c *cluster) vm(name string) *vm {
	for _, v := range c.vms {
		if v != nil && v.spec.Name == name {
			return v
		}
	}
	return nil
}

// repoRoot is the module root: the harness runs from anywhere inside it.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run vmtest inside the octofs module")
	}
	return filepath.Dir(mod), nil
}

// buildImage runs vmtest/mkimage.sh (which caches what it downloads).
func buildImage(ctx context.Context, root, work string, procs *procTable) error {
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "vmtest", "mkimage.sh"), work)
	cmd.Dir = root
	return runLogged(cmd, procs)
}

// buildBinaries builds what the guests run into the share's bin/: the
// agent (static), the verbs conformance test binary, octoctl and octofs
// with the verbs provider (cgo, dynamically linked against the guest's
// glibc and libibverbs, which are Debian 12's like this host's), and for
// the fs step the fuse package's test binary and pmemformat (static), and
// the repository's tracked files as share/src.tar. octoctl failing to
// build only costs the bench and fs steps (octoctlErr), the fs step's
// pieces only that step (fsErr).
func buildBinaries(ctx context.Context, root, share string, procs *procTable) (octoctlErr, fsErr, err error) {
	bin := filepath.Join(share, "bin")
	os.RemoveAll(bin)
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, nil, err
	}
	goCmd := func(env []string, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
	builds := []*exec.Cmd{
		goCmd([]string{"CGO_ENABLED=0"}, "build", "-o", filepath.Join(bin, "vmagent"), "./vmtest/agent"),
		goCmd([]string{"CGO_ENABLED=1"}, "test", "-c", "-tags", "verbs", "-o", filepath.Join(bin, "verbs.test"), "./rdma/verbs"),
		goCmd([]string{"CGO_ENABLED=1"}, "build", "-tags", "verbs", "-o", filepath.Join(bin, "octoctl"), "./cmd/octoctl"),
		goCmd([]string{"CGO_ENABLED=1"}, "build", "-tags", "verbs", "-o", filepath.Join(bin, "octofs"), "./cmd/octofs"),
		goCmd([]string{"CGO_ENABLED=0"}, "test", "-c", "-o", filepath.Join(bin, "fuse.test"), "./fuse"),
		goCmd([]string{"CGO_ENABLED=0"}, "build", "-o", filepath.Join(bin, "pmemformat"), "./vmtest/pmemformat"),
		// The tree the fs step copies: what git tracks, else the
		// working tree without build outputs.
		exec.CommandContext(ctx, "sh", "-c", `if git rev-parse --git-dir >/dev/null 2>&1; then
			git ls-files -z | tar --null -T - -cf "$0"
		else
			tar --exclude=./.work --exclude=./bin --exclude=./.git -cf "$0" .
		fi`, filepath.Join(share, "src.tar")),
	}
	var wg sync.WaitGroup
	errs := make([]error, len(builds))
	for i, cmd := range builds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd.Dir = root
			errs[i] = runLogged(cmd, procs)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs[0], errs[1]); err != nil {
		return nil, nil, err
	}
	return errs[2], errors.Join(errs[2:]...), nil
}

// runLogged runs a host command, recorded in procs, and returns its output
// in the error if it fails.
func runLogged(cmd *exec.Cmd, procs *procTable) error {
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := procs.start(cmd); err != nil {
		return err
	}
	err := cmd.Wait()
	procs.exited(cmd)
	if err != nil {
		return fmt.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return nil
}

// cluster is the running guests and their hub.
type cluster struct {
	vms    []*vm
	hub    *hub
	procs  *procTable
	share  string
	runDir string // logs and sockets (bootConfig.RunDir)
	// octoctlErr is why octoctl did not build, if it did not; fsErr why
	// something the fs step needs did not.
	octoctlErr, fsErr string
	// baseline holds perftest's figures for the bench step.
	baseline map[string]perfResult
}

// startCluster boots n guests. Their NICs meet in the hub, or with direct,
// the first guest's NIC listens and the second's connects to it (QEMU's
// stream netdev carries one peer), one process fewer on every frame's way.
func startCluster(ctx context.Context, bc bootConfig, n int, direct bool, procs *procTable) (*cluster, error) {
	c := &cluster{procs: procs, runDir: bc.RunDir}
	if !direct {
		h, err := newHub(bc.HubSock)
		if err != nil {
			return nil, err
		}
		c.hub = h
	}
	specs := make([]vmSpec, n)
	for i := range specs {
		specs[i] = vmSpec{
			Name: fmt.Sprintf("vm%d", i+1),
			// Link-local addresses on a link that exists only between
			// these guests: nothing here can reach any other network.
			IP:  fmt.Sprintf("169.254.10.%d", i+1),
			MAC: fmt.Sprintf("52:54:00:0a:00:%02x", i+1),
		}
	}
	// vm1 carries an emulated NVDIMM as devdax, vm2 one as fsdax, for the
	// devdax and fsdax steps; vm2 and every further guest a devdax one
	// too, so that every guest has a devdax region for the fs step's
	// nodes (vm1 shares its own with the devdax step, which runs first).
	for i := range specs {
		specs[i].Pmem, specs[i].PmemSize = []string{"devdax"}, 256<<20
	}
	specs[1].Pmem = []string{"fsdax", "devdax"}
	c.vms = make([]*vm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range specs {
		if direct && i == 0 {
			specs[0].LinkServer = true
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.vms[i], errs[i] = bootVM(ctx, bc, specs[i], procs)
		}()
		if direct && i == 0 {
			// The second guest's NIC connects at start-up: wait for the
			// first one's socket.
			if err := waitForFile(ctx, bc.HubSock, 30*time.Second); err != nil {
				wg.Wait()
				c.shutdown()
				return nil, fmt.Errorf("vm1's link socket: %w", err)
			}
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			c.shutdown()
			return nil, fmt.Errorf("%s: %w", specs[i].Name, err)
		}
	}
	return c, nil
}

func (c *cluster) shutdown() {
	var wg sync.WaitGroup
	for _, v := range c.vms {
		if v == nil {
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); v.shutdown(c.procs) }()
	}
	wg.Wait()
	c.vms = nil
	if c.hub != nil {
		c.hub.Close()
		c.hub = nil
	}
}

// waitForFile waits until path exists.
func waitForFile(ctx context.Context, path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear in %v", path, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
