// Package proctest runs octofs clusters as real `octofs serve` processes
// on loopback, each with its own data directory and file-backed pmem
// region, and kills and restarts them by PID. The client library's kill
// tests and `octoctl bench meta` use it: a SIGKILL of a process is the
// failure they are about, which an in-process cluster (node/nodetest)
// cannot give.
//
// Every process is started with Pdeathsig SIGKILL and stopped by Stop, so
// none outlives the program that started it.
package proctest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
)

// Options shape a process cluster. Zero fields take the defaults.
type Options struct {
	// Binary is the octofs program (required).
	Binary string
	// Dir holds every node's data directory, region and log (required).
	Dir string
	// Nodes is how many nodes (default 3).
	Nodes int
	// Partitions is P (default 64).
	Partitions int
	// FilePlacement is the new cluster's file placement (default: octofs
	// serve's, cluster.PlaceWithDirectory).
	FilePlacement cluster.FilePlacement
	// RegionSize is each region's size in bytes (default 256 MiB).
	RegionSize int64
	// Args are extra flags for every `octofs serve`.
	Args []string
	// Ready bounds the wait for the cluster to come up (default 60s).
	Ready time.Duration
}

// Cluster is a running process cluster.
type Cluster struct {
	opts  Options
	Nodes []*Node
	// Token is the cluster token; TokenFile holds it.
	Token     string
	TokenFile string
}

// Node is one `octofs serve` process (or its data, while it is down).
type Node struct {
	ID        string
	AdminAddr string
	RaftAddr  string
	RDMAAddr  string
	DataDir   string
	Region    string
	// Log is the file the process's output goes to.
	Log string

	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// Running reports whether the node's process runs.
func (n *Node) Running() bool {
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// PID is the process id (0 when not running).
func (n *Node) PID() int {
	if !n.Running() {
		return 0
	}
	return n.cmd.Process.Pid
}

// Start starts the cluster: the first node bootstraps it, the others join
// with its token; it returns once every node is up in the map with its
// RDMA address. On error every started process is stopped.
func Start(ctx context.Context, o Options) (c *Cluster, err error) {
	if o.Binary == "" || o.Dir == "" {
		return nil, errors.New("proctest: Binary and Dir are required")
	}
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.Partitions == 0 {
		o.Partitions = 64
	}
	if o.RegionSize == 0 {
		o.RegionSize = 256 << 20
	}
	if o.Ready == 0 {
		o.Ready = 60 * time.Second
	}
	c = &Cluster{opts: o}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := range o.Nodes {
		id := fmt.Sprintf("n%d", i+1)
		n := &Node{ID: id, DataDir: filepath.Join(o.Dir, id), Region: filepath.Join(o.Dir, id+".pmem"), Log: filepath.Join(o.Dir, id+".log")}
		if n.AdminAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
		if n.RaftAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
		if n.RDMAAddr, err = FreeAddr(); err != nil {
			return nil, err
		}
		n.args = []string{"serve", "--node-id", id, "--data-dir", n.DataDir,
			"--admin-addr", n.AdminAddr, "--raft-addr", n.RaftAddr, "--rdma-addr", n.RDMAAddr,
			"--pmem", n.Region, "--pmem-size", strconv.FormatInt(o.RegionSize, 10),
			"--heartbeat-interval", "200ms", "--down-after", "2s"}
		if i == 0 {
			n.args = append(n.args, "--bootstrap", "--partitions", strconv.Itoa(o.Partitions))
			if o.FilePlacement != "" {
				n.args = append(n.args, "--file-placement", string(o.FilePlacement))
			}
		} else {
			n.args = append(n.args, "--join", c.Nodes[0].AdminAddr, "--token-file", c.TokenFile)
		}
		n.args = append(n.args, o.Args...)
		c.Nodes = append(c.Nodes, n)
		if err := c.start(n); err != nil {
			return nil, err
		}
		if i == 0 {
			c.TokenFile = filepath.Join(n.DataDir, cluster.TokenFile)
			if err := waitUntil(ctx, o.Ready, func() bool {
				t, err := cluster.ReadTokenFile(c.TokenFile)
				c.Token = t
				return err == nil && t != ""
			}); err != nil {
				return nil, fmt.Errorf("proctest: %s wrote no token: %w (log: %s)", id, err, n.Log)
			}
		}
	}
	if err := c.WaitUp(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// FreeAddr returns a loopback address with a free port below the
// kernel's ephemeral range, so that no outgoing connection (every soft
// RDMA queue pair dials one) takes it before the child binds it. It never
// returns a port twice in one process: a port handed out but not yet
// bound by its child looks free.
func FreeAddr() (string, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	handedOut.Lock()
	defer handedOut.Unlock()
	for range 100 {
		port := 10000 + rand.IntN(low-10000)
		if handedOut.ports[port] {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if ln, err := net.Listen("tcp", addr); err == nil {
			ln.Close()
			handedOut.ports[port] = true
			return addr, nil
		}
	}
	return "", errors.New("proctest: no free port below the ephemeral range")
}

// handedOut are the ports FreeAddr returned.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

func (c *Cluster) start(n *Node) error {
	f, err := os.OpenFile(n.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== %s start %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(n.args, " "))
	cmd := exec.Command(c.opts.Binary, n.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("proctest: start %s: %w", n.ID, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		f.Close()
		close(done)
	}(n.done)
	return nil
}

// AdminAddrs are the admin addresses of every node (running or not).
func (c *Cluster) AdminAddrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.AdminAddr)
	}
	return a
}

// WaitUp waits until every node is up in the map of a running node, with
// its RDMA address published.
func (c *Cluster) WaitUp(ctx context.Context) error {
	var running []string
	for _, n := range c.Nodes {
		if n.Running() {
			running = append(running, n.AdminAddr)
		}
	}
	admin := cluster.NewAdminClient(running, c.Token, nil)
	defer admin.CloseIdleConnections()
	var last string
	err := waitUntil(ctx, c.opts.Ready, func() bool {
		for _, n := range c.Nodes {
			if n.cmd != nil && !n.Running() {
				last = fmt.Sprintf("%s exited (log: %s)", n.ID, n.Log)
				return false
			}
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		m, err := admin.Map(qctx)
		if err != nil {
			last = err.Error()
			return false
		}
		for _, n := range c.Nodes {
			info, ok := m.Node(cluster.NodeID(n.ID))
			if !ok || info.State != cluster.StateUp || info.RDMAAddr == "" {
				last = fmt.Sprintf("%s is %q in map epoch %d", n.ID, info.State, m.Epoch)
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("proctest: cluster not up: %w (last: %s)", err, last)
	}
	return nil
}

// Kill sends SIGKILL to node i's process and waits for it to exit.
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	if !n.Running() {
		return
	}
	n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.done
}

// Restart starts node i again on its data directory and region (it
// rejoins by itself) and waits for the cluster to be up.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	n := c.Nodes[i]
	if n.Running() {
		return fmt.Errorf("proctest: %s still runs", n.ID)
	}
	if err := c.start(n); err != nil {
		return err
	}
	return c.WaitUp(ctx)
}

// Stop ends every process: SIGTERM, then SIGKILL after 5 s.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		if n.Running() {
			n.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, n := range c.Nodes {
		if n.cmd == nil {
			continue
		}
		select {
		case <-n.done:
		case <-time.After(5 * time.Second):
			n.cmd.Process.Signal(syscall.SIGKILL)
			<-n.done
		}
	}
}

// Logs returns the tail of every node's log, for a failure message.
func (c *Cluster) Logs(tail int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		data, _ := os.ReadFile(n.Log)
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > tail {
			lines = lines[len(lines)-tail:]
		}
		fmt.Fprintf(&b, "--- %s (%s)\n%s\n", n.ID, n.Log, strings.Join(lines, "\n"))
	}
	return b.String()
}

// waitUntil polls cond every 50 ms until it holds, limit passes or ctx
// ends.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Build compiles the octofs program from the module at moduleDir into
// dir and returns its path, for tests that need the binary.
func Build(ctx context.Context, moduleDir, dir string, stderr io.Writer) (string, error) {
	out := filepath.Join(dir, "octofs")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/octofs")
	cmd.Dir = moduleDir
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("proctest: build octofs: %w", err)
	}
	return out, nil
}
