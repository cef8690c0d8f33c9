package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// rxeGIDIndex finds the index of v's IPv4-mapped RoCE v2 GID on rxe0,
// which perftest needs as -x (the verbs provider finds it by itself).
func rxeGIDIndex(ctx context.Context, v *vm) (int, error) {
	// rxe's table has 1024 slots; its addresses are in the first few.
	// One grep prints "index:gid" for each.
	out, err := v.run(ctx, 20*time.Second, nil, "sh", "-c",
		`cd /sys/class/infiniband/rxe0/ports/1/gids && grep -H . $(seq 0 15)`)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, out)
	}
	want := netip.MustParseAddr(v.spec.IP)
	for _, line := range strings.Split(out, "\n") {
		idx, gidText, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		gid, err := netip.ParseAddr(gidText)
		if err == nil && gid.Unmap() == want {
			return strconv.Atoi(idx)
		}
	}
	return 0, fmt.Errorf("%s: no GID for %s on rxe0:\n%s", v.spec.Name, want, out)
}

func stepRXE(ctx context.Context, c *cluster, r *report) error {
	for _, v := range c.vms {
		out, err := v.run(ctx, 20*time.Second, nil, "sh", "-c", "ibv_devinfo -d rxe0 && rdma link show")
		switch {
		case err != nil:
			r.fail("rxe/"+v.spec.Name, fmt.Sprintf("%v\n%s", err, out))
		case !strings.Contains(out, "PORT_ACTIVE"):
			r.fail("rxe/"+v.spec.Name, "rxe0's port is not active:\n"+out)
		default:
			mtu := regexp.MustCompile(`active_mtu:\s*(\d+)`).FindStringSubmatch(out)
			detail := "rxe0 active"
			if mtu != nil {
				detail += ", active MTU " + mtu[1]
			}
			r.pass("rxe/"+v.spec.Name, detail)
		}
	}
	first := c.vms[0]
	for _, v := range c.vms[1:] {
		out, err := first.run(ctx, 20*time.Second, nil, "ping", "-c", "2", "-W", "5", v.spec.IP)
		if err != nil {
			r.fail("link/"+first.spec.Name+"-"+v.spec.Name, fmt.Sprintf("%v\n%s", err, out))
			continue
		}
		rtt := regexp.MustCompile(`min/avg/max = [\d.]+/([\d.]+)/`).FindStringSubmatch(out)
		detail := "reachable"
		if rtt != nil {
			detail += ", ping " + rtt[1] + " ms"
		}
		r.pass("link/"+first.spec.Name+"-"+v.spec.Name, detail)
	}
	return nil
}

// goTestResult is one test of a `go test -v` run.
type goTestResult struct {
	name, status string
	log          []string
}

// parseGoTestV reads `go test -v` output: every test's final status and
// the log lines printed while it ran.
func parseGoTestV(out string) []goTestResult {
	var res []goTestResult
	logs := map[string][]string{}
	running := ""
	runRe := regexp.MustCompile(`^=== (RUN|CONT|PAUSE|NAME)\s+(\S+)`)
	endRe := regexp.MustCompile(`^\s*--- (PASS|FAIL|SKIP): (\S+)`)
	for _, line := range strings.Split(out, "\n") {
		if m := runRe.FindStringSubmatch(line); m != nil {
			running = m[2]
			continue
		}
		if m := endRe.FindStringSubmatch(line); m != nil {
			res = append(res, goTestResult{name: m[2], status: m[1], log: logs[m[2]]})
			continue
		}
		if running != "" && strings.HasPrefix(line, "    ") {
			logs[running] = append(logs[running], strings.TrimSpace(line))
		}
	}
	return res
}

// leaves drops results that are parents of others: a parent's status only
// repeats its subtests'.
func leaves(all []goTestResult) []goTestResult {
	var out []goTestResult
	for _, t := range all {
		parent := false
		for _, u := range all {
			if strings.HasPrefix(u.name, t.name+"/") {
				parent = true
				break
			}
		}
		if !parent {
			out = append(out, t)
		}
	}
	return out
}

func stepConformance(ctx context.Context, c *cluster, r *report) error {
	v := c.vms[0]
	// The suite and the provider's own tests (GID choice, allocation-free
	// hot path); the devdax test has its own step.
	out, runErr := v.run(ctx, 7*time.Minute, []string{"OCTOFS_VERBS_DEVICE=rxe0"},
		"/mnt/host/bin/verbs.test", "-test.v", "-test.skip", "^(TestDevDaxRegion|TestFsDaxRefused)$", "-test.timeout", "6m")
	logPath := filepath.Join(c.runDir, "conformance.log")
	os.WriteFile(logPath, []byte(out), 0o644)
	tests := leaves(parseGoTestV(out))
	if len(tests) == 0 {
		return fmt.Errorf("no test results (%v); output in %s:\n%s", runErr, logPath, tailString(out, 30))
	}
	var passed, failed, skipped, suite int
	var failedNames, skippedNames []string
	for _, t := range tests {
		if strings.HasPrefix(t.name, "TestConformance/") && t.status == "PASS" {
			suite++
		}
		switch t.status {
		case "PASS":
			passed++
		case "FAIL":
			failed++
			failedNames = append(failedNames, t.name)
			r.failures = append(r.failures, fmt.Sprintf("conformance %s:\n%s", t.name, firstLines(strings.Join(t.log, "\n"), 8)))
			fmt.Printf("FAIL %s\n    %s\n", t.name, strings.Join(t.log, "\n    "))
		case "SKIP":
			skipped++
			skippedNames = append(skippedNames, t.name)
			fmt.Printf("SKIP %s: %s\n", t.name, firstLines(strings.Join(t.log, " "), 2))
		}
	}
	r.add(passed, failed, skipped)
	fmt.Printf("verbs provider tests on rxe0: %d passed (%d of them the conformance suite's), %d failed, %d skipped; full output in %s\n",
		passed, suite, failed, skipped, logPath)
	r.table(fmt.Sprintf("conformance suite and provider tests, verbs provider on rxe0: %d passed (conformance %d, provider %d), %d failed, %d skipped\n%s%s\n",
		passed, suite, passed-suite, failed, skipped, listLine("  failed: ", failedNames), listLine("  skipped: ", skippedNames)))
	if runErr != nil && failed == 0 {
		return fmt.Errorf("test binary: %v:\n%s", runErr, tailString(out, 30))
	}
	return nil
}

func listLine(prefix string, names []string) string {
	if len(names) == 0 {
		return ""
	}
	return prefix + strings.Join(names, ", ") + "\n"
}

func stepDevDax(ctx context.Context, c *cluster, r *report) error {
	v := c.vms[0]
	out, err := v.run(ctx, 2*time.Minute, []string{"OCTOFS_VERBS_DEVICE=rxe0", "OCTOFS_VERBS_DAX=/dev/dax0.0"},
		"/mnt/host/bin/verbs.test", "-test.v", "-test.run", "^TestDevDaxRegion$")
	res := leaves(parseGoTestV(out))
	if len(res) == 1 && res[0].status == "SKIP" {
		r.skip("devdax", strings.Join(res[0].log, " "))
		return nil
	}
	if err != nil || len(res) == 0 {
		return fmt.Errorf("%v\n%s", err, tailString(out, 20))
	}
	r.pass("devdax", "an emulated NVDIMM as /dev/dax0.0 registered with rxe0 and written and read over RDMA")
	return nil
}

func stepFsDax(ctx context.Context, c *cluster, r *report) error {
	v := c.vms[1]
	// busybox's mke2fs makes ext2 with 4 KiB blocks, which the kernel's
	// ext4 driver mounts with DAX; ext4 wants crc32c, a soft dependency
	// busybox's modprobe does not follow.
	out, err := v.run(ctx, time.Minute, nil, "sh", "-c", `set -e
		modprobe crc32c_generic
		mke2fs -q -b 4096 /dev/pmem0
		mkdir -p /mnt/pmem
		mount -t ext4 -o dax /dev/pmem0 /mnt/pmem
		dd if=/dev/zero of=/mnt/pmem/region bs=1M count=2 2>/dev/null
		grep pmem0 /proc/mounts`)
	if err != nil {
		return fmt.Errorf("make an fsdax file: %v\n%s", err, out)
	}
	out, err = v.run(ctx, 2*time.Minute, []string{"OCTOFS_VERBS_DEVICE=rxe0", "OCTOFS_VERBS_FSDAX=/mnt/pmem/region"},
		"/mnt/host/bin/verbs.test", "-test.v", "-test.run", "^TestFsDaxRefused$")
	res := leaves(parseGoTestV(out))
	if err != nil || len(res) != 1 || res[0].status != "PASS" {
		return fmt.Errorf("%v\n%s", err, tailString(out, 20))
	}
	detail := "registering an fsdax mapping is refused"
	for _, l := range res[0].log {
		if i := strings.Index(l, "refused as expected: "); i >= 0 {
			detail += ": " + l[i+len("refused as expected: "):]
		}
	}
	r.pass("fsdax", detail)
	return nil
}

// perfResult is one measurement, in MiB/s or µs.
type perfResult struct {
	value float64
	unit  string
}

// perftests are the raw baseline: perftest's own programs over rxe0.
var perftests = []struct {
	key, prog string
	args      []string
	bw        bool
	// halfRTT marks a latency perftest reports as half a round trip.
	halfRTT bool
}{
	// 16 outstanding requests (-t), as octoctl bench rdma's --depth
	// default: perftest's default of 128 MiB in flight only measures how
	// rxe copes with its own retransmissions under emulation.
	{"write_bw_1M", "ib_write_bw", []string{"-s", "1048576", "-D", "3", "-t", "16"}, true, false},
	{"read_bw_1M", "ib_read_bw", []string{"-s", "1048576", "-D", "3", "-t", "16"}, true, false},
	{"read_lat_8", "ib_read_lat", []string{"-s", "8", "-n", "1000"}, false, false},
	{"send_lat_8", "ib_send_lat", []string{"-s", "8", "-n", "1000"}, false, true},
	// ib_send_lat sleeping on CQ events (-e), as octoctl's --poll wait
	// does: the baseline of a ping-pong that does not spin. (octoctl's
	// auto mode waits in these single-CPU guests.)
	{"send_lat_8_ev", "ib_send_lat", []string{"-s", "8", "-n", "1000", "-e"}, false, true},
}

func stepPerftest(ctx context.Context, c *cluster, r *report) error {
	srv, cli := c.vms[0], c.vms[1]
	sg, err := rxeGIDIndex(ctx, srv)
	if err != nil {
		return err
	}
	cg, err := rxeGIDIndex(ctx, cli)
	if err != nil {
		return err
	}
	c.baseline = map[string]perfResult{}
	for i, pt := range perftests {
		port := strconv.Itoa(18600 + i)
		common := append([]string{pt.prog, "-d", "rxe0", "-i", "1", "-F", "-p", port}, pt.args...)
		sj, err := srv.start(pt.prog+" server", nil, append(common, "-x", strconv.Itoa(sg))...)
		if err != nil {
			return err
		}
		// perftest's stdout is a pipe here, so its "Waiting for client"
		// stays buffered: wait for its listening socket instead.
		if err := waitListening(ctx, srv, sj, port, 30*time.Second); err != nil {
			sj.kill()
			r.fail("perftest/"+pt.key, err.Error())
			continue
		}
		out, err := cli.run(ctx, 90*time.Second, nil, append(common, "-x", strconv.Itoa(cg), srv.spec.IP)...)
		sout, serr := sj.wait(ctx, 30*time.Second)
		os.WriteFile(filepath.Join(c.runDir, "perftest-"+pt.key+".log"), []byte(out), 0o644)
		if err != nil {
			r.fail("perftest/"+pt.key, fmt.Sprintf("client: %v\n%s\nserver: %v\n%s", err, tailString(out, 15), serr, tailString(sout, 10)))
			continue
		}
		res, perr := parsePerftest(out, pt.bw)
		if perr != nil {
			r.fail("perftest/"+pt.key, fmt.Sprintf("%v:\n%s", perr, out))
			continue
		}
		r.pass("perftest/"+pt.key, fmt.Sprintf("%s %.2f %s", pt.prog, res.value, res.unit))
		if pt.halfRTT {
			// ib_send_lat reports half a ping-pong; octoctl reports
			// whole round trips, like ib_read_lat.
			res = perfResult{value: 2 * res.value, unit: "µs (2× typical)"}
		}
		c.baseline[pt.key] = res
	}
	return nil
}

// waitListening waits until server job j listens on TCP port in v (or
// ends, or time runs out). The guest polls its own socket table.
func waitListening(ctx context.Context, v *vm, j *job, port string, timeout time.Duration) error {
	probe, err := v.start("wait for port "+port, nil, "sh", "-c",
		`until netstat -ltn | grep -q ":$0 "; do sleep 0.1; done`, port)
	if err != nil {
		return err
	}
	defer probe.kill()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-probe.done:
		return nil
	case <-j.done:
		return fmt.Errorf("%q ended (code %d) before listening on %s:\n%s", j.name, j.code, port, tailString(j.output(), 15))
	case <-t.C:
		return fmt.Errorf("%q not listening on %s after %v:\n%s", j.name, port, timeout, tailString(j.output(), 15))
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parsePerftest reads the result line under perftest's "#bytes" header:
// BW average[MB/sec] (MiB/s: perftest divides by 2^20) for bandwidth
// tests, t_typical[usec] for latency tests.
func parsePerftest(out string, bw bool) (perfResult, error) {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if !strings.Contains(l, "#bytes") {
			continue
		}
		for _, d := range lines[i+1:] {
			f := strings.Fields(d)
			if len(f) < 5 {
				continue
			}
			if _, err := strconv.Atoi(f[0]); err != nil {
				continue
			}
			col, unit := 4, "µs (typical)"
			if bw {
				col, unit = 3, "MiB/s"
			}
			v, err := strconv.ParseFloat(f[col], 64)
			if err != nil {
				return perfResult{}, fmt.Errorf("result line %q: %v", d, err)
			}
			return perfResult{value: v, unit: unit}, nil
		}
	}
	return perfResult{}, errors.New("no result line in perftest output")
}

func tailString(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
