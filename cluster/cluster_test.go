package cluster

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// Tests in this file run real raft over TCP on loopback between nodes in
// the test process. Timeouts are short so elections take a fraction of a
// second; every wait polls a condition with a bound.

// syncBuffer collects a test's logs; they are printed only on failure.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func testLogger(t *testing.T) (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// testCluster is a set of in-process nodes sharing one log.
type testCluster struct {
	t     *testing.T
	log   *slog.Logger
	logs  *syncBuffer
	nodes map[NodeID]*Node
	dirs  map[NodeID]string
	// tweak adjusts every node's config before start.
	tweak func(*Config)
}

func newTestCluster(t *testing.T) *testCluster {
	log, logs := testLogger(t)
	tc := &testCluster{t: t, log: log, logs: logs, nodes: map[NodeID]*Node{}, dirs: map[NodeID]string{}}
	t.Cleanup(func() {
		for _, n := range tc.nodes {
			_ = n.shutdown(false)
		}
	})
	return tc
}

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	// A restarted node reuses its raft port; the old socket may linger
	// for a moment, so retry briefly.
	var ln net.Listener
	var err error
	require.Eventually(t, func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond, "listen on %s: %v", addr, err)
	return ln
}

func (tc *testCluster) config(id NodeID) Config {
	dir, ok := tc.dirs[id]
	if !ok {
		dir = tc.t.TempDir()
		tc.dirs[id] = dir
	}
	cfg := Config{
		ID:                     id,
		DataDir:                dir,
		Partitions:             64,
		HeartbeatInterval:      50 * time.Millisecond,
		DownAfter:              1500 * time.Millisecond,
		ApplyTimeout:           3 * time.Second,
		RaftHeartbeatTimeout:   500 * time.Millisecond,
		RaftElectionTimeout:    500 * time.Millisecond,
		RaftLeaderLeaseTimeout: 400 * time.Millisecond,
		RaftCommitTimeout:      5 * time.Millisecond,
		Region:                 RegionDescriptor{UUID: "region-" + string(id), Length: 1 << 20, RKey: 0xbeef},
		Logger:                 tc.log,
	}
	if tc.tweak != nil {
		tc.tweak(&cfg)
	}
	return cfg
}

// start starts a node; raftAddr reuses an address (restart) when set.
func (tc *testCluster) start(cfg Config, raftAddr string) *Node {
	tc.t.Helper()
	cfg.RaftListener = listen(tc.t, raftAddr)
	cfg.AdminListener = listen(tc.t, "")
	n, err := Start(cfg)
	require.NoError(tc.t, err)
	tc.nodes[n.ID()] = n
	// Registered after the data directory's TempDir, so it runs first:
	// the node stops writing before its directory is removed.
	tc.t.Cleanup(func() { _ = n.shutdown(false) })
	return n
}

func (tc *testCluster) bootstrap(id NodeID) *Node {
	cfg := tc.config(id)
	cfg.Bootstrap = true
	n := tc.start(cfg, "")
	tc.waitFor("first node leads with an initialized map", func() bool {
		return n.IsLeader() && n.Map().Initialized()
	})
	return n
}

func (tc *testCluster) join(id NodeID, via ...*Node) *Node {
	cfg := tc.config(id)
	for _, v := range via {
		cfg.Join = append(cfg.Join, v.AdminAddr())
	}
	cfg.Token = via[0].Token()
	return tc.start(cfg, "")
}

// crash stops a node without handing over leadership, like a kill.
func (tc *testCluster) crash(n *Node) {
	require.NoError(tc.t, n.shutdown(false))
	delete(tc.nodes, n.ID())
}

func (tc *testCluster) waitFor(what string, cond func() bool) {
	tc.t.Helper()
	require.Eventually(tc.t, cond, 20*time.Second, 10*time.Millisecond, "waiting for: %s", what)
}

// waitLeader waits (bounded) for a node that leads and returns it.
func (tc *testCluster) waitLeader() *Node {
	tc.t.Helper()
	var ld *Node
	tc.waitFor("a leader", func() bool { ld = tc.leader(); return ld != nil })
	return ld
}

func (tc *testCluster) leader() *Node {
	for _, n := range tc.nodes {
		if n.IsLeader() {
			return n
		}
	}
	return nil
}

func (tc *testCluster) client(n *Node, token string) *AdminClient {
	c := NewAdminClient([]string{n.AdminAddr()}, token, nil)
	tc.t.Cleanup(c.CloseIdleConnections)
	return c
}

// converged reports whether every running node sees the same map epoch
// with want nodes up.
func (tc *testCluster) converged(want int) bool {
	var epoch uint64
	for _, n := range tc.nodes {
		m := n.Map()
		up := 0
		for _, info := range m.Nodes {
			if info.State == StateUp {
				up++
			}
		}
		if up != want || (epoch != 0 && m.Epoch != epoch) {
			return false
		}
		epoch = m.Epoch
	}
	return true
}

func (tc *testCluster) formThree() (*Node, *Node, *Node) {
	n1 := tc.bootstrap("n1")
	n2 := tc.join("n2", n1)
	n3 := tc.join("n3", n1, n2)
	tc.waitFor("three nodes up and voting, seen by all", func() bool {
		for _, n := range tc.nodes {
			if v, _ := n.suffrages(); len(v) != 3 {
				return false
			}
		}
		return tc.converged(3)
	})
	return n1, n2, n3
}

func requireSameMap(t *testing.T, nodes ...*Node) {
	t.Helper()
	want := nodes[0].Map()
	for _, n := range nodes[1:] {
		require.Equal(t, want, n.Map(), "map on %s differs from %s", n.ID(), nodes[0].ID())
	}
	require.NoError(t, want.Validate())
}

func TestThreeNodeClusterForms(t *testing.T) {
	tc := newTestCluster(t)
	start := time.Now()
	n1, n2, n3 := tc.formThree()
	t.Logf("three-node cluster formed in %v", time.Since(start).Round(time.Millisecond))
	requireSameMap(t, n1, n2, n3)
	m := n1.Map()
	counts := m.PartitionCounts()
	lo, hi := LoadBound(64, 3)
	for _, id := range []NodeID{"n1", "n2", "n3"} {
		require.True(t, counts[id] >= lo && counts[id] <= hi, "%s owns %d", id, counts[id])
	}
	for _, n := range []*Node{n1, n2, n3} {
		s := n.Status()
		require.Equal(t, m.ClusterID, s.ClusterID)
		require.Equal(t, []NodeID{"n1", "n2", "n3"}, s.Voters)
		require.Equal(t, StateUp, s.NodeState)
		require.True(t, s.Joined)
	}
	// Every node stored the token with mode 0600.
	for id, dir := range tc.dirs {
		tok, err := loadToken(dir)
		require.NoError(t, err)
		require.Equal(t, n1.Token(), tok, id)
		requireMode(t, dir+"/"+TokenFile, 0o600)
	}
}

// configHistory reads every raft configuration the leader's log holds, in
// order, to prove how a node's suffrage changed over time.
func configHistory(t *testing.T, n *Node) []raft.Configuration {
	first, err := n.store.FirstIndex()
	require.NoError(t, err)
	last, err := n.store.LastIndex()
	require.NoError(t, err)
	var out []raft.Configuration
	for i := first; i <= last && i > 0; i++ {
		var l raft.Log
		if err := n.store.GetLog(i, &l); err != nil {
			continue
		}
		if l.Type == raft.LogConfiguration {
			out = append(out, raft.DecodeConfiguration(l.Data))
		}
	}
	return out
}

func suffrageOf(c raft.Configuration, id NodeID) (raft.ServerSuffrage, bool) {
	for _, s := range c.Servers {
		if NodeID(s.ID) == id {
			return s.Suffrage, true
		}
	}
	return 0, false
}

func TestJoinAsNonVoterThenPromoted(t *testing.T) {
	tc := newTestCluster(t)
	tc.tweak = func(c *Config) { c.MaxVoters = 4 }
	n1, _, _ := tc.formThree()
	before := n1.Map()
	start := time.Now()
	n4 := tc.join("n4", n1)
	tc.waitFor("n4 up and a voter", func() bool {
		v, _ := n1.suffrages()
		return tc.converged(4) && len(v) == 4
	})
	t.Logf("n4 joined, caught up and was promoted in %v", time.Since(start).Round(time.Millisecond))
	after := n4.Map()
	moved := 0
	for p := range after.Partitions {
		if after.Partitions[p] != before.Partitions[p] {
			moved++
		}
	}
	minimum := bruteMinimumMoves(before.Partitions, []NodeID{"n1", "n2", "n3", "n4"})
	t.Logf("n4 up: %d of %d partitions moved, minimum %d; n4 owns %d", moved, len(after.Partitions), minimum, after.PartitionCounts()["n4"])
	require.Equal(t, minimum, moved)

	// The log shows n4 first as a non-voter, then as a voter.
	var seen []string
	for _, c := range configHistory(t, tc.waitLeader()) {
		if s, ok := suffrageOf(c, "n4"); ok && (len(seen) == 0 || seen[len(seen)-1] != s.String()) {
			seen = append(seen, s.String())
		}
	}
	require.Equal(t, []string{"Nonvoter", "Voter"}, seen)

	// With MaxVoters reached, a fifth node stays a non-voter.
	n5 := tc.join("n5", n4)
	tc.waitFor("n5 up", func() bool { return tc.converged(5) })
	v, nv := tc.waitLeader().suffrages()
	require.Equal(t, []NodeID{"n1", "n2", "n3", "n4"}, v)
	require.Equal(t, []NodeID{"n5"}, nv)
	require.Equal(t, StateUp, n5.Status().NodeState)
	requireSameMap(t, n1, n4, n5)
}

func TestLeaderKilledNewLeaderElected(t *testing.T) {
	tc := newTestCluster(t)
	tc.formThree()
	old := tc.waitLeader()
	require.NotNil(t, old)
	epochBefore := old.Map().Epoch
	clusterID := old.Map().ClusterID
	oldRaftAddr, oldID := old.RaftAddr(), old.ID()

	killed := time.Now()
	tc.crash(old)
	var newLeader *Node
	tc.waitFor("a new leader", func() bool {
		newLeader = tc.leader()
		return newLeader != nil
	})
	elected := time.Since(killed)
	t.Logf("leader %s killed; %s elected and ready for writes after %v", oldID, newLeader.ID(), elected.Round(time.Millisecond))
	require.Less(t, elected, 5*time.Second, "re-election bound")

	// The new leader marks the silent old leader down in a new epoch, and
	// both survivors agree on the map.
	tc.waitFor("old leader marked down on both survivors", func() bool {
		for _, n := range tc.nodes {
			info, _ := n.Map().Node(oldID)
			if info.State != StateDown {
				return false
			}
		}
		return true
	})
	var survivors []*Node
	for _, n := range tc.nodes {
		survivors = append(survivors, n)
	}
	tc.waitFor("same epoch", func() bool { return survivors[0].Map().Epoch == survivors[1].Map().Epoch })
	requireSameMap(t, survivors...)
	require.Greater(t, survivors[0].Map().Epoch, epochBefore)

	// Restart the old leader from its data directory. Bootstrap is set on
	// purpose: with existing state it must be ignored.
	cfg := tc.config(oldID)
	cfg.Bootstrap = true
	restarted := tc.start(cfg, oldRaftAddr)
	tc.waitFor("restarted node back up everywhere", func() bool { return tc.converged(3) })
	require.Contains(t, tc.logs.String(), "restarting from existing state; not bootstrapping or joining")
	require.Equal(t, clusterID, restarted.Map().ClusterID, "no new cluster was bootstrapped")
	all := append(survivors, restarted)
	tc.waitFor("same map everywhere", func() bool {
		return all[0].Map().Epoch == all[1].Map().Epoch && all[1].Map().Epoch == all[2].Map().Epoch
	})
	requireSameMap(t, all...)
	v, _ := tc.waitLeader().suffrages()
	require.Len(t, v, 3)
}

func TestRemovedNodeStopsReceivingUpdates(t *testing.T) {
	tc := newTestCluster(t)
	n1, n2, n3 := tc.formThree()
	n4 := tc.join("n4", n1)
	tc.waitFor("n4 up", func() bool { return tc.converged(4) })

	c := tc.client(n2, n1.Token()) // a follower or the leader: both work
	m, err := c.Remove(context.Background(), "n4")
	require.NoError(t, err)
	info, _ := m.Node("n4")
	require.Equal(t, StateRemoved, info.State)
	require.Zero(t, m.PartitionCounts()["n4"])
	tc.waitFor("n4 out of the raft configuration", func() bool {
		ld := tc.leader()
		if ld == nil {
			return false // an election (a loaded machine)
		}
		_, in := suffrageOf(mustConfig(t, ld), "n4")
		return !in
	})
	tc.waitFor("n4 stopped raft", func() bool { return n4.raftStopped.Load() && n4.Status().RaftState == "Shutdown" })
	frozen := n4.Map().Epoch

	// Further changes reach the members but not the removed node.
	_, err = c.Drain(context.Background(), "n3")
	require.NoError(t, err)
	tc.waitFor("members see the drain", func() bool {
		for _, n := range []*Node{n1, n2, n3} {
			if i, _ := n.Map().Node("n3"); i.State != StateDraining {
				return false
			}
		}
		return true
	})
	require.Equal(t, frozen, n4.Map().Epoch, "removed node must not receive updates")
	require.Greater(t, n1.Map().Epoch, frozen)
	require.Equal(t, StateRemoved, n4.Status().NodeState)

	// The id cannot come back.
	_, err = c.Join(context.Background(), JoinRequest{ID: "n4", AdminAddr: "x:1", RaftAddr: "y:1"})
	require.ErrorIs(t, err, ErrNodeRemoved)
}

func mustConfig(t *testing.T, n *Node) raft.Configuration {
	f := n.raft.GetConfiguration()
	require.NoError(t, f.Error())
	return f.Configuration()
}

func TestFailureDetectionAndWatch(t *testing.T) {
	tc := newTestCluster(t)
	n1, n2, n3 := tc.formThree()
	// A client watching over the admin API (the way metadata, dataplane
	// and FUSE clients will).
	rm, err := WatchRemote(context.Background(), NewAdminClient([]string{n1.AdminAddr(), n2.AdminAddr()}, n1.Token(), nil), 2*time.Second, tc.log)
	require.NoError(t, err)
	defer rm.Close()
	require.False(t, rm.Current().Redacted)

	victim := n3
	if victim.IsLeader() {
		victim = n2
	}
	addr, id := victim.RaftAddr(), victim.ID()
	killed := time.Now()
	tc.crash(victim)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var downAt time.Time
	for epoch := rm.Current().Epoch; ; {
		m, err := rm.Watch(ctx, epoch)
		require.NoError(t, err)
		epoch = m.Epoch
		if i, _ := m.Node(id); i.State == StateDown {
			downAt = time.Now()
			break
		}
	}
	t.Logf("%s killed; watcher saw it down after %v (DownAfter %v)", id, downAt.Sub(killed).Round(time.Millisecond), tc.config(id).DownAfter)

	// Publication latency: the remote watcher learns the next epoch, the
	// restarted node marked up.
	restart := time.Now()
	tc.start(tc.config(id), addr)
	m, err := rm.Watch(ctx, rm.Current().Epoch)
	require.NoError(t, err)
	i, _ := m.Node(id)
	require.Equal(t, StateUp, i.State)
	t.Logf("%s restarted; watcher saw it up after %v", id, time.Since(restart).Round(time.Millisecond))
	tc.waitFor("all converge", func() bool { return tc.converged(3) })

	// Latency of a change to reach the remote watcher.
	since := rm.Current().Epoch
	changed := time.Now()
	_, err = tc.client(n1, n1.Token()).Drain(ctx, id)
	require.NoError(t, err)
	m, err = rm.Watch(ctx, since)
	require.NoError(t, err)
	t.Logf("drain of %s: remote watcher had epoch %d %v after the request was sent", id, m.Epoch, time.Since(changed).Round(time.Microsecond))
}

func TestFollowerForwardsWritesAndHints(t *testing.T) {
	tc := newTestCluster(t)
	tc.formThree()
	ld := tc.waitLeader()
	var follower *Node
	for _, n := range tc.nodes {
		if n != ld {
			follower = n
			break
		}
	}
	ctx := context.Background()
	// Forwarded by the follower.
	m, err := tc.client(follower, ld.Token()).Drain(ctx, follower.ID())
	require.NoError(t, err)
	i, _ := m.Node(follower.ID())
	require.Equal(t, StateDraining, i.State)

	// A follower that may not forward answers with a leader hint...
	c := tc.client(follower, ld.Token())
	err = c.do(ctx, "POST", "/v1/nodes/"+string(ld.ID())+"/drain", nil, nil, nil, map[string][]string{headerForwarded: {"1"}, "Authorization": {"Bearer " + ld.Token()}})
	var nl *NotLeaderError
	require.ErrorAs(t, err, &nl)
	require.Equal(t, ld.AdminAddr(), nl.LeaderAdminAddr)

	// ...and in-process calls on a follower name the leader.
	_, err = follower.Drain(ctx, ld.ID())
	require.ErrorAs(t, err, &nl)
	require.Equal(t, ld.ID(), nl.LeaderID)

	// Removing the leader hands leadership over; the client follows.
	m, err = tc.client(ld, ld.Token()).Remove(ctx, ld.ID())
	require.NoError(t, err)
	i, _ = m.Node(ld.ID())
	require.Equal(t, StateRemoved, i.State)
	require.NotEqual(t, ld.ID(), tc.waitLeader().ID())
}

func TestSelfJoinThroughAdminAPI(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	idle := tc.start(tc.config("idle"), "")
	require.False(t, idle.Status().Joined)
	ctx := context.Background()
	secret, err := ReadTokenFile(filepath.Join(tc.dirs["idle"], JoinSecretFile))
	require.NoError(t, err)
	requireMode(t, filepath.Join(tc.dirs["idle"], JoinSecretFile), 0o600)

	// The right token without the join secret: refused, and said why.
	_, err = tc.client(idle, n1.Token()).SelfJoin(ctx, []string{n1.AdminAddr()})
	require.ErrorIs(t, err, ErrUnauthorized)
	require.Contains(t, err.Error(), "join secret")
	require.False(t, idle.Status().Joined)

	// The secret with a wrong token: the cluster refuses, the node stays
	// idle and forgets the token.
	c := tc.client(idle, "wrong")
	c.SetJoinSecret(secret)
	_, err = c.SelfJoin(ctx, []string{n1.AdminAddr()})
	require.ErrorIs(t, err, ErrUnauthorized)
	require.False(t, idle.Status().Joined)
	require.Empty(t, idle.Token())

	c = tc.client(idle, n1.Token())
	c.SetJoinSecret(secret)
	r, err := c.SelfJoin(ctx, []string{n1.AdminAddr()})
	require.NoError(t, err)
	require.Equal(t, SelfJoinResponse{NodeID: "idle", ClusterID: n1.Map().ClusterID, State: StateJoining, Epoch: r.Epoch, Via: n1.AdminAddr()}, *r)
	tc.waitFor("idle node up", func() bool { return tc.converged(2) })
	tok, err := loadToken(tc.dirs["idle"])
	require.NoError(t, err)
	require.Equal(t, n1.Token(), tok)
	_, err = c.SelfJoin(ctx, []string{n1.AdminAddr()})
	require.ErrorIs(t, err, ErrBadRequest, "a member cannot be told to join again")
}

func TestStartErrors(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	stopped := tc.start(tc.config("stopped"), "")
	tc.crash(stopped)
	for name, tc2 := range map[string]struct {
		tweak func(*Config)
		want  error
	}{
		"bad node id":         {func(c *Config) { c.ID = "bad id!" }, ErrBadRequest},
		"data dir of another": {func(c *Config) { c.DataDir = tc.dirs["stopped"]; c.ID = "other" }, ErrBadRequest},
		"data dir in use":     {func(c *Config) { c.DataDir = tc.dirs["n1"]; c.ID = "n1" }, ErrDataDirInUse},
		"no data dir":         {func(c *Config) { c.DataDir = "" }, ErrBadRequest},
		"too many partitions": {func(c *Config) { c.Partitions = 70000 }, ErrBadRequest},
		"bootstrap and join":  {func(c *Config) { c.Bootstrap = true; c.Join = []string{"x:1"} }, ErrBadRequest},
		"down before a beat":  {func(c *Config) { c.DownAfter = c.HeartbeatInterval }, ErrBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := tc.config(NodeID(fmt.Sprintf("x%d", len(name))))
			tc2.tweak(&cfg)
			cfg.AdminAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
			_, err := Start(cfg)
			require.ErrorIs(t, err, tc2.want)
			t.Logf("%s: %v", name, err)
		})
	}
	// A join with the wrong token is refused and reported through Done.
	cfg := tc.config("intruder")
	cfg.Join = []string{n1.AdminAddr()}
	cfg.Token = "not-the-token"
	n := tc.start(cfg, "")
	select {
	case <-n.Done():
		require.ErrorIs(t, n.Err(), ErrUnauthorized)
	case <-time.After(10 * time.Second):
		t.Fatal("refused join not reported")
	}
	_, ok := n1.Map().Node("intruder")
	require.False(t, ok)
}

// TestRestartFromSnapshot: a node restarts from a raft snapshot file (not
// only from log replay) and has the same map.
func TestRestartFromSnapshot(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	n2 := tc.join("n2", n1)
	tc.waitFor("two up", func() bool { return tc.converged(2) })
	_, err := n1.Drain(context.Background(), "n2")
	require.NoError(t, err)
	want := n1.Map()
	require.NoError(t, n1.raft.Snapshot().Error())
	addr := n1.RaftAddr()
	tc.crash(n1)
	tc.crash(n2)

	n1 = tc.start(tc.config("n1"), addr)
	require.Contains(t, tc.logs.String(), "loaded the saved cluster map")
	// Alone it has no quorum, but its FSM already holds the map, at once.
	require.Equal(t, want, n1.Map())
	require.False(t, n1.Status().CaughtUp)
}
