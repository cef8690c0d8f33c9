package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestParseGoTestV(t *testing.T) {
	out := `=== RUN   TestConformance
=== RUN   TestConformance/Caps
--- PASS: TestConformance/Caps (0.01s)
=== RUN   TestConformance/Atomics
=== RUN   TestConformance/Atomics/Misaligned
    atomic.go:88: got completion {id 1: remote access error}, want id 1 with status "remote invalid request"
--- FAIL: TestConformance/Atomics/Misaligned (0.20s)
=== RUN   TestConformance/Faults
    faults.go:33: provider "verbs" does not implement rdma.Faults
--- SKIP: TestConformance/Faults (0.00s)
--- FAIL: TestConformance/Atomics (0.20s)
--- FAIL: TestConformance (0.21s)
FAIL
`
	got := leaves(parseGoTestV(out))
	want := map[string]string{
		"TestConformance/Caps":               "PASS",
		"TestConformance/Atomics/Misaligned": "FAIL",
		"TestConformance/Faults":             "SKIP",
	}
	if len(got) != len(want) {
		t.Fatalf("leaves = %+v, want %v", got, want)
	}
	for _, r := range got {
		if want[r.name] != r.status {
			t.Errorf("%s: status %s, want %s", r.name, r.status, want[r.name])
		}
	}
	for _, r := range got {
		if r.name == "TestConformance/Atomics/Misaligned" && (len(r.log) != 1 || !strings.Contains(r.log[0], "atomic.go:88")) {
			t.Errorf("failure log = %q, want the atomic.go:88 line", r.log)
		}
	}
}

func TestParsePerftest(t *testing.T) {
	for _, tc := range []struct {
		file string
		bw   bool
		want float64
	}{
		{"testdata/ib_write_bw.txt", true, 6.32},     // BW average, not BW peak
		{"testdata/ib_read_lat.txt", false, 1303.11}, // t_typical, not t_min or t_avg
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parsePerftest(string(b), tc.bw)
			if err != nil {
				t.Fatal(err)
			}
			if got.value != tc.want {
				t.Fatalf("parsePerftest = %+v, want %v", got, tc.want)
			}
		})
	}
	if _, err := parsePerftest("Couldn't connect to 169.254.10.1:18600\n", true); err == nil {
		t.Error("parsePerftest of a failed run gave no error")
	}
}

func TestFindBench(t *testing.T) {
	b, err := os.ReadFile("testdata/bench.json")
	if err != nil {
		t.Fatal(err)
	}
	var tables []benchTable
	for _, line := range strings.Split(string(b), "\n") {
		var tb benchTable
		if json.Unmarshal([]byte(line), &tb) == nil && len(tb.Columns) > 0 {
			tables = append(tables, tb)
		}
	}
	// The octoctl figures, not the TCP baseline's or a tail percentile.
	for _, tc := range []struct {
		op, size string
		bw       bool
		want     float64
	}{
		{"RDMA_WRITE", "1MiB", true, 11.7},
		{"RDMA_READ", "1MiB", true, 16.7},
		{"RDMA_READ", "8B", false, 1324.7},
		{"SEND", "8B", false, 7920.5},
	} {
		got, ok := findBench(tables, tc.op, tc.size, tc.bw)
		if !ok || got.value != tc.want {
			t.Errorf("findBench(%s %s) = %+v, %v; want %v", tc.op, tc.size, got, ok, tc.want)
		}
	}
	if _, ok := findBench(tables, "RDMA_WRITE", "8B", false); ok {
		t.Error("findBench found a WRITE latency that the bench does not measure")
	}
}

func TestParseUnits(t *testing.T) {
	for _, tc := range []struct {
		cell, col string
		want      float64
	}{
		{"35.5", "MiB/s", 35.5},
		{"1 GiB/s", "bw", 1024},
		{"8 Gbit/s", "bw", 8e9 / 8 / (1 << 20)},
	} {
		if got, ok := parseBandwidth(tc.cell, tc.col); !ok || got != tc.want {
			t.Errorf("parseBandwidth(%q, %q) = %v, %v; want %v", tc.cell, tc.col, got, ok, tc.want)
		}
	}
	for _, tc := range []struct {
		cell, col string
		want      float64
	}{
		{"251.5", "p50", 251.5},
		{"1.5ms", "p50", 1500},
		{"2", "p50 ms", 2000},
	} {
		if got, ok := parseLatency(tc.cell, tc.col); !ok || got != tc.want {
			t.Errorf("parseLatency(%q, %q) = %v, %v; want %v", tc.cell, tc.col, got, ok, tc.want)
		}
	}
}

func TestCountVoters(t *testing.T) {
	for name, tc := range map[string]struct {
		status string
		want   int
	}{
		"indented": {"{\n  \"voters\": [\n    \"n1\",\n    \"n2\"\n  ],\n  \"nonvoters\": [\"n3\"],\n  \"node_states\": {\"up\": 3}\n}", 2},
		"one line": {`{"voters":["n1","n2","n3"],"nonvoters":null}`, 3},
		"empty":    {`{"voters": [], "nonvoters": ["n1"]}`, 0},
		"null":     {`{"voters": null}`, 0},
	} {
		if got := countVoters(tc.status); got != tc.want {
			t.Errorf("%s: countVoters = %d, want %d", name, got, tc.want)
		}
	}
}
