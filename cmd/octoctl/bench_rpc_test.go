package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// quickRPCOptions are flags for a run that takes a second or two.
func quickRPCOptions() *benchRPCOptions {
	return &benchRPCOptions{provider: "soft", gidIndex: -1, depths: "1,4", sizes: "1K,8K", duration: 20 * time.Millisecond}
}

func TestBenchRPCPlan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		depths string
		sizes  string
		ok     bool
	}{
		{"defaults", "1,16,64", "1K,4K,64K,1M", true},
		{"no sizes", "1", "", true},
		{"depth zero", "0", "", false},
		{"depth over the slots", "65", "", false},
		{"size over the largest message", "1", "2M", false},
		{"size garbage", "1", "x", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := quickRPCOptions()
			o.depths, o.sizes = tc.depths, tc.sizes
			_, err := o.plan()
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

// TestBenchRPCServeConnect runs a server and a client in this process, as
// --serve and --connect would in two.
func TestBenchRPCServeConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	so := quickRPCOptions()
	so.serve, so.listen, so.tcpListen = true, "127.0.0.1:0", "127.0.0.1:0"
	pr, pw := io.Pipe()
	served := make(chan error, 1)
	go func() { served <- serveBenchRPC(ctx, so, pw) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	require.NoError(t, err)
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), benchRPCReadyPrefix)
	require.True(t, ok, "ready line %q", line)
	addrs := strings.Fields(rest)
	require.Len(t, addrs, 2)
	go io.Copy(io.Discard, pr)

	co := quickRPCOptions()
	plan, err := co.plan()
	require.NoError(t, err)
	tables, err := runBenchRPCClient(ctx, co, plan, addrs[0], addrs[1], "")
	require.NoError(t, err)
	require.Len(t, tables, 2)
	null, echo := tables[0], tables[1]
	require.Len(t, null.Rows, 2, "depths 1 and 4")
	for _, r := range null.Rows {
		require.Len(t, r, len(null.Columns))
		require.NotEqual(t, "0", r[3], "no RPC calls measured in row %v", r)
		require.NotEqual(t, "0", r[6], "no TCP calls measured in row %v", r)
	}
	require.Len(t, echo.Rows, 2)
	require.Equal(t, "inline SEND", echo.Rows[0][1])
	require.Equal(t, "RDMA READ both ways", echo.Rows[1][1])

	var out bytes.Buffer
	require.NoError(t, null.print(&out, true))
	var decoded benchTable
	require.NoError(t, json.Unmarshal(out.Bytes(), &decoded))
	require.Equal(t, null.Rows, decoded.Rows)

	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("server still running 30s after its context ended")
	}
}

// TestBenchRPCSpawn runs the command as `make bench` does: it starts the
// server as a child process and stops it.
func TestBenchRPCSpawn(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	t.Setenv("OCTOCTL_TEST_RUN_MAIN", "1")
	o := quickRPCOptions()
	o.sizes = ""
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, runBenchRPC(ctx, &out, o))
	s := out.String()
	require.Contains(t, s, "rpc null calls")
	require.Contains(t, s, "server: child process")
	require.Contains(t, s, "target: null RPC p50")
}
