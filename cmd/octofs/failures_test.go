package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/stretchr/testify/require"
)

// exitMessage waits (bounded) for p to exit and returns the line main
// printed ("octofs: ...") and how long after start it exited.
func exitMessage(t *testing.T, p *serveProc, started time.Time, limit time.Duration) (string, time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(limit):
		t.Fatalf("octofs serve %s still runs after %v", strings.Join(p.args, " "), limit)
	}
	took := time.Since(started)
	require.Error(t, p.err, "a failed start exits non-zero")
	b, err := os.ReadFile(p.log)
	require.NoError(t, err)
	var msg string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "octofs: ") {
			msg = l
		}
	}
	require.NotEmpty(t, msg, "no error line in:\n%s", b)
	require.NotContains(t, string(b), "panic", "a start-up failure must not panic")
	return msg, took
}

// TestStartupFailures: each way `octofs serve` used to hang, panic or run
// uselessly now fails at once with a message that says what to do.
func TestStartupFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	root := t.TempDir()
	base := func(name string, extra ...string) []string {
		return append([]string{"--node-id", name, "--data-dir", filepath.Join(root, name), "--admin-addr", freeAddr(t), "--raft-addr", freeAddr(t)}, extra...)
	}
	// A running node whose data directory and token the cases below use.
	first := base("n1", "--bootstrap")
	p1 := startServe(t, "n1.log", first...)
	waitFor(t, "n1 up", 30*time.Second, func() bool { s, err := status(first[5]); return err == nil && s.CaughtUp })
	wrongToken := filepath.Join(root, "wrong-token")
	require.NoError(t, os.WriteFile(wrongToken, []byte("0123456789abcdef\n"), 0o600))
	taken, err := net.Listen("tcp", freeAddr(t))
	require.NoError(t, err)
	defer taken.Close()

	for _, tc := range []struct {
		name  string
		args  []string
		want  []string
		limit time.Duration
	}{
		{"data directory in use", []string{"--data-dir", filepath.Join(root, "n1"), "--admin-addr", freeAddr(t), "--raft-addr", freeAddr(t)},
			[]string{"is in use by process " + fmt.Sprint(p1.cmd.Process.Pid), "stop that process first, or give this node another --data-dir"}, 5 * time.Second},
		{"RDMA port taken", base("n2", "--bootstrap", "--pmem", filepath.Join(root, "n2.pmem"), "--pmem-size", "8388608", "--rdma-addr", taken.Addr().String()),
			[]string{"is another node using --rdma-addr " + taken.Addr().String()}, 30 * time.Second},
		{"too many partitions", base("n3", "--bootstrap", "--partitions", "70000"),
			[]string{"--partitions 70000: a cluster has 1 to 65536 partitions"}, 5 * time.Second},
		{"down-after too short", base("n4", "--bootstrap", "--heartbeat-interval", "1s", "--down-after", "1500ms"),
			[]string{"--down-after 1.5s must exceed two --heartbeat-interval (2s)"}, 5 * time.Second},
		{"address without port", base("n5", "--bootstrap", "--raft-addr", "7401"),
			[]string{`--raft-addr "7401": want host:port`}, 5 * time.Second},
		{"bootstrap and join", base("n6", "--bootstrap", "--join", first[5]),
			[]string{"give only one"}, 5 * time.Second},
		{"wrong token", base("n7", "--join", first[5], "--token-file", wrongToken),
			[]string{"missing or wrong cluster token", "give the cluster's token with --token-file (a member's <data-dir>/token) or OCTOFS_TOKEN"}, 30 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			p := startServe(t, strings.ReplaceAll(tc.name, " ", "-")+".log", tc.args...)
			msg, took := exitMessage(t, p, start, tc.limit)
			t.Logf("exit after %v: %s", took.Round(time.Millisecond), msg)
			for _, w := range tc.want {
				require.Contains(t, msg, w)
			}
			require.NotRegexp(t, regexp.MustCompile(`--token\b[^-]`), msg, "serve has no --token flag")
		})
	}
	// The first node was never disturbed.
	s, err := status(first[5])
	require.NoError(t, err)
	require.Equal(t, cluster.NodeID("n1"), s.NodeID)
	require.True(t, s.CaughtUp)
}

// procCluster is three `octofs serve` processes on loopback.
type procCluster struct {
	t         *testing.T
	root      string
	tokenFile string
	token     string
	nodes     []*procNode
}

type procNode struct {
	id, dir, admin, raft string
	args                 []string
	p                    *serveProc
	incarnation          int
}

func startProcCluster(t *testing.T, extra ...string) *procCluster {
	pc := &procCluster{t: t, root: t.TempDir()}
	for i := range 3 {
		n := &procNode{id: fmt.Sprintf("n%d", i+1), admin: freeAddr(t), raft: freeAddr(t)}
		n.dir = filepath.Join(pc.root, n.id)
		n.args = append([]string{"--node-id", n.id, "--data-dir", n.dir, "--admin-addr", n.admin, "--raft-addr", n.raft,
			"--heartbeat-interval", "200ms", "--down-after", "2s"}, extra...)
		pc.nodes = append(pc.nodes, n)
	}
	pc.tokenFile = filepath.Join(pc.nodes[0].dir, cluster.TokenFile)
	pc.nodes[0].args = append(pc.nodes[0].args, "--bootstrap")
	pc.start(pc.nodes[0])
	waitFor(t, "the token", 30*time.Second, func() bool { _, err := cluster.ReadTokenFile(pc.tokenFile); return err == nil })
	pc.token, _ = cluster.ReadTokenFile(pc.tokenFile)
	for _, n := range pc.nodes[1:] {
		n.args = append(n.args, "--join", pc.nodes[0].admin, "--token-file", pc.tokenFile)
		pc.start(n)
	}
	waitFor(t, "three processes form a cluster", 60*time.Second, func() bool { return pc.formed(3) })
	return pc
}

func (pc *procCluster) start(n *procNode) {
	n.incarnation++
	n.p = startServe(pc.t, fmt.Sprintf("%s-%d.log", n.id, n.incarnation), n.args...)
}

// formed reports whether every node answers, is caught up, and sees up
// nodes voting (three at most) with the same leader.
func (pc *procCluster) formed(up int) bool {
	var leader cluster.NodeID
	for _, n := range pc.nodes {
		s, err := status(n.admin)
		if err != nil || !s.CaughtUp || s.NodeStates[cluster.StateUp] != up || len(s.Voters) != min(up, 3) || (leader != "" && s.Leader != leader) {
			return false
		}
		leader = s.Leader
	}
	return true
}

func (pc *procCluster) admins() []string {
	var out []string
	for _, n := range pc.nodes {
		out = append(out, n.admin)
	}
	return out
}

func (pc *procCluster) leader() *procNode {
	for _, n := range pc.nodes {
		if s, err := status(n.admin); err == nil && s.RaftState == "Leader" {
			return n
		}
	}
	return nil
}

// stop sends SIGSTOP to p and waits until the kernel shows it stopped;
// the test's cleanup resumes it (before killing it).
func stop(t *testing.T, p *serveProc) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGSTOP))
	t.Cleanup(func() { _ = p.cmd.Process.Signal(syscall.SIGCONT) })
	waitFor(t, "the process stopped", 5*time.Second, func() bool { return procState(p.cmd.Process.Pid) == "T" })
}

// procState is the state letter of process pid in /proc/PID/stat.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// pid (comm) state ...; comm may hold spaces, so cut after the last ')'.
	if i := strings.LastIndexByte(string(b), ')'); i >= 0 && i+2 < len(b) {
		return string(b[i+2])
	}
	return ""
}

// TestStoppedLeader: with the leader stopped (SIGSTOP), a write through a
// follower does not hang for the client's whole timeout: the follower
// gives up on the leader after its forward timeout and the client retries
// until the others have elected a new leader. A client whose first
// --server is the stopped node moves on to the next after one attempt
// timeout, and when no server answers the error names each address.
func TestStoppedLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	pc := startProcCluster(t, "--partitions", "64")
	ld := pc.leader()
	require.NotNil(t, ld)
	var follower *procNode
	for _, n := range pc.nodes {
		if n != ld {
			follower = n
			break
		}
	}
	c := cluster.NewAdminClient([]string{follower.admin}, pc.token, nil)
	defer c.CloseIdleConnections()
	m, err := c.Map(context.Background())
	require.NoError(t, err)
	var p uint32
	for i, owner := range m.Partitions {
		if owner == cluster.NodeID(follower.id) {
			p = uint32(i)
			break
		}
	}

	stop(t, ld.p)
	stopped := time.Now()

	// A write through the follower, at once: the follower still takes the
	// stopped node for the leader and forwards to it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Pin(ctx, p, cluster.NodeID(follower.id))
	t.Logf("pin through %s with leader %s stopped: err=%v after %v", follower.id, ld.id, err, time.Since(start).Round(time.Millisecond))
	require.NoError(t, err)
	require.Less(t, time.Since(start), 20*time.Second)

	// Reads: the stopped node first, then a follower.
	rc := cluster.NewAdminClient([]string{ld.admin, follower.admin}, "", nil)
	defer rc.CloseIdleConnections()
	start = time.Now()
	s, err := rc.Status(context.Background())
	require.NoError(t, err)
	t.Logf("status with the stopped leader as first --server: answered by %s after %v", s.NodeID, time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), cluster.DefaultAttemptTimeout+2*time.Second)

	// Only the stopped node: a clear error within the attempt timeout.
	oc := cluster.NewAdminClient([]string{ld.admin}, "", nil)
	oc.SetAttemptTimeout(time.Second)
	_, err = oc.Status(context.Background())
	require.ErrorIs(t, err, cluster.ErrUnreachable)
	require.Contains(t, err.Error(), ld.admin+": no answer within 1s (the process may be stopped or overloaded)")
	t.Log(err)

	// Resumed, the old leader rejoins as a follower and catches up.
	require.NoError(t, ld.p.cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("leader stopped for %v", time.Since(stopped).Round(time.Millisecond))
	waitFor(t, "all caught up again", 30*time.Second, func() bool { return pc.formed(3) })
	s, err = status(ld.admin)
	require.NoError(t, err)
	require.NotEqual(t, cluster.NodeID(ld.id), s.Leader)
	m, err = cluster.NewAdminClient([]string{ld.admin}, pc.token, nil).Map(context.Background())
	require.NoError(t, err)
	require.True(t, m.IsPinned(p), "the old leader has the pin")
}
