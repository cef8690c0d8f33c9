package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMain lets the test binary stand in for octoctl when a test spawns
// "octoctl bench rdma --serve" as a child of itself.
func TestMain(m *testing.M) {
	if os.Getenv("OCTOCTL_TEST_RUN_MAIN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{
		{"64", 64, true},
		{"4K", 4096, true},
		{"4KiB", 4096, true},
		{"1m", 1 << 20, true},
		{"1MiB", 1 << 20, true},
		{"100B", 100, true},
		{"0", 0, false},
		{"-1", 0, false},
		{"1G", 0, false},
		{"65M", 0, false},
		{"", 0, false},
		{"K", 0, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseSize(tc.in)
			if tc.ok {
				require.NoError(t, err)
				require.Equal(t, tc.want, got)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// quickOptions are flags for a run that takes about a second.
func quickOptions() *benchRDMAOptions {
	return &benchRDMAOptions{provider: "soft", gidIndex: -1, sizes: "64,4K", depth: 4,
		duration: 20 * time.Millisecond, tests: "write,read,send,lat", poll: string(pollHybrid)}
}

// TestBenchRDMAServeConnect runs a server and a client in this process,
// as --serve and --connect would in two.
func TestBenchRDMAServeConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	so := quickOptions()
	so.serve, so.listen = true, "127.0.0.1:0"
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- serveBenchRDMA(ctx, so, pw) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), benchReadyPrefix)
	require.True(t, ok, "ready line %q", line)
	go io.Copy(io.Discard, pr)

	co := quickOptions()
	co.connect = addr
	plan, err := co.plan()
	require.NoError(t, err)
	tables, err := runBenchClient(ctx, co, plan, addr, "")
	require.NoError(t, err)
	require.Len(t, tables, 2)
	bw, lat := tables[0], tables[1]
	require.Len(t, bw.Rows, 3*2, "WRITE, READ and SEND at two sizes")
	for _, r := range bw.Rows {
		require.Len(t, r, len(bw.Columns))
		require.NotEqual(t, "0.0", r[2], "no bandwidth in row %v", r)
		require.NotEqual(t, "0.0", r[4], "no TCP bandwidth in row %v", r)
	}
	require.Len(t, lat.Rows, 5, "READ, SEND ping-pong, two atomics and TCP")
	for _, r := range lat.Rows {
		require.NotEqual(t, "0", r[5], "no samples in row %v", r)
	}

	var out bytes.Buffer
	require.NoError(t, bw.print(&out, true))
	var decoded benchTable
	require.NoError(t, json.Unmarshal(out.Bytes(), &decoded))
	require.Equal(t, bw.Rows, decoded.Rows)

	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("server still running 30s after its context ended")
	}
}

// TestBenchRDMASpawn runs the command as `make bench` does: no --serve or
// --connect, so it starts the server as a child process and stops it.
func TestBenchRDMASpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	t.Setenv("OCTOCTL_TEST_RUN_MAIN", "1")
	o := quickOptions()
	o.tests = "read,lat"
	o.sizes = "1K"
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, runBenchRDMA(ctx, &out, o))
	s := out.String()
	require.Contains(t, s, "RDMA_READ")
	require.Contains(t, s, "server: child process")
	require.Contains(t, s, "TCP ping-pong")
}

// TestPollerLearnsWaits: a spinning poller spins twice the longest recent
// wait before it blocks (never less than busyLimit, never more than
// maxBusyLimit), and forgets long waits an eighth at a time.
func TestPollerLearnsWaits(t *testing.T) {
	p := newPoller(pollSpin)
	require.Equal(t, busyLimit, p.limit)
	p.learn(time.Millisecond)
	require.Equal(t, busyLimit, p.limit, "a short wait keeps the floor")
	p.learn(30 * time.Millisecond)
	require.Equal(t, 60*time.Millisecond, p.limit, "twice a long wait")
	p.learn(time.Millisecond)
	require.Equal(t, 60*time.Millisecond-60*time.Millisecond/8, p.limit, "decays by an eighth")
	for range 100 {
		p.learn(time.Millisecond)
	}
	require.Equal(t, busyLimit, p.limit, "back to the floor")
	p.learn(10 * time.Second)
	require.Equal(t, maxBusyLimit, p.limit, "capped")
}
