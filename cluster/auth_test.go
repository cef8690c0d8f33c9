package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRequestsWithoutTokenAreRefused sends every mutating call, and the
// reads that expose region keys, without the token and with a wrong one,
// to the leader and to a follower. Each is refused with 401 and nothing
// changes: same epoch, same map, same raft configuration on every node.
func TestRequestsWithoutTokenAreRefused(t *testing.T) {
	tc := newTestCluster(t)
	n1, n2, n3 := tc.formThree()
	ld := tc.waitLeader()
	var follower *Node
	for _, n := range []*Node{n1, n2, n3} {
		if n != ld {
			follower = n
			break
		}
	}
	before := ld.Map()
	configBefore := mustConfig(t, ld)

	join := `{"id":"intruder","admin_addr":"127.0.0.1:1","raft_addr":"127.0.0.1:2"}`
	hb := `{"id":"n1","admin_addr":"evil:1","raft_addr":"127.0.0.1:2","region":{"rkey":666},"applied_index":1000000}`
	requests := map[string]struct{ method, path, body string }{
		"join":        {"POST", PathJoin, join},
		"remove":      {"POST", "/v1/nodes/n3/remove", ""},
		"drain":       {"POST", "/v1/nodes/n2/drain", ""},
		"heartbeat":   {"POST", PathHeartbeat, hb},
		"self join":   {"POST", PathSelfJoin, `{"members":["127.0.0.1:1"]}`},
		"map (rkeys)": {"GET", PathMap, ""},
		"watch":       {"GET", PathWatch + "?epoch=0&wait=0s", ""},
		"nodes":       {"GET", PathNodes, ""},
	}
	auths := map[string]string{
		"no token":    "",
		"wrong token": "Bearer " + strings.Repeat("0", len(ld.Token())),
		"short token": "Bearer x",
		"basic auth":  "Basic " + ld.Token(),
	}
	for _, target := range []*Node{ld, follower} {
		for rname, r := range requests {
			for aname, auth := range auths {
				if auth == "" && r.method == "GET" {
					continue // public reads: checked below (redacted)
				}
				t.Run(string(target.ID())+"/"+rname+"/"+aname, func(t *testing.T) {
					req, err := http.NewRequest(r.method, "http://"+target.AdminAddr()+r.path, strings.NewReader(r.body))
					require.NoError(t, err)
					if auth != "" {
						req.Header.Set("Authorization", auth)
					}
					resp, err := http.DefaultClient.Do(req)
					require.NoError(t, err)
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", body)
					var e apiError
					require.NoError(t, json.Unmarshal(body, &e))
					require.Equal(t, "unauthorized", e.Code)
				})
			}
		}
	}
	// Public reads answer, without region keys.
	for _, path := range []string{PathMap, PathWatch + "?epoch=0&wait=0s", PathNodes} {
		resp, err := http.Get("http://" + follower.AdminAddr() + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NotContains(t, string(body), `"rkey"`, path)
	}
	m, err := tc.client(follower, "").Map(context.Background())
	require.NoError(t, err)
	require.True(t, m.Redacted)
	m, err = tc.client(follower, ld.Token()).Map(context.Background())
	require.NoError(t, err)
	require.False(t, m.Redacted)
	require.Equal(t, uint32(0xbeef), m.Nodes[0].Region.RKey)

	// Nothing changed anywhere. (A forged heartbeat is refused before the
	// leader records it, which the 401s above show; an accepted one might
	// not show in the map, since the real heartbeats overwrite it.)
	for _, n := range []*Node{n1, n2, n3} {
		require.Equal(t, before, n.Map(), "map changed on %s", n.ID())
	}
	require.Equal(t, configBefore, mustConfig(t, ld))
	// And the client reports the refusal as ErrUnauthorized with advice.
	_, err = tc.client(follower, "wrong").Drain(context.Background(), "n2")
	require.ErrorIs(t, err, ErrUnauthorized)
	require.Contains(t, err.Error(), "<data-dir>/token")
	require.NotContains(t, err.Error(), "--token", "the server's text names no flag: each program adds its own")
}

// selfSignedTLS returns server and client TLS configs for 127.0.0.1.
func selfSignedTLS(t *testing.T) (server, client *tls.Config) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "octofs-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: pool}
}

func TestAdminTLS(t *testing.T) {
	srv, cli := selfSignedTLS(t)
	tc := newTestCluster(t)
	tc.tweak = func(c *Config) { c.AdminTLS, c.ClientTLS = srv, cli }
	n1 := tc.bootstrap("n1")
	n2 := tc.join("n2", n1) // join and heartbeats over HTTPS
	tc.waitFor("two nodes up", func() bool { return tc.converged(2) })

	c := NewAdminClient([]string{n2.AdminAddr()}, n1.Token(), cli)
	defer c.CloseIdleConnections()
	s, err := c.Status(context.Background())
	require.NoError(t, err)
	require.Equal(t, NodeID("n2"), s.NodeID)
	// Plain HTTP to a TLS port fails; so does HTTPS without the CA.
	_, err = NewAdminClient([]string{n2.AdminAddr()}, "", nil).Status(context.Background())
	require.Error(t, err)
	_, err = NewAdminClient([]string{n2.AdminAddr()}, "", &tls.Config{}).Status(context.Background())
	require.ErrorIs(t, err, ErrUnreachable)
}

func TestMetricsEndpoint(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	resp, err := http.Get("http://" + n1.AdminAddr() + PathMetrics)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"octofs_cluster_epoch 1",
		`octofs_raft_state{state="Leader"} 1`,
		`octofs_cluster_nodes{state="up"} 1`,
		`octofs_cluster_partitions_owned{node="n1"} 64`,
		"octofs_cluster_is_leader 1",
		`octofs_raft_servers{suffrage="voter"} 1`,
		"octofs_raft_term",
	} {
		require.Contains(t, string(body), want)
	}
}

// Go's profiles are for the cluster's operators: without the token the
// admin port shows none.
func TestPprofNeedsTheToken(t *testing.T) {
	tc := newTestCluster(t)
	n1 := tc.bootstrap("n1")
	get := func(path, auth string) (int, string) {
		t.Helper()
		req, err := http.NewRequest("GET", "http://"+n1.AdminAddr()+path, nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{PathDebugPprof, PathDebugPprof + "goroutine?debug=1", PathDebugPprof + "cmdline"} {
		code, body := get(path, "")
		require.Equal(t, http.StatusUnauthorized, code, path)
		require.NotContains(t, body, "goroutine profile", path)
		code, _ = get(path, "Bearer nope")
		require.Equal(t, http.StatusUnauthorized, code, path)
	}
	code, body := get(PathDebugPprof+"goroutine?debug=1", "Bearer "+n1.Token())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "goroutine profile")
	code, body = get(PathDebugPprof, "Bearer "+n1.Token())
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "heap")
}
