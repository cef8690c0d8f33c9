package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/client/proctest"
	"github.com/octofs/octofs/cluster"
)

// The test binary doubles as the octofs program: with this variable set it
// runs main, so the tests can start real `octofs serve` processes without
// building anything.
const runMainEnv = "OCTOFS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// freeAddr returns a loopback address with a free port for a child
// process to listen on (proctest.FreeAddr).
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := proctest.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

type serveProc struct {
	cmd  *exec.Cmd
	args []string
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, valid after done
}

// startServe runs `octofs serve args...` as a child process; the test's
// cleanup kills it by PID if it still runs.
func startServe(t *testing.T, logName string, args ...string) *serveProc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), logName)
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], append([]string{"serve"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	p := &serveProc{cmd: cmd, args: args, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("log of %s:\n%s", logName, b)
		}
	})
	return p
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, limit, 50*time.Millisecond, "waiting for: %s", what)
}

func status(addr string) (*cluster.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	c := cluster.NewAdminClient([]string{addr}, "", nil)
	defer c.CloseIdleConnections()
	return c.Status(ctx)
}

// TestServeProcesses starts three real `octofs serve` processes (the third
// from a config file), kills the leader with SIGKILL by PID, checks that a
// new leader is elected and the killed node rejoins from its data
// directory without bootstrapping again, then stops all with SIGTERM.
func TestServeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes; skipped with -short")
	}
	root := t.TempDir()
	type node struct {
		id, dir, admin, raft string
		p                    *serveProc
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = &node{id: fmt.Sprintf("n%d", i+1), dir: filepath.Join(root, fmt.Sprintf("n%d", i+1)), admin: freeAddr(t), raft: freeAddr(t)}
	}
	common := []string{"--heartbeat-interval", "100ms", "--down-after", "1500ms", "--partitions", "128", "--log-level", "debug"}
	argsOf := func(n *node, extra ...string) []string {
		return append(append([]string{"--node-id", n.id, "--data-dir", n.dir, "--admin-addr", n.admin, "--raft-addr", n.raft}, common...), extra...)
	}
	n1 := nodes[0]
	n1.p = startServe(t, "n1.log", argsOf(n1, "--bootstrap")...)
	tokenFile := filepath.Join(n1.dir, cluster.TokenFile)
	waitFor(t, "token file", 20*time.Second, func() bool { _, err := os.Stat(tokenFile); return err == nil })
	st, err := os.Stat(tokenFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	nodes[1].p = startServe(t, "n2.log", argsOf(nodes[1], "--join", n1.admin, "--token-file", tokenFile)...)
	// The third node takes everything from a config file.
	cfg := map[string]any{
		"node-id": "n3", "data-dir": nodes[2].dir, "admin-addr": nodes[2].admin, "raft-addr": nodes[2].raft,
		"join": []string{n1.admin, nodes[1].admin}, "token-file": tokenFile,
		"heartbeat-interval": "100ms", "down-after": "1500ms", "log-level": "debug",
	}
	b, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(root, "n3.json")
	require.NoError(t, os.WriteFile(cfgPath, b, 0o600))
	nodes[2].p = startServe(t, "n3.log", "--config", cfgPath)

	formed := func() bool {
		for _, n := range nodes {
			s, err := status(n.admin)
			if err != nil || len(s.Voters) != 3 || s.NodeStates[cluster.StateUp] != 3 || s.Leader == "" {
				return false
			}
		}
		return true
	}
	start := time.Now()
	waitFor(t, "three processes form a cluster", 30*time.Second, formed)
	t.Logf("three serve processes formed a cluster in %v", time.Since(start).Round(time.Millisecond))
	s, err := status(n1.admin)
	require.NoError(t, err)
	clusterID := s.ClusterID

	// SIGKILL the leader by PID.
	var leader *node
	for _, n := range nodes {
		if cluster.NodeID(n.id) == s.Leader {
			leader = n
		}
	}
	require.NotNil(t, leader)
	killed := time.Now()
	require.NoError(t, leader.p.cmd.Process.Signal(syscall.SIGKILL))
	<-leader.p.done
	var newLeader cluster.NodeID
	waitFor(t, "a new leader", 20*time.Second, func() bool {
		for _, n := range nodes {
			if n == leader {
				continue
			}
			if s, err := status(n.admin); err == nil && s.Leader != "" && s.Leader != cluster.NodeID(leader.id) && s.RaftState == "Leader" {
				newLeader = s.NodeID
				return true
			}
		}
		return false
	})
	t.Logf("leader %s SIGKILLed; %s leads after %v (default raft timeouts)", leader.id, newLeader, time.Since(killed).Round(time.Millisecond))
	waitFor(t, "the killed node marked down", 20*time.Second, func() bool {
		for _, n := range nodes {
			if n != leader {
				s, err := status(n.admin)
				return err == nil && s.NodeStates[cluster.StateDown] == 1
			}
		}
		return false
	})

	// Restart it with the same command line (n1's includes --bootstrap,
	// which must now be ignored).
	leader.p = startServe(t, leader.id+"-restart.log", leader.p.args...)
	waitFor(t, "restarted node rejoins", 30*time.Second, formed)
	b, err = os.ReadFile(leader.p.log)
	require.NoError(t, err)
	require.Contains(t, string(b), "restarting from existing state; not bootstrapping or joining")
	epochs := map[uint64]bool{}
	waitFor(t, "same epoch everywhere", 10*time.Second, func() bool {
		clear(epochs)
		for _, n := range nodes {
			s, err := status(n.admin)
			if err != nil || s.ClusterID != clusterID {
				return false
			}
			epochs[s.Epoch] = true
		}
		return len(epochs) == 1
	})

	// SIGTERM: every process exits 0, promptly.
	for _, n := range nodes {
		require.NoError(t, n.p.cmd.Process.Signal(syscall.SIGTERM))
	}
	for _, n := range nodes {
		select {
		case <-n.p.done:
			require.NoError(t, n.p.err, "%s exit", n.id)
		case <-time.After(15 * time.Second):
			t.Fatalf("%s did not stop on SIGTERM", n.id)
		}
	}
}
