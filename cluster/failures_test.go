package cluster

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Failures an operator meets, each with what the node says.

// TestRestartWithoutQuorumSaysNotCaughtUp: a node restarted while the
// other voters are down shows the newest map it had applied, at once, and
// says it has not caught up; without its saved map it would show epoch 0.
func TestRestartWithoutQuorumSaysNotCaughtUp(t *testing.T) {
	for name, removeSavedMap := range map[string]bool{"with the saved map": false, "saved map removed": true} {
		t.Run(name, func(t *testing.T) {
			tc := newTestCluster(t)
			n1, n2, n3 := tc.formThree()
			_, err := tc.client(n1, n1.Token()).Drain(context.Background(), "n3")
			require.NoError(t, err)
			tc.waitFor("n1 applied the drain", func() bool { i, _ := n1.Map().Node("n3"); return i.State == StateDraining })
			want := n1.Map()
			addr := n1.RaftAddr()
			for _, n := range []*Node{n1, n2, n3} {
				tc.crash(n)
			}
			if removeSavedMap {
				require.NoError(t, os.Remove(filepath.Join(tc.dirs["n1"], raftDir, mapStateFile)))
			}
			n1 = tc.start(tc.config("n1"), addr)
			s := n1.Status()
			t.Logf("restarted alone: epoch %d (was %d), caught up %v: %s", s.Epoch, want.Epoch, s.CaughtUp, s.NotCaughtUp)
			require.False(t, s.CaughtUp)
			require.Contains(t, s.NotCaughtUp, "no leader in reach")
			m, err := tc.client(n1, n1.Token()).Map(context.Background())
			require.NoError(t, err)
			require.True(t, m.Stale, "the map answer is marked stale")
			if removeSavedMap {
				require.Zero(t, s.Epoch, "without the saved map the epoch goes back to 0")
				return
			}
			require.Equal(t, want.Epoch, s.Epoch, "the epoch does not go backwards")
			require.Equal(t, want.Partitions, m.Partitions)
		})
	}
}

// TestScheduledSnapshots: the node takes raft snapshots on a schedule, and
// a restart restores from one (here without the saved map, so the map can
// only come from the snapshot).
func TestScheduledSnapshots(t *testing.T) {
	tc := newTestCluster(t)
	tc.tweak = func(c *Config) { c.SnapshotInterval = 200 * time.Millisecond }
	n1 := tc.bootstrap("n1")
	n2 := tc.join("n2", n1)
	tc.waitFor("two up", func() bool { return tc.converged(2) })
	_, err := n1.Drain(context.Background(), "n2")
	require.NoError(t, err)
	want := n1.Map()
	tc.waitFor("a scheduled snapshot of the drain", func() bool { return n1.snapshotIndex.Load() >= n1.fsm.index.Load() })
	require.Contains(t, tc.logs.String(), `msg="took a raft snapshot" node=n1 why=schedule`)
	addr := n1.RaftAddr()
	tc.crash(n1)
	tc.crash(n2)
	require.NoError(t, os.Remove(filepath.Join(tc.dirs["n1"], raftDir, mapStateFile)))
	n1 = tc.start(tc.config("n1"), addr)
	require.Contains(t, tc.logs.String(), "map restored from snapshot")
	require.Equal(t, want, n1.Map())
}

// TestJoinWithAnotherMembersAddressIsRefused: a join naming the raft or
// admin address of another member is refused, and nothing changes.
func TestJoinWithAnotherMembersAddressIsRefused(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	n2 := tc.join("n2", n1)
	tc.waitFor("two up", func() bool { return tc.converged(2) })
	before := n1.Map()
	c := tc.client(n2, n1.Token())
	for name, req := range map[string]JoinRequest{
		"raft address":  {ID: "n9", AdminAddr: "127.0.0.1:1", RaftAddr: n2.RaftAddr()},
		"admin address": {ID: "n9", AdminAddr: n1.AdminAddr(), RaftAddr: "127.0.0.1:2"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := c.Join(context.Background(), req)
			require.ErrorIs(t, err, ErrAddressInUse)
			t.Log(err)
		})
	}
	require.Equal(t, before, n1.Map())
	require.Len(t, mustConfig(t, n1).Servers, 2)
}

// TestStaleForwardedRead: a follower that cannot ask the leader answers
// GET /v1/nodes from its own view, marked stale with the reason.
func TestStaleForwardedRead(t *testing.T) {
	tc := newTestCluster(t)
	tc.formThree()
	ld := tc.waitLeader()
	var follower *Node
	for _, n := range tc.nodes {
		if n != ld {
			follower = n
		}
	}
	fresh, err := tc.client(follower, "").Nodes(context.Background())
	require.NoError(t, err)
	require.False(t, fresh.Stale)
	require.Equal(t, ld.ID(), fresh.From)

	require.NoError(t, ld.httpSrv.Close()) // the leader's admin API is gone; raft still runs
	r, err := tc.client(follower, "").Nodes(context.Background())
	require.NoError(t, err)
	require.True(t, r.Stale)
	require.Equal(t, follower.ID(), r.From)
	require.Contains(t, r.StaleReason, "could not ask the leader "+string(ld.ID()))
	t.Logf("stale answer: %s", r.StaleReason)
}

// TestStatusRefusesAWrongToken: /v1/status is public, but a wrong token
// is refused (401) as everywhere, so a typo is noticed.
func TestStatusRefusesAWrongToken(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	for name, tt := range map[string]struct {
		auth string
		want int
	}{
		"no token":    {"", http.StatusOK},
		"the token":   {"Bearer " + n1.Token(), http.StatusOK},
		"wrong token": {"Bearer nope", http.StatusUnauthorized},
	} {
		t.Run(name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", "http://"+n1.AdminAddr()+PathStatus, nil)
			if tt.auth != "" {
				req.Header.Set("Authorization", tt.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tt.want, resp.StatusCode)
		})
	}
}

// blackhole accepts connections on addr ("" for any free port) and never
// answers: what a stopped (SIGSTOP) process looks like from the network.
// It returns the address.
func blackhole(t *testing.T, addr string) string {
	ln := listen(t, addr)
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

// TestForwardToAStoppedLeaderIsBounded: a follower forwarding a write to a
// leader whose admin API accepts but never answers gives up after
// ForwardTimeout and says which leader, where and why; the client retries
// within its deadline and then reports that error.
func TestForwardToAStoppedLeaderIsBounded(t *testing.T) {
	tc := newTestCluster(t)
	tc.tweak = func(c *Config) { c.ForwardTimeout = time.Second }
	tc.formThree()
	ld := tc.waitLeader()
	var follower *Node
	for _, n := range tc.nodes {
		if n != ld {
			follower = n
		}
	}
	require.NoError(t, ld.httpSrv.Close())
	blackhole(t, ld.AdminAddr())

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := tc.client(follower, ld.Token()).Drain(ctx, follower.ID())
	took := time.Since(start)
	t.Logf("drain through %s with the leader's admin API stopped: %v after %v", follower.ID(), err, took.Round(time.Millisecond))
	require.ErrorIs(t, err, ErrLeaderUnreachable)
	require.Contains(t, err.Error(), "the leader "+string(ld.ID())+" at "+ld.AdminAddr())
	require.Contains(t, err.Error(), "no answer within 1s")
	require.Less(t, took, 4*time.Second, "bounded by the caller's deadline")
	i, _ := ld.Map().Node(follower.ID())
	require.NotEqual(t, StateDraining, i.State, "nothing applied")
}

// TestClientTriesTheNextServer: a first server that accepts but never
// answers costs one attempt timeout, then the next is asked; when none
// answers, the error names each address and its cause.
func TestClientTriesTheNextServer(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	frozen := blackhole(t, "")
	refused := listen(t, "")
	refusedAddr := refused.Addr().String()
	refused.Close()

	c := NewAdminClient([]string{frozen, refusedAddr, n1.AdminAddr()}, "", nil)
	c.SetAttemptTimeout(500 * time.Millisecond)
	defer c.CloseIdleConnections()
	start := time.Now()
	s, err := c.Status(context.Background())
	require.NoError(t, err)
	require.Equal(t, NodeID("n1"), s.NodeID)
	t.Logf("status with a stopped first server answered by the third after %v", time.Since(start).Round(time.Millisecond))
	require.Less(t, time.Since(start), 3*time.Second)

	c = NewAdminClient([]string{frozen, refusedAddr}, "", nil)
	c.SetAttemptTimeout(500 * time.Millisecond)
	_, err = c.Status(context.Background())
	require.ErrorIs(t, err, ErrUnreachable)
	require.Contains(t, err.Error(), frozen+": no answer within 500ms")
	require.Contains(t, err.Error(), refusedAddr+": dial tcp "+refusedAddr+": connect: connection refused")
	t.Log(err)
	// The caller's own deadline ends the attempts, and says so.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Status(ctx)
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestDrainingVoterGivesUpItsSeat: draining a voter while an up non-voter
// exists makes the non-voter a voter and the draining node a non-voter.
func TestDrainingVoterGivesUpItsSeat(t *testing.T) {
	tc := newTestCluster(t)
	n1, _, _ := tc.formThree()
	tc.join("n4", n1)
	tc.waitFor("n4 up as a non-voter", func() bool {
		v, nv := n1.suffrages()
		return tc.converged(4) && len(v) == 3 && len(nv) == 1
	})
	ld := tc.waitLeader()
	var victim NodeID
	for _, id := range []NodeID{"n1", "n2", "n3"} {
		if id != ld.ID() {
			victim = id
			break
		}
	}
	_, err := tc.client(ld, ld.Token()).Drain(context.Background(), victim)
	require.NoError(t, err)
	tc.waitFor("n4 votes and the drained node does not", func() bool {
		l := tc.leader()
		if l == nil {
			return false
		}
		v, nv := l.suffrages()
		return len(v) == 3 && len(nv) == 1 && nv[0] == victim
	})
	v, _ := tc.waitLeader().suffrages()
	require.Contains(t, v, NodeID("n4"))
	t.Logf("voters after draining %s: %v", victim, v)
}

// TestWriteErrorsAreClear: every write error a client can get names what
// went wrong; a decoded API error never reads "internal".
func TestWriteErrorsAreClear(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	c := tc.client(n1, n1.Token())
	ctx := context.Background()
	for name, tt := range map[string]struct {
		call func() error
		want error
	}{
		"drain unknown":    {func() error { _, err := c.Drain(ctx, "zz"); return err }, ErrUnknownNode},
		"drain the last":   {func() error { _, err := c.Drain(ctx, "n1"); return err }, ErrNoEligibleNodes},
		"pin out of range": {func() error { _, err := c.Pin(ctx, 1<<20, "n1"); return err }, ErrBadRequest},
		"join without a CSR": {func() error {
			_, err := c.Join(ctx, JoinRequest{ID: "x", AdminAddr: "a:1", RaftAddr: "b:1"})
			return err
		}, ErrBadRequest},
		"remove force option": {func() error {
			return c.do(ctx, "POST", "/v1/nodes/n1/remove", map[string][]string{queryForceLoseData: {"maybe"}}, nil, nil, nil)
		}, ErrBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			err := tt.call()
			require.ErrorIs(t, err, tt.want)
			require.NotContains(t, err.Error(), "internal")
			t.Log(err)
		})
	}
}

// TestWaitingNodeCredentials: a waiting node given the cluster's token
// obeys only that token; one given a join secret obeys only a caller with
// that secret (and writes no secret file).
func TestWaitingNodeCredentials(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	ctx := context.Background()

	withToken := tc.config("with-token")
	withToken.Token = n1.Token()
	w1 := tc.start(withToken, "")
	c := tc.client(w1, "another-clusters-token")
	c.SetJoinSecret("irrelevant")
	_, err := c.SelfJoin(ctx, []string{n1.AdminAddr()})
	require.ErrorIs(t, err, ErrUnauthorized)
	require.Contains(t, err.Error(), "joins only with that token")
	_, err = tc.client(w1, n1.Token()).SelfJoin(ctx, []string{n1.AdminAddr()})
	require.NoError(t, err)

	withSecret := tc.config("with-secret")
	withSecret.JoinSecret = "s3cret"
	w2 := tc.start(withSecret, "")
	_, err = os.Stat(filepath.Join(tc.dirs["with-secret"], JoinSecretFile))
	require.ErrorIs(t, err, os.ErrNotExist, "a given secret is not written")
	c = tc.client(w2, n1.Token())
	c.SetJoinSecret("wrong")
	_, err = c.SelfJoin(ctx, []string{n1.AdminAddr()})
	require.ErrorIs(t, err, ErrJoinSecret)
	c.SetJoinSecret("s3cret")
	_, err = c.SelfJoin(ctx, []string{n1.AdminAddr()})
	require.NoError(t, err)
	tc.waitFor("both joined and up", func() bool { return tc.converged(3) })
}
