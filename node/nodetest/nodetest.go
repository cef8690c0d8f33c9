// Package nodetest starts whole octofs clusters inside one test process:
// every node is a cluster.Node (raft, map, admin API) with a node.Storage
// (region, RDMA listener on the soft provider, services) on loopback. It is
// what the client library, the FUSE adapter and the data path test
// against. Regions live in tmpfs (/dev/shm) when it is there, so fences are
// cheap; a test that needs real persistence uses processes instead.
package nodetest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node"
)

// Options shape a test cluster. Zero fields take the defaults.
type Options struct {
	// Nodes is how many nodes to start (default 3).
	Nodes int
	// Partitions is P (default 64: small maps, every node owns many).
	Partitions int
	// RegionSize is each node's region in bytes (default 128 MiB).
	RegionSize int64
	// Logger receives every node's logs (default: the test log, only
	// printed when the test fails).
	Logger *slog.Logger
}

// Cluster is a running test cluster.
type Cluster struct {
	t     testing.TB
	opts  Options
	log   *slog.Logger
	dir   string
	Nodes []*Node
	// Token is the cluster token.
	Token string
}

// Node is one member: its control plane and its storage side.
type Node struct {
	ID      cluster.NodeID
	Cluster *cluster.Node
	Storage *node.Storage

	dataDir, regionPath string
	raftAddr, rdmaAddr  string
}

// AdminAddrs are the admin addresses of the running nodes.
func (c *Cluster) AdminAddrs() []string {
	var a []string
	for _, n := range c.Nodes {
		if n.Cluster != nil {
			a = append(a, n.Cluster.AdminAddr())
		}
	}
	return a
}

// Start starts a cluster and waits until every node is up in every node's
// map and serving. It stops the cluster when the test ends.
func Start(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 64
	}
	if o.RegionSize == 0 {
		o.RegionSize = 128 << 20
	}
	c := &Cluster{t: t, opts: o, log: o.Logger, dir: regionDir(t)}
	if c.log == nil {
		c.log = testLogger(t)
	}
	t.Cleanup(c.Stop)
	for i := range o.Nodes {
		n := &Node{ID: cluster.NodeID(fmt.Sprintf("n%d", i+1))}
		n.dataDir = filepath.Join(t.TempDir(), "data")
		n.regionPath = filepath.Join(c.dir, string(n.ID)+".pmem")
		c.Nodes = append(c.Nodes, n)
		c.start(n, i == 0)
		if i == 0 {
			c.Token = n.Cluster.Token()
		}
	}
	c.WaitUp()
	return c
}

// regionDir is where the regions go: tmpfs if the machine has it.
func regionDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "octofs-nodetest-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

func listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	// A restarted node reuses its ports; the old socket may linger.
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			return ln
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodetest: listen on %s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) start(n *Node, bootstrap bool) {
	t := c.t
	t.Helper()
	log := c.log.With("node", string(n.ID))
	rdmaAddr := n.rdmaAddr
	if rdmaAddr == "" {
		rdmaAddr = "127.0.0.1:0"
	}
	var st *node.Storage
	var err error
	deadline := time.Now().Add(5 * time.Second)
	for {
		st, err = node.OpenStorage(node.StorageConfig{
			PmemPath: n.regionPath, PmemSize: c.opts.RegionSize, Addr: rdmaAddr, Logger: log,
		})
		if err == nil || time.Now().After(deadline) || !strings.Contains(err.Error(), "address already in use") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("nodetest: %s: storage: %v", n.ID, err)
	}
	n.rdmaAddr = st.RDMAAddr()
	raftLn := listen(t, n.raftAddr)
	n.raftAddr = raftLn.Addr().String()
	cfg := cluster.Config{
		ID:                     n.ID,
		DataDir:                n.dataDir,
		AdminListener:          listen(t, ""),
		RaftListener:           raftLn,
		RDMAAddr:               st.RDMAAddr(),
		Region:                 st.Region(),
		Partitions:             c.opts.Partitions,
		HeartbeatInterval:      100 * time.Millisecond,
		DownAfter:              2 * time.Second,
		ApplyTimeout:           5 * time.Second,
		RaftHeartbeatTimeout:   300 * time.Millisecond,
		RaftElectionTimeout:    300 * time.Millisecond,
		RaftLeaderLeaseTimeout: 150 * time.Millisecond,
		RaftCommitTimeout:      5 * time.Millisecond,
		Logger:                 log,
	}
	cfg.AdminAddr = cfg.AdminListener.Addr().String()
	cfg.RaftAddr = n.raftAddr
	if bootstrap {
		cfg.Bootstrap = true
	} else if c.Token != "" {
		cfg.Token = c.Token
		cfg.Join = c.AdminAddrs()
	}
	cn, err := cluster.Start(cfg)
	if err != nil {
		st.Close()
		t.Fatalf("nodetest: %s: cluster: %v", n.ID, err)
	}
	n.Cluster, n.Storage = cn, st
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := st.Serve(ctx, cn); err != nil {
		t.Fatalf("nodetest: %s: serve: %v", n.ID, err)
	}
}

// WaitUp waits until every running node is up in every running node's map
// and the maps agree.
func (c *Cluster) WaitUp() {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !c.converged() {
		if time.Now().After(deadline) {
			c.t.Fatalf("nodetest: cluster did not converge within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) converged() bool {
	var epoch uint64
	running := 0
	for _, n := range c.Nodes {
		if n.Cluster != nil {
			running++
		}
	}
	for _, n := range c.Nodes {
		if n.Cluster == nil {
			continue
		}
		m := n.Cluster.Map()
		if !m.Initialized() || (epoch != 0 && m.Epoch != epoch) {
			return false
		}
		epoch = m.Epoch
		up := 0
		for _, info := range m.Nodes {
			if info.State == cluster.StateUp {
				up++
			}
		}
		if up != running {
			return false
		}
	}
	return true
}

// Crash stops node i abruptly: its storage and control plane close without
// handing anything over. Its region and data directory stay for Restart.
// (An in-process crash still closes files in order; power-loss and SIGKILL
// semantics are tested with pmem.Tracker and with processes.)
func (c *Cluster) Crash(i int) {
	n := c.Nodes[i]
	if n.Cluster == nil {
		return
	}
	n.Storage.Close()
	n.Cluster.Close()
	n.Cluster, n.Storage = nil, nil
}

// Restart starts a crashed node again on its region and data directory,
// with the same addresses.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.start(c.Nodes[i], false)
}

// Stop stops every node.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for i := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Crash(i)
		}()
	}
	wg.Wait()
}

// testLogger sends logs to t.Log, which go test prints only for a failing
// test (or with -v).
func testLogger(t testing.TB) *slog.Logger {
	w := &tWriter{t: t}
	// Registered before the cluster's Stop, so it runs after it: nothing
	// logs through t once the test is over.
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type tWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}
