package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The fs step: an octofs cluster on the guests, mounted with FUSE.
//
// Every guest runs `octofs serve` on its devdax NVDIMM (formatted first:
// with `octofs format` when the binary has it, else with pmemformat, since
// serve formats only a region file it creates), vm1 bootstraps the cluster
// and mounts it with `octofs mount --daemon`, and in the mount go-fuse's
// posixtest runs (the fuse package's TestMountedPosix) and the
// repository's tree is copied with cp -a and checked with diff -r and
// checksums. It runs twice on the same guests: with the verbs provider on
// rxe0, then with the soft provider over TCP on the same link, and prints
// the two side by side.

// fsRun is one provider's run of the fs step.
type fsRun struct {
	provider string
	nodes    int
	// posixtest's leaves: counts and the names of failed and skipped
	// tests (with the skip reason).
	posixPassed, posixFailed, posixSkipped int
	failedNames, skippedNames              []string
	// The copy: files and KiB copied, seconds the cp -a took, and
	// whether diff -r and the checksums agreed.
	files, kib int
	copySecs   float64
	verified   bool
	// stopped says where the run stopped early, if it did.
	stopped string
}

// goFileLine is the "file.go:123: " a test's log line starts with.
var goFileLine = regexp.MustCompile(`^\S+\.go:\d+: `)

// fsPorts are each provider's admin, raft and RDMA ports, apart so that a
// run never meets the last one's sockets.
var fsPorts = map[string][3]int{"verbs": {7400, 7401, 7402}, "soft": {7410, 7411, 7412}}

func stepFS(ctx context.Context, c *cluster, r *report) error {
	if c.octoctlErr != "" || c.fsErr != "" {
		return fmt.Errorf("not built: %s %s", c.octoctlErr, c.fsErr)
	}
	devs := make([]string, len(c.vms))
	for i, v := range c.vms {
		out, err := v.run(ctx, 20*time.Second, nil, "sh", "-c", "ls /dev | grep -m1 '^dax'")
		dev := strings.TrimSpace(out)
		if err != nil || dev == "" {
			return fmt.Errorf("%s has no devdax device (%v): %s", v.spec.Name, err, out)
		}
		devs[i] = "/dev/" + dev
	}
	var runs []*fsRun
	for _, p := range []string{"verbs", "soft"} {
		if ctx.Err() != nil {
			break
		}
		fmt.Printf("-- fs with the %s provider: %d nodes on %s\n", p, len(c.vms), strings.Join(devs, ", "))
		runs = append(runs, c.fsRun(ctx, r, p, devs))
	}
	r.table(fsTable(runs))
	return nil
}

// fsRun runs the step with one provider and reports each check.
func (c *cluster) fsRun(ctx context.Context, r *report, provider string, devs []string) *fsRun {
	run := &fsRun{provider: provider, nodes: len(c.vms)}
	name := "fs/" + provider
	stop := func(check string, err error) *fsRun {
		run.stopped = check + ": " + firstLines(err.Error(), 3)
		r.fail(name+"/"+check, err.Error())
		return run
	}
	ports := fsPorts[provider]
	dir := "/tmp/fs-" + provider
	mnt := "/mnt/octofs-" + provider
	vm1 := c.vms[0]
	admin := func(v *vm) string { return fmt.Sprintf("%s:%d", v.spec.IP, ports[0]) }
	var admins []string
	for _, v := range c.vms {
		admins = append(admins, admin(v))
	}

	// Fresh regions.
	formatter := "/mnt/host/bin/pmemformat $0"
	if out, _ := vm1.run(ctx, 30*time.Second, nil, "sh", "-c", "/mnt/host/bin/octofs --help"); regexp.MustCompile(`(?m)^\s+format\s`).MatchString(out) {
		formatter = "/mnt/host/bin/octofs format --force --pmem $0"
	}
	for i, v := range c.vms {
		if out, err := v.run(ctx, 2*time.Minute, nil, "sh", "-c", formatter, devs[i]); err != nil {
			return stop("format", fmt.Errorf("%s: %v\n%s", v.spec.Name, err, out))
		}
	}
	r.pass(name+"/format", fmt.Sprintf("%d devdax regions formatted (%s)", len(devs), strings.Fields(formatter)[0]))

	// The nodes: vm1 bootstraps, the others join with its token.
	var jobs []*job
	defer func() {
		for _, j := range jobs {
			j.kill()
		}
		for _, j := range jobs {
			j.wait(context.Background(), 20*time.Second)
		}
	}()
	serve := func(i int, v *vm, extra ...string) error {
		args := []string{"/mnt/host/bin/octofs", "serve", "--node-id", fmt.Sprintf("n%d", i+1), "--data-dir", dir + "/data",
			"--admin-addr", admin(v), "--raft-addr", fmt.Sprintf("%s:%d", v.spec.IP, ports[1]),
			"--rdma-addr", fmt.Sprintf("%s:%d", v.spec.IP, ports[2]), "--rdma-provider", provider,
			"--pmem", devs[i], "--heartbeat-interval", "200ms", "--down-after", "3s", "--log-level", "warn"}
		if provider == "verbs" {
			args = append(args, "--rdma-device", "rxe0")
		}
		if out, err := v.run(ctx, 20*time.Second, nil, "sh", "-c", "rm -rf $0/data && mkdir -p $0", dir); err != nil {
			return fmt.Errorf("%s: %v: %s", v.spec.Name, err, out)
		}
		j, err := v.start("octofs serve on "+v.spec.Name, nil, append(args, extra...)...)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
		return nil
	}
	if err := serve(0, vm1, "--bootstrap", "--partitions", "64"); err != nil {
		return stop("serve", err)
	}
	token, err := vm1.run(ctx, 2*time.Minute, nil, "sh", "-c",
		`i=0; until [ -s $0/data/token ]; do sleep 0.2; i=$((i+1)); [ $i -lt 500 ] || exit 1; done; cat $0/data/token`, dir)
	if err != nil {
		return stop("serve", fmt.Errorf("vm1 made no cluster token in 100s: %v\n%s", err, tailString(jobs[0].output(), 15)))
	}
	token = strings.TrimSpace(token)
	for i, v := range c.vms[1:] {
		if out, err := v.run(ctx, 20*time.Second, nil, "sh", "-c", `mkdir -p $1 && printf '%s\n' "$0" > $1/token`, token, dir); err != nil {
			return stop("serve", fmt.Errorf("%s: %v: %s", v.spec.Name, err, out))
		}
		if err := serve(i+1, v, "--join", admin(vm1), "--token-file", dir+"/token"); err != nil {
			return stop("serve", err)
		}
	}
	t := time.Now()
	if err := c.fsFormed(ctx, jobs, admin(vm1)); err != nil {
		return stop("cluster", err)
	}
	r.pass(name+"/cluster", fmt.Sprintf("%d nodes up with their voters in %.0fs", len(c.vms), time.Since(t).Seconds()))

	// The mount.
	margs := []string{"mount", "--daemon", "--cluster", strings.Join(admins, ","), "--token-file", dir + "/data/token",
		"--rdma-provider", provider, "--log-file", dir + "/mount.log", "--log-level", "info", mnt}
	if provider == "verbs" {
		margs = append(margs, "--rdma-device", "rxe0")
	}
	out, err := vm1.run(ctx, 2*time.Minute, nil, append([]string{"sh", "-c", `mkdir -p $0 && exec "$@"`, mnt, "/mnt/host/bin/octofs"}, margs...)...)
	if err != nil {
		log, _ := vm1.run(ctx, 10*time.Second, nil, "tail", "-n", "20", dir+"/mount.log")
		return stop("mount", fmt.Errorf("%v\n%s\n%s", err, out, log))
	}
	defer func() {
		if out, err := vm1.run(context.Background(), time.Minute, nil, "umount", mnt); err != nil {
			r.fail(name+"/unmount", fmt.Sprintf("%v: %s", err, out))
			vm1.run(context.Background(), 10*time.Second, nil, "umount", "-l", mnt)
		}
	}()
	r.pass(name+"/mount", strings.TrimSpace(out))

	// posixtest.
	out, err = vm1.run(ctx, 12*time.Minute, []string{"OCTOFS_FUSE_MOUNT=" + mnt},
		"/mnt/host/bin/fuse.test", "-test.run", "^TestMountedPosix$", "-test.v", "-test.timeout", "11m")
	os.WriteFile(filepath.Join(c.runDir, "posixtest-"+provider+".log"), []byte(out), 0o644)
	tests := leaves(parseGoTestV(out))
	for _, t := range tests {
		if !strings.HasPrefix(t.name, "TestMountedPosix/") {
			continue
		}
		short := strings.TrimPrefix(t.name, "TestMountedPosix/")
		switch t.status {
		case "PASS":
			run.posixPassed++
		case "FAIL":
			run.posixFailed++
			run.failedNames = append(run.failedNames, short)
			r.failures = append(r.failures, fmt.Sprintf("fs/%s posixtest %s:\n%s", provider, short, firstLines(strings.Join(t.log, "\n"), 8)))
		case "SKIP":
			run.posixSkipped++
			why := goFileLine.ReplaceAllString(firstLines(strings.Join(t.log, " "), 1), "")
			run.skippedNames = append(run.skippedNames, short+" ("+why+")")
		}
	}
	r.add(run.posixPassed, run.posixFailed, run.posixSkipped)
	if run.posixPassed+run.posixFailed == 0 {
		return stop("posixtest", fmt.Errorf("no results (%v):\n%s", err, tailString(out, 20)))
	}
	fmt.Printf("posixtest on the %s mount: %d passed, %d failed, %d skipped (output in %s)\n", provider,
		run.posixPassed, run.posixFailed, run.posixSkipped, filepath.Join(c.runDir, "posixtest-"+provider+".log"))

	// Copy and verify a tree. busybox's date has no nanoseconds:
	// /proc/uptime has hundredths.
	out, err = vm1.run(ctx, 10*time.Minute, nil, "sh", "-c", `set -e
		src=/tmp/src tree=$0/tree
		rm -rf $src && mkdir -p $src && tar -xf /mnt/host/src.tar -C $src
		files=$(find $src -type f | wc -l); kib=$(du -sk $src | cut -f1)
		t0=$(cut -d' ' -f1 /proc/uptime)
		cp -a $src $tree
		t1=$(cut -d' ' -f1 /proc/uptime)
		diff -r $src $tree
		sum() { (cd "$1" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16); }
		a=$(sum $src); b=$(sum $tree)
		[ "$a" = "$b" ] || { echo "checksums differ: $a $b"; exit 1; }
		echo "copied files=$files kib=$kib seconds=$(awk "BEGIN{print $t1-$t0}") sum=$a"`, mnt)
	if m := regexp.MustCompile(`copied files=(\d+) kib=(\d+) seconds=([\d.]+)`).FindStringSubmatch(out); m != nil {
		run.files, _ = strconv.Atoi(m[1])
		run.kib, _ = strconv.Atoi(m[2])
		run.copySecs, _ = strconv.ParseFloat(m[3], 64)
	}
	if err != nil {
		return stop("copy", fmt.Errorf("%v\n%s", err, tailString(out, 15)))
	}
	run.verified = true
	r.pass(name+"/copy", fmt.Sprintf("cp -a of %d files (%d KiB) in %.1fs, identical by diff -r and sha256", run.files, run.kib, run.copySecs))
	return run
}

// fsFormed waits until every node is up with its voters, as vm1's admin
// API reports, or a node exits.
func (c *cluster) fsFormed(ctx context.Context, jobs []*job, admin string) error {
	n := len(c.vms)
	voters := min(n, 3)
	deadline := time.Now().Add(3 * time.Minute)
	var last string
	for time.Now().Before(deadline) {
		for _, j := range jobs {
			select {
			case <-j.done:
				return fmt.Errorf("%s exited (code %d): %s", j.name, j.code, tailString(j.output(), 15))
			default:
			}
		}
		out, err := c.vms[0].run(ctx, 30*time.Second, nil, "/mnt/host/bin/octoctl", "status", "--json", "--server", admin, "--timeout", "5s")
		last = out
		if err == nil && strings.Contains(out, fmt.Sprintf(`"up": %d`, n)) && countVoters(out) == voters {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("the cluster did not form in 3 minutes; last status:\n%s", tailString(last, 20))
}

// countVoters counts the node ids in the "voters" list of octoctl status
// --json.
func countVoters(status string) int {
	m := regexp.MustCompile(`"voters":\s*\[([^\]]*)\]`).FindStringSubmatch(status)
	if m == nil {
		return 0
	}
	return len(regexp.MustCompile(`"[^"]+"`).FindAllString(m[1], -1))
}

// fsTable prints the runs side by side.
func fsTable(runs []*fsRun) string {
	if len(runs) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "file-system step: octofs serve on each guest's devdax NVDIMM (%d nodes), octofs mount in vm1\n", runs[0].nodes)
	row := func(label string, cell func(*fsRun) string) {
		fmt.Fprintf(&b, "  %-24s", label)
		for _, r := range runs {
			fmt.Fprintf(&b, "  %-34s", cell(r))
		}
		b.WriteString("\n")
	}
	row("", func(r *fsRun) string {
		if r.provider == "verbs" {
			return "verbs provider on rxe0"
		}
		return "soft provider (TCP, same link)"
	})
	row("posixtest", func(r *fsRun) string {
		if r.posixPassed+r.posixFailed+r.posixSkipped == 0 {
			return "not run"
		}
		return fmt.Sprintf("%d/%d passed, %d skipped", r.posixPassed, r.posixPassed+r.posixFailed, r.posixSkipped)
	})
	row("cp -a of the tree", func(r *fsRun) string {
		if r.files == 0 {
			return "not run"
		}
		return fmt.Sprintf("%d files, %d KiB in %.1fs", r.files, r.kib, r.copySecs)
	})
	row("diff -r and sha256", func(r *fsRun) string {
		if r.verified {
			return "identical"
		}
		return "not verified"
	})
	for _, r := range runs {
		if r.stopped != "" {
			fmt.Fprintf(&b, "  %s stopped at %s\n", r.provider, r.stopped)
		}
		if len(r.failedNames) > 0 {
			fmt.Fprintf(&b, "  %s posixtest failed: %s\n", r.provider, strings.Join(r.failedNames, ", "))
		}
	}
	if len(runs[0].skippedNames) > 0 {
		fmt.Fprintf(&b, "  posixtest skipped (%s): %s\n", runs[0].provider, strings.Join(runs[0].skippedNames, "; "))
	}
	return b.String()
}
