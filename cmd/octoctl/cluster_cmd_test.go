package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/stretchr/testify/require"
)

// ctlNode starts an in-process node on loopback with short timeouts.
func ctlNode(t *testing.T, id string, mod func(*cluster.Config)) *cluster.Node {
	t.Helper()
	rl, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	al, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cfg := cluster.Config{
		ID: cluster.NodeID(id), DataDir: filepath.Join(t.TempDir(), id),
		RaftListener: rl, AdminListener: al, Partitions: 32,
		HeartbeatInterval: 50 * time.Millisecond, DownAfter: time.Second,
		RaftHeartbeatTimeout: 500 * time.Millisecond, RaftElectionTimeout: 500 * time.Millisecond,
		RaftLeaderLeaseTimeout: 400 * time.Millisecond, RaftCommitTimeout: 5 * time.Millisecond,
		Region: cluster.RegionDescriptor{UUID: "r-" + id, Length: 4096, RKey: 0xabcd},
	}
	if mod != nil {
		mod(&cfg)
	}
	n, err := cluster.Start(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func runCtl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	t.Setenv("OCTOFS_ADMIN", "")
	t.Setenv("OCTOFS_TOKEN", "")
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := cmd.ExecuteContext(ctx)
	return out.String(), err
}

func TestClusterCommands(t *testing.T) {
	n1 := ctlNode(t, "n1", func(c *cluster.Config) { c.Bootstrap = true })
	tok := n1.Token()
	n2 := ctlNode(t, "n2", func(c *cluster.Config) { c.Join = []string{n1.AdminAddr()}; c.Token = tok })
	idleDir := filepath.Join(t.TempDir(), "n3")
	idle := ctlNode(t, "n3", func(c *cluster.Config) { c.DataDir = idleDir }) // waits for octoctl join
	require.Eventually(t, func() bool {
		s := n1.Status()
		return s.NodeStates[cluster.StateUp] == 2 && len(s.Voters) == 2
	}, 20*time.Second, 20*time.Millisecond)
	srv := "--server=" + n2.AdminAddr()

	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, writeFile(tokFile, tok+"\n"))
	// join: without the node's join secret the idle node refuses...
	_, err := runCtl(t, "join", idle.AdminAddr(), srv, "--token-file", tokFile)
	require.ErrorIs(t, err, cluster.ErrUnauthorized)
	require.Contains(t, err.Error(), "--join-secret-file")
	// ...with it, it joins and receives the token.
	out, err := runCtl(t, "join", idle.AdminAddr(), srv, "--token-file", tokFile, "--join-secret-file", filepath.Join(idleDir, cluster.JoinSecretFile))
	require.NoError(t, err, out)
	require.Contains(t, out, "node n3 at "+idle.AdminAddr()+" joined cluster "+n1.Map().ClusterID+" through "+n2.AdminAddr())
	require.Contains(t, out, "state joining")
	require.Eventually(t, func() bool {
		s := n2.Status()
		return s.NodeStates[cluster.StateUp] == 3 && len(s.Voters) == 3
	}, 20*time.Second, 20*time.Millisecond)

	for name, tc := range map[string]struct {
		args    []string
		want    []string
		notWant []string
	}{
		"status":         {args: []string{"status", srv}, want: []string{"Cluster", "Epoch", "Leader       n1 (" + n1.AdminAddr() + ")", "Nodes        3 up", "Voters       n1, n2, n3", "Partitions   32", "Answered by  n2"}},
		"nodes":          {args: []string{"nodes", srv}, want: []string{"ID  STATE  RAFT", "n1  up     voter (leader)", "n3  up     voter", "as seen by n1"}},
		"map public":     {args: []string{"map", srv, "--partitions"}, want: []string{"rkeys withheld", "(withheld)", "PARTITIONS  OWNER"}, notWant: []string{"0xabcd"}},
		"map with token": {args: []string{"map", srv, "--token", tok}, want: []string{"0xabcd", "r-n2"}, notWant: []string{"withheld"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runCtl(t, tc.args...)
			require.NoError(t, err, out)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
			for _, w := range tc.notWant {
				require.NotContains(t, out, w)
			}
		})
	}

	// --json is machine-readable.
	out, err = runCtl(t, "nodes", srv, "--json")
	require.NoError(t, err)
	var nr cluster.NodesResponse
	require.NoError(t, json.Unmarshal([]byte(out), &nr))
	require.Len(t, nr.Nodes, 3)
	out, err = runCtl(t, "status", srv, "--json")
	require.NoError(t, err)
	var st cluster.Status
	require.NoError(t, json.Unmarshal([]byte(out), &st))
	require.Equal(t, cluster.NodeID("n1"), st.Leader)

	// Errors say what to do.
	for name, tc := range map[string]struct {
		args []string
		want string
		is   error
	}{
		"no token":     {args: []string{"drain", "n3", srv}, want: "needs the cluster token: pass --token-file"},
		"wrong token":  {args: []string{"drain", "n3", srv, "--token", "nope"}, want: "missing or wrong cluster token", is: cluster.ErrUnauthorized},
		"unknown node": {args: []string{"remove", "n9", srv, "--token", tok}, want: "not in the cluster map: list the nodes with `octoctl nodes`"},
		"unreachable":  {args: []string{"status", "--server", "127.0.0.1:1", "--timeout", "2s"}, want: "cannot reach the admin server", is: cluster.ErrUnreachable},
		"bad args":     {args: []string{"drain"}, want: "accepts 1 arg"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := runCtl(t, tc.args...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			if tc.is != nil {
				require.True(t, errors.Is(err, tc.is), "%v", err)
			}
		})
	}

	// drain then remove, through a follower, with the token from a file.
	out, err = runCtl(t, "drain", "n3", srv, "--token-file", tokFile)
	require.NoError(t, err, out)
	require.Contains(t, out, "node n3 draining at epoch")
	require.Contains(t, out, "of 32 partitions changed owner")
	out, err = runCtl(t, "remove", "n3", srv, "--token-file", tokFile)
	require.NoError(t, err, out)
	require.Contains(t, out, "node n3 removed")
	require.Contains(t, out, "0 of 32 partitions changed owner", "a drained node owns nothing")

	// Shell completion comes from cobra's completion command.
	out, err = runCtl(t, "completion", "bash")
	require.NoError(t, err)
	require.Contains(t, out, "__start_octoctl")
	// The follower asked may apply the removal a moment after the leader.
	require.Eventually(t, func() bool {
		out, err = runCtl(t, "__complete", "remove", srv, "")
		return err == nil && !strings.Contains(out, "n3")
	}, 10*time.Second, 20*time.Millisecond, "removed nodes are not offered: %s", out)
	require.Contains(t, out, "n1\tup")
	require.True(t, strings.HasSuffix(strings.TrimSpace(out), "Completion ended with directive: ShellCompDirectiveNoFileComp"), out)
}

func writeFile(path, s string) error {
	return os.WriteFile(path, []byte(s), 0o600)
}

// blackhole accepts connections and never answers, like a stopped
// (SIGSTOP) node; it returns its address.
func blackhole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestStoppedFirstServer: octoctl moves on from a --server that does not
// answer after --attempt-timeout, and when none answers it names each.
func TestStoppedFirstServer(t *testing.T) {
	n1 := ctlNode(t, "n1", func(c *cluster.Config) { c.Bootstrap = true })
	require.Eventually(t, func() bool { return n1.Status().CaughtUp }, 20*time.Second, 20*time.Millisecond)
	frozen := blackhole(t)
	start := time.Now()
	out, err := runCtl(t, "status", "--server", frozen+","+n1.AdminAddr(), "--attempt-timeout", "1s")
	require.NoError(t, err, out)
	require.Contains(t, out, "Answered by  n1")
	t.Logf("status with a stopped first --server took %v", time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), 5*time.Second)

	_, err = runCtl(t, "status", "--server", frozen, "--attempt-timeout", "1s")
	require.ErrorIs(t, err, cluster.ErrUnreachable)
	require.Contains(t, err.Error(), frozen+": no answer within 1s (the process may be stopped or overloaded)")
	require.Contains(t, err.Error(), "check --server")
	t.Log(err)
}

// TestNotCaughtUpFails: a node restarted without quorum is shown, marked,
// and octoctl exits non-zero, so a script does not take its view for the
// cluster's.
func TestNotCaughtUpFails(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "n1")
	n1 := ctlNode(t, "n1", func(c *cluster.Config) { c.Bootstrap = true; c.DataDir = dir })
	tok := n1.Token()
	n2 := ctlNode(t, "n2", func(c *cluster.Config) { c.Join = []string{n1.AdminAddr()}; c.Token = tok })
	require.Eventually(t, func() bool { s := n1.Status(); return len(s.Voters) == 2 && s.NodeStates[cluster.StateUp] == 2 }, 20*time.Second, 20*time.Millisecond)
	epoch := n1.Map().Epoch
	require.NoError(t, n2.Close())
	require.NoError(t, n1.Close())
	n1 = ctlNode(t, "n1", func(c *cluster.Config) { c.DataDir = dir })
	srv := "--server=" + n1.AdminAddr()
	out, err := runCtl(t, "status", srv)
	require.ErrorIs(t, err, cluster.ErrNotCaughtUp)
	require.Contains(t, out, "NOT CAUGHT UP: no leader in reach")
	require.Contains(t, out, fmt.Sprintf("Epoch        %d", epoch), "the epoch it had, not 0")
	require.Contains(t, err.Error(), "ask another node with --server")
	t.Logf("octoctl status: %v", err)
	out, err = runCtl(t, "map", srv)
	require.ErrorIs(t, err, cluster.ErrNotCaughtUp)
	require.Contains(t, out, "STALE: ")
}

// TestTokenFlagWarns: --token works but warns that ps shows it.
func TestTokenFlagWarns(t *testing.T) {
	n1 := ctlNode(t, "n1", func(c *cluster.Config) { c.Bootstrap = true })
	require.Eventually(t, func() bool { return n1.Status().CaughtUp }, 20*time.Second, 20*time.Millisecond)
	out, err := runCtl(t, "map", "--server", n1.AdminAddr(), "--token", n1.Token())
	require.NoError(t, err)
	require.Contains(t, out, "warning: --token shows the cluster token to every user of this machine (ps, /proc); use --token-file FILE or OCTOFS_TOKEN instead")
}

// TestPinnedDataInOctoctl: pinned counts in status, nodes and map; drain
// and remove of a node with data refused with what to do; a forced
// removal says what was lost.
func TestPinnedDataInOctoctl(t *testing.T) {
	n1 := ctlNode(t, "n1", func(c *cluster.Config) { c.Bootstrap = true })
	tok := n1.Token()
	n2 := ctlNode(t, "n2", func(c *cluster.Config) { c.Join = []string{n1.AdminAddr()}; c.Token = tok })
	require.Eventually(t, func() bool {
		return n1.Status().NodeStates[cluster.StateUp] == 2 && n2.Map().PartitionCounts()["n2"] == 16
	}, 20*time.Second, 20*time.Millisecond)
	ctx := context.Background()
	var mine []uint32
	for p, o := range n2.Map().Partitions {
		if o == "n2" && len(mine) < 3 {
			mine = append(mine, uint32(p))
		}
	}
	for _, p := range mine {
		require.NoError(t, n2.PinPartition(ctx, p))
	}
	require.Eventually(t, func() bool { return len(n1.Map().Pinned) == 3 }, 10*time.Second, 10*time.Millisecond)
	tokFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, writeFile(tokFile, tok))
	srv := "--server=" + n1.AdminAddr()
	for name, tc := range map[string]struct {
		args []string
		want []string
	}{
		"status": {[]string{"status", srv}, []string{"Partitions   32 (3 pinned: hold file-system data)"}},
		"nodes":  {[]string{"nodes", srv}, []string{"PINNED", "n2  up     voter           16          3 "}},
		"map":    {[]string{"map", srv, "--partitions"}, []string{"32 partitions, 3 pinned", "n2  up", "PARTITIONS  OWNER  PINNED", "yes"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := runCtl(t, tc.args...)
			require.NoError(t, err, out)
			for _, w := range tc.want {
				require.Contains(t, out, w)
			}
		})
	}
	for _, cmd := range []string{"drain", "remove"} {
		_, err := runCtl(t, cmd, "n2", srv, "--token-file", tokFile)
		require.ErrorIs(t, err, cluster.ErrHoldsData)
		require.Contains(t, err.Error(), "node n2 holds file-system data in 3 partitions; moving partitions with their data is not built yet; keep n2 in the cluster")
		require.Contains(t, err.Error(), "`octoctl remove n2 --force-lose-data`")
		t.Logf("octoctl %s n2: %v", cmd, err)
	}
	out, err := runCtl(t, "remove", "n2", srv, "--token-file", tokFile, "--force-lose-data")
	require.NoError(t, err, out)
	require.Contains(t, out, "node n2 removed at epoch")
	require.Contains(t, out, fmt.Sprintf("file-system data in 3 partitions was lost with n2: %s", partitionList(mine)))
	t.Logf("octoctl remove n2 --force-lose-data:\n%s", out)
}

func TestPartitionList(t *testing.T) {
	for want, ps := range map[string][]uint32{
		"":           nil,
		"7":          {7},
		"0-3,7,9-12": {0, 1, 2, 3, 7, 9, 10, 11, 12},
		"1,3":        {1, 3},
	} {
		require.Equal(t, want, partitionList(ps))
	}
}
