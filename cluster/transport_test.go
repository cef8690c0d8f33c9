package cluster

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/stretchr/testify/require"
)

// tlsAttacker is a raft client that speaks TLS with credentials of its
// choice and does not check the server: what someone with a certificate,
// but not a member's, can do.
type tlsAttacker struct {
	net.Listener
	conf *tls.Config
}

func (a *tlsAttacker) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), a.conf)
}

func attackerWithCert(t *testing.T, cert tls.Certificate) *raft.NetworkTransport {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	st := &tlsAttacker{Listener: ln, conf: &tls.Config{
		InsecureSkipVerify: true,
		// Present the certificate whatever CAs the server asks for.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
	}}
	tr := raft.NewNetworkTransport(st, 1, 2*time.Second, io.Discard)
	t.Cleanup(func() { tr.Close() })
	return tr
}

// forgedVote sends the RequestVote of TestAttackForgedRequestVote and
// returns the attacker's error.
func forgedVote(tr *raft.NetworkTransport, target, claim *Node, term uint64) error {
	req := &raft.RequestVoteRequest{
		RPCHeader:          raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(claim.ID()), Addr: []byte(claim.RaftAddr())},
		Term:               term + 1000,
		LastLogIndex:       1 << 40,
		LastLogTerm:        term + 999,
		LeadershipTransfer: true,
	}
	var resp raft.RequestVoteResponse
	return tr.RequestVote(raft.ServerID(target.ID()), raft.ServerAddress(target.RaftAddr()), req, &resp)
}

// TestRaftRefusesPeersWithoutAMembersCertificate: a TLS client with a
// certificate of another CA, and one with the genuine certificate of a
// node that was removed, are refused during the handshake, and the forged
// vote they carry changes nothing.
func TestRaftRefusesPeersWithoutAMembersCertificate(t *testing.T) {
	tc := newTestCluster(t)
	n1, n2, n3 := tc.formThree()
	n4 := tc.join("n4", n1)
	tc.waitFor("n4 up", func() bool { return tc.converged(4) })
	removedCert := n4.pki.Load().node
	_, err := tc.client(n1, n1.Token()).Remove(context.Background(), "n4")
	require.NoError(t, err)
	tc.waitFor("n4 removed everywhere", func() bool {
		for _, n := range []*Node{n1, n2, n3} {
			if i, _ := n.Map().Node("n4"); i.State != StateRemoved {
				return false
			}
		}
		return true
	})
	srv, _ := selfSignedTLS(t)
	term := maxTerm(n1, n2, n3)
	for name, cert := range map[string]tls.Certificate{
		"certificate of another CA":     srv.Certificates[0],
		"certificate of a removed node": removedCert,
	} {
		t.Run(name, func(t *testing.T) {
			tr := attackerWithCert(t, cert)
			for _, target := range []*Node{n1, n2, n3} {
				claim := n2
				if target == n2 {
					claim = n3
				}
				err := forgedVote(tr, target, claim, term)
				require.Error(t, err)
				t.Logf("attacker's view (%s) at %s: %v", name, target.ID(), err)
			}
		})
	}
	require.Never(t, func() bool { return maxTerm(n1, n2, n3) >= term+1000 }, time.Second, 20*time.Millisecond)
	t.Logf("term %d before, %d after; %s leads (elections on a loaded machine are not the attack's)", term, maxTerm(n1, n2, n3), tc.leaderName())
	for _, n := range []*Node{n1, n2, n3} {
		require.NotZero(t, n.stream.stats.failedHandshakes.Load(), "%s counted the refusals", n.ID())
	}
}

// TestRaftPeerAllowed is the membership rule a certificate must pass.
func TestRaftPeerAllowed(t *testing.T) {
	m := testMap(t, 8, "a", "b", "c")
	m = mustApply(t, m, Command{Type: CmdRemove, Target: "c"})
	n := &Node{fsm: newFSM(slog.New(slog.DiscardHandler))}
	n.fsm.set(m)
	b, _ := m.Node("b")
	for name, tc := range map[string]struct {
		id, dialed string
		ok         bool
	}{
		"member":                {"a", "", true},
		"member at its address": {"b", b.RaftAddr, true},
		"member at an address the map does not know": {"a", "10.0.0.9:7401", true},
		"not a member":             {"z", "", false},
		"removed":                  {"c", "", false},
		"another member's address": {"a", b.RaftAddr, false},
	} {
		t.Run(name, func(t *testing.T) {
			err := n.raftPeerAllowed(NodeID(tc.id), tc.dialed)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrUnauthorized)
			t.Log(err)
		})
	}
	// A node without a map (joining) trusts the CA alone.
	empty := &Node{fsm: newFSM(slog.New(slog.DiscardHandler))}
	require.NoError(t, empty.raftPeerAllowed("anyone", ""))
}

// testPKI returns credentials of a fresh cluster CA for node id.
func testPKI(t *testing.T, id NodeID) *raftPKI {
	p, _, err := bootstrapPKI(id, time.Now())
	require.NoError(t, err)
	return p
}

// issue returns credentials of another node of p's CA.
func issue(t *testing.T, p *raftPKI, id NodeID) *raftPKI {
	key, csr, err := newNodeKey(id)
	require.NoError(t, err)
	cert, err := p.signCSR(csr, id, time.Now())
	require.NoError(t, err)
	q, err := newRaftPKI(id, p.caCertPEM, p.caKeyPEM, cert, key)
	require.NoError(t, err)
	return q
}

func TestSignCSRNamesOnlyTheJoiningNode(t *testing.T) {
	p := testPKI(t, "n1")
	_, csr, err := newNodeKey("n2")
	require.NoError(t, err)
	_, err = p.signCSR(csr, "n3", time.Now())
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = p.signCSR([]byte("not pem"), "n2", time.Now())
	require.ErrorIs(t, err, ErrBadRequest)
	// Credentials of another CA do not load together.
	other := testPKI(t, "x")
	_, err = newRaftPKI("n1", other.caCertPEM, other.caKeyPEM, p.nodeCertPEM, nil)
	require.Error(t, err)
}

func newTestStream(t *testing.T, p *raftPKI, lim RaftLimits) *tlsStream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := newTLSStream(ln, nil, lim, slog.New(slog.DiscardHandler), func(NodeID, string) error { return nil })
	s.setPKI(p)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestRaftPortLimits: handshakes beyond the limit are closed at once,
// stalled handshakes end at their deadline, a peer's connections beyond
// its share evict its least recently used one, and an idle one is closed.
func TestRaftPortLimits(t *testing.T) {
	ca := testPKI(t, "server")
	s := newTestStream(t, ca, RaftLimits{Handshakes: 2, HandshakeTimeout: 300 * time.Millisecond, ConnsPerPeer: 2, IdleTimeout: 400 * time.Millisecond})
	go func() { // raft's side: take every connection, read until it ends
		for {
			c, err := s.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	addr := s.Addr().String()

	// Ten silent connections: two may handshake, the rest are closed.
	var silent []net.Conn
	for range 10 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		silent = append(silent, c)
	}
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	require.Eventually(t, func() bool { return s.stats.refusedBusy.Load() == 8 }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return s.stats.failedHandshakes.Load() == 2 }, 5*time.Second, 10*time.Millisecond,
		"stalled handshakes end at the deadline")
	for _, c := range silent {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF)
	}

	// A member's third connection evicts its first.
	peer := newTestStream(t, issue(t, ca, "peer"), RaftLimits{})
	var conns []net.Conn
	for range 3 {
		c, err := peer.dial(addr, time.Second)
		require.NoError(t, err)
		_, err = c.Write([]byte("x")) // finishes the handshake on the server
		require.NoError(t, err)
		conns = append(conns, c)
	}
	require.Eventually(t, func() bool { return s.stats.evicted.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	conns[0].SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := conns[0].Read(make([]byte, 1))
	require.Error(t, err, "the evicted connection is closed")
	// The others are closed as idle.
	require.Eventually(t, func() bool { return s.stats.idleClosed.Load() >= 2 }, 5*time.Second, 10*time.Millisecond)
	authed, handshaking := s.openConns()
	require.Zero(t, authed+handshaking)
	for _, c := range conns {
		c.Close()
	}
}

// TestRaftIdleConnectionsAreReplaced: raft keeps a pool of connections;
// a leader's are busy (heartbeats, and its pipelines send every commit
// timeout), but a node that stopped leading leaves its pool idle. With a
// short idle timeout the peers close those, and when the node uses its
// pool again (asking for votes) it redials first instead of failing.
func TestRaftIdleConnectionsAreReplaced(t *testing.T) {
	tc := newTestCluster(t)
	tc.tweak = func(c *Config) { c.RaftLimits.IdleTimeout = 600 * time.Millisecond }
	n1, n2, n3 := tc.formThree()
	old := tc.waitLeader()
	require.NotNil(t, old)
	require.NoError(t, old.raft.LeadershipTransfer().Error())
	var next *Node
	tc.waitFor("another leader", func() bool { next = tc.leader(); return next != nil && next != old })
	idle := func() (k uint64) {
		for _, n := range []*Node{n1, n2, n3} {
			k += n.stream.stats.idleClosed.Load()
		}
		return k
	}
	tc.waitFor("the old leader's connections closed as idle", func() bool {
		for _, n := range []*Node{n1, n2, n3} {
			if n != old && n.stream.connsFrom(old.ID()) > 0 {
				return false
			}
		}
		return true
	})
	start := time.Now()
	// Whoever leads hands leadership back (on a loaded machine an election
	// may have moved it meanwhile).
	tc.waitFor("the old leader leads again", func() bool {
		if l := tc.leader(); l != nil && l != old {
			_ = l.raft.LeadershipTransferToServer(raft.ServerID(old.ID()), raft.ServerAddress(old.RaftAddr())).Error()
		}
		return old.IsLeader()
	})
	t.Logf("after %d idle closes, leadership went back to %s in %v; it redialed %d connections",
		idle(), old.ID(), time.Since(start).Round(time.Millisecond), old.stream.stats.redials.Load())
	require.NotZero(t, old.stream.stats.redials.Load(), "pooled connections replaced before use")
	_, err := tc.client(n1, n1.Token()).Drain(context.Background(), next.ID())
	require.NoError(t, err, "and writes go through")
}

// TestCredentialsAreStored: every member keeps its raft credentials in
// <data-dir>/tls with mode 0600, and a restart uses them.
func TestCredentialsAreStored(t *testing.T) {
	tc := newTestCluster(t)
	tc.formThree()
	for id, dir := range tc.dirs {
		for _, f := range []string{caCertFile, caKeyFile, nodeCertFile, nodeKeyFile} {
			requireMode(t, filepath.Join(dir, tlsDir, f), 0o600)
		}
		p, ok, err := loadPKI(dir, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, string(id), p.node.Leaf.Subject.CommonName)
	}
	// A data directory with raft state but no credentials (an older
	// version's) is refused with advice.
	dir := tc.dirs["n3"]
	n3 := tc.nodes["n3"]
	addr := n3.RaftAddr()
	tc.crash(n3)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, tlsDir)))
	cfg := tc.config("n3")
	cfg.RaftListener = listen(t, addr)
	cfg.AdminListener = listen(t, "")
	_, err := Start(cfg)
	require.ErrorIs(t, err, ErrBadRequest)
	require.Contains(t, err.Error(), "without raft TLS")
	t.Log(err)
}

// connsFrom counts the authenticated connections peer id holds to s.
func (s *tlsStream) connsFrom(id NodeID) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := 0
	for c := range s.conns {
		if c.id == id {
			k++
		}
	}
	return k
}
