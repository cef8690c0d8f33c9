package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// benchTable is octoctl bench's --json output: one object per table.
type benchTable struct {
	Title   string     `json:"title"`
	Columns []string   `json:"columns"`
	Rows    [][]string `json:"rows"`
	Notes   []string   `json:"notes"`
}

const benchPort = "18515"

func stepBench(ctx context.Context, c *cluster, r *report) error {
	if _, err := os.Stat(filepath.Join(c.share, "bin", "octoctl")); err != nil {
		r.skip("bench", "octoctl with the verbs provider did not build: "+firstLines(c.octoctlErr, 6))
		return nil
	}
	srv, cli := c.vms[0], c.vms[1]
	addr := srv.spec.IP + ":" + benchPort
	common := []string{"/mnt/host/bin/octoctl", "bench", "rdma", "--provider", "verbs", "--device", "rxe0"}
	sj, err := srv.start("octoctl bench server", nil, append(common, "--serve", "--listen", addr)...)
	if err != nil {
		return err
	}
	defer func() {
		sj.kill()
		sj.wait(ctx, 10*time.Second)
	}()
	args := append(common, "--connect", addr, "--sizes", "1M", "--duration", "3s", "--tests", "write,read,lat", "--json")
	var out string
	// The server needs a moment to listen; retry the client while the
	// connection is refused, not longer.
	for attempt := 0; ; attempt++ {
		out, err = cli.run(ctx, 4*time.Minute, nil, args...)
		if err == nil || attempt == 20 || !strings.Contains(out, "connection refused") {
			break
		}
		select {
		case <-sj.done:
			return fmt.Errorf("bench server ended: %v\n%s", sj.code, tailString(sj.output(), 20))
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	os.WriteFile(filepath.Join(c.runDir, "bench.json"), []byte(out), 0o644)
	if err != nil {
		return fmt.Errorf("client: %v\n%s\nserver:\n%s", err, tailString(out, 20), tailString(sj.output(), 10))
	}
	var tables []benchTable
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var t benchTable
		if json.Unmarshal(sc.Bytes(), &t) == nil && len(t.Columns) > 0 {
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return fmt.Errorf("no tables in octoctl's output:\n%s", tailString(out, 20))
	}
	var raw strings.Builder
	raw.WriteString("octoctl bench rdma --provider verbs (vm2 -> vm1 over rxe0):\n")
	for _, t := range tables {
		renderTable(&raw, t)
	}
	r.table(raw.String())

	// The latency tests again in other polling modes (-bench-poll), to
	// see what waiting for completions costs on rxe.
	for _, mode := range benchPolls {
		margs := append(append([]string(nil), common...), "--connect", addr, "--duration", "3s", "--tests", "lat", "--poll", mode, "--json")
		mout, err := cli.run(ctx, 4*time.Minute, nil, margs...)
		if err != nil {
			r.fail("bench/poll-"+mode, fmt.Sprintf("%v\n%s", err, tailString(mout, 10)))
			continue
		}
		var mraw strings.Builder
		fmt.Fprintf(&mraw, "octoctl bench rdma --provider verbs --tests lat --poll %s:\n", mode)
		msc := bufio.NewScanner(strings.NewReader(mout))
		msc.Buffer(make([]byte, 1<<20), 1<<20)
		for msc.Scan() {
			var t benchTable
			if json.Unmarshal(msc.Bytes(), &t) == nil && len(t.Columns) > 0 {
				renderTable(&mraw, t)
				if v, ok := findBench([]benchTable{t}, "SEND", "8B", false); ok {
					if base, have := c.baseline["send_lat_8"]; have && base.value > 0 {
						fmt.Fprintf(&mraw, "  SEND ping-pong vs perftest (%s): %.2fx\n", mode, v.value/base.value)
					}
					if base, have := c.baseline["send_lat_8_ev"]; have && base.value > 0 {
						fmt.Fprintf(&mraw, "  SEND ping-pong vs perftest -e (%s): %.2fx\n", mode, v.value/base.value)
					}
				}
			}
		}
		r.table(mraw.String())
		r.pass("bench/poll-"+mode, "latency tests ran")
	}

	rows := []struct {
		label, key, op, size string
		bw                   bool
	}{
		{"1 MiB RDMA WRITE bandwidth", "write_bw_1M", "RDMA_WRITE", "1MiB", true},
		{"1 MiB RDMA READ bandwidth", "read_bw_1M", "RDMA_READ", "1MiB", true},
		{"8 B RDMA READ latency", "read_lat_8", "RDMA_READ", "8B", false},
		{"8 B SEND ping-pong round trip", "send_lat_8", "SEND", "8B", false},
		{"the same, perftest -e (CQ events)", "send_lat_8_ev", "SEND", "8B", false},
	}
	var cmp strings.Builder
	cmp.WriteString("perftest vs octoctl bench rdma --provider verbs, vm1 <-> vm2 over rxe (ratio: octoctl/perftest)\n")
	tw := tabwriter.NewWriter(&cmp, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  measurement\tperftest\toctoctl (verbs)\tratio\t")
	for _, row := range rows {
		base, haveBase := c.baseline[row.key]
		got, ok := findBench(tables, row.op, row.size, row.bw)
		bs, gs, ratio := "-", "-", "-"
		if haveBase {
			bs = fmt.Sprintf("%.2f %s", base.value, base.unit)
		}
		if ok {
			gs = fmt.Sprintf("%.2f %s", got.value, got.unit)
		}
		if haveBase && ok && base.value > 0 {
			ratio = fmt.Sprintf("%.2fx", got.value/base.value)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", row.label, bs, gs, ratio)
		if ok {
			r.pass("bench/"+row.key, gs)
		} else if !strings.HasPrefix(row.key, "send_lat_8") {
			r.fail("bench/"+row.key, "no such figure in octoctl's output")
		}
	}
	tw.Flush()
	cmp.WriteString("  bandwidth: higher is better; latency: lower is better; latencies are whole round trips\n")
	cmp.WriteString("  (perftest's typical, doubled for ib_send_lat's half round trip; octoctl's median)\n\n")
	r.table(cmp.String())
	return nil
}

func renderTable(w *strings.Builder, t benchTable) {
	w.WriteString(t.Title + "\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.Columns, "\t")+"\t")
	for _, r := range t.Rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
	for _, n := range t.Notes {
		w.WriteString("  " + n + "\n")
	}
	w.WriteString("\n")
}

// findBench finds a figure in octoctl's tables: the row of operation op at
// size, its bandwidth (MiB/s) or median latency (µs). It matches columns
// by name so that the table layout may evolve.
func findBench(tables []benchTable, op, size string, bw bool) (perfResult, bool) {
	for _, t := range tables {
		for _, row := range t.Rows {
			cells := map[string]string{}
			line := strings.ToUpper(t.Title)
			for i, col := range t.Columns {
				if i < len(row) {
					cells[strings.ToLower(col)] = row[i]
					line += " " + strings.ToUpper(row[i])
				}
			}
			if !containsWord(line, op) || !containsCell(row, size) {
				continue
			}
			if bw && !strings.Contains(line, "TCP") {
				for _, col := range t.Columns {
					lc := strings.ToLower(col)
					if strings.Contains(lc, "tcp") || strings.Contains(lc, "ratio") {
						continue
					}
					if strings.Contains(lc, "/s") || strings.Contains(lc, "bandwidth") || strings.Contains(lc, "bw") {
						if v, ok := parseBandwidth(cells[lc], lc); ok {
							return perfResult{v, "MiB/s"}, true
						}
					}
				}
			}
			if !bw {
				for _, pref := range []string{"p50", "median", "typical", "avg", "mean", "lat"} {
					for _, col := range t.Columns {
						lc := strings.ToLower(col)
						if strings.Contains(lc, "tcp") || !strings.Contains(lc, pref) {
							continue
						}
						if v, ok := parseLatency(cells[lc], lc); ok {
							return perfResult{v, "µs (median)"}, true
						}
					}
				}
			}
		}
	}
	return perfResult{}, false
}

func containsWord(s, w string) bool {
	return regexp.MustCompile(`(^|[^A-Z_])` + regexp.QuoteMeta(w) + `($|[^A-Z_])`).MatchString(s)
}

func containsCell(row []string, v string) bool {
	for _, c := range row {
		if strings.EqualFold(strings.TrimSpace(c), v) {
			return true
		}
	}
	return false
}

var numUnit = regexp.MustCompile(`^\s*([0-9.]+)\s*([A-Za-zµ/]*)`)

// leadingNumber reads the number a cell starts with and the unit written
// right after it ("" if none).
func leadingNumber(cell string) (float64, string, bool) {
	m := numUnit.FindStringSubmatch(cell)
	if m == nil {
		return 0, "", false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, "", false
	}
	return v, m[2], true
}

// parseBandwidth reads "35.2", "35.2 MiB/s", "1.2 GB/s" or "0.3 Gbit/s"
// (the unit from the cell, else from the column name) as MiB/s.
func parseBandwidth(cell, col string) (float64, bool) {
	v, unit, ok := leadingNumber(cell)
	if !ok {
		return 0, false
	}
	unit = strings.ToLower(unit)
	if unit == "" {
		unit = col
	}
	switch {
	case strings.Contains(unit, "gib/s"):
		return v * 1024, true
	case strings.Contains(unit, "gb/s"):
		return v * 1e9 / (1 << 20), true
	case strings.Contains(unit, "gbit"):
		return v * 1e9 / 8 / (1 << 20), true
	case strings.Contains(unit, "mib/s"):
		return v, true
	case strings.Contains(unit, "mb/s"):
		return v * 1e6 / (1 << 20), true
	case strings.Contains(unit, "kib/s"):
		return v / 1024, true
	}
	return v, true
}

// parseLatency reads a Go duration ("251.3µs", "1.2ms") or a number whose
// unit the column names, as µs.
func parseLatency(cell, col string) (float64, bool) {
	if d, err := time.ParseDuration(strings.TrimSpace(strings.ReplaceAll(cell, "us", "µs"))); err == nil {
		return float64(d) / float64(time.Microsecond), true
	}
	v, _, ok := leadingNumber(cell)
	if !ok {
		return 0, false
	}
	switch {
	case strings.Contains(col, "ms"):
		return v * 1000, true
	case strings.Contains(col, "ns"):
		return v / 1000, true
	}
	return v, true
}
