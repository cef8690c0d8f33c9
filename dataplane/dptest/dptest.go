// Package dptest starts in-process data-path clusters for tests: each node
// has its own volatile pmem region (or a power-loss Tracker), plog store,
// export, chunk service and soft RDMA device with a listener that routes
// data connections to the export and RPC connections to an rdma/rpc
// server with the chunk service's handlers, as package node does. Engines
// from NewEngine call over rdma/rpc; nodes reach each other's chunk
// services in-process, as the Hello of the calling process. Truncate and
// Free do what the namespace does; SetState plays the failure detector.
//
// Nodes can be restarted (process state dropped, region attached again
// from its bytes) and, with Tracker, crashed (region attached from a crash
// image: only what was flushed and fenced survives).
package dptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rpc"
	"github.com/octofs/octofs/rdma/soft"
)

// Token is the test clusters' token.
const Token = "dptest-token"

// Options shape a cluster.
type Options struct {
	Nodes      int           // default 3
	RegionSize int           // bytes per node, default 64 MiB
	Partitions int           // default 64
	Lease      time.Duration // default dataplane.DefaultLease
	Quarantine time.Duration // default 3 x Lease
	// Now is the nodes' clock (default time.Now).
	Now func() time.Time
	// Tracker puts each region on a pmem.Tracker, for Crash.
	Tracker bool
}

// Cluster is a set of in-process nodes and the map that names them.
type Cluster struct {
	t     testing.TB
	opts  Options
	Nodes []*Node
	maps  *Maps
}

// Node is one storage node.
type Node struct {
	ID     cluster.NodeID
	c      *Cluster
	dev    rdma.Device
	pd     rdma.PD
	ln     *rdma.Listener
	medium pmem.Medium
	proc   atomic.Pointer[Proc]
	// procMu serialises restarts.
	procMu sync.Mutex
}

// Proc is one process of a node: what a restart drops.
type Proc struct {
	Region  *pmem.Region
	Store   *plog.Store
	Export  *dataplane.Export
	Service *dataplane.Service
	RPC     *rpc.Server
	// Hello is what the process presents to other nodes (its client id
	// and incarnation are its own, new at every start).
	Hello dataplane.Hello
}

// peer is what the RPC server tells handlers of a connection: its Hello,
// as package node's rpcPeer does.
type peer struct{ h dataplane.Hello }

func (p peer) Hello() dataplane.Hello { return p.h }

// New starts a cluster; everything is closed when the test ends.
func New(t testing.TB, o Options) *Cluster {
	t.Helper()
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	if o.RegionSize == 0 {
		o.RegionSize = 64 << 20
	}
	if o.Partitions == 0 {
		o.Partitions = 64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	c := &Cluster{t: t, opts: o}
	m := &cluster.Map{ClusterID: "dptest", Epoch: 1, Partitions: make([]cluster.NodeID, o.Partitions)}
	for i := range o.Nodes {
		n := c.startNode(cluster.NodeID(fmt.Sprintf("n%d", i+1)))
		c.Nodes = append(c.Nodes, n)
		m.Nodes = append(m.Nodes, cluster.NodeInfo{ID: n.ID, RDMAAddr: n.ln.Addr().String(), State: cluster.StateUp})
	}
	for p := range m.Partitions {
		m.Partitions[p] = c.Nodes[p%o.Nodes].ID
	}
	c.maps = &Maps{m: m, changed: make(chan struct{})}
	for _, n := range c.Nodes {
		n.start(true)
	}
	return c
}

func (c *Cluster) startNode(id cluster.NodeID) *Node {
	t := c.t
	n := &Node{ID: id, c: c}
	var err error
	if n.dev, err = soft.Open(rdma.DeviceConfig{}); err != nil {
		t.Fatal(err)
	}
	if n.pd, err = n.dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if n.ln, err = rdma.Listen(n.pd, "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			req, err := n.ln.Next(ctx)
			if err != nil {
				return
			}
			h, err := dataplane.DecodeHello(req.PrivateData)
			p := n.proc.Load()
			switch {
			case err != nil:
				req.Reject(err.Error())
			case p == nil:
				req.Reject("node starting")
			case h.Purpose == dataplane.PurposeRPC:
				if err := h.Authorize(Token); err != nil {
					req.Reject(err.Error())
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.RPC.Accept(ctx, req, peer{h})
				}()
			default:
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.Export.Accept(ctx, req, h)
				}()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		n.ln.Close()
		wg.Wait()
		n.stop()
		n.pd.Close()
		n.dev.Close()
	})
	return n
}

// start formats (first) or attaches the node's region and starts a
// process on it.
func (n *Node) start(format bool) {
	t, o := n.c.t, n.c.opts
	var r *pmem.Region
	var err error
	if format {
		if o.Tracker {
			n.medium = pmem.NewTracker(make([]byte, o.RegionSize))
		} else {
			n.medium = pmem.NewMemMedium(o.RegionSize)
		}
		r, err = pmem.Format(n.medium, pmem.FormatOptions{Now: time.Unix(1, 0)}, pmem.Options{})
	} else {
		r, err = pmem.Attach(n.medium, pmem.Options{})
	}
	if err != nil {
		t.Fatalf("node %s: region: %v", n.ID, err)
	}
	store, err := plog.Open(r, plog.Options{SegmentSize: 64 << 10})
	if err != nil {
		t.Fatalf("node %s: plog: %v", n.ID, err)
	}
	inc := dataplane.RandomID()
	exp, err := dataplane.NewExport(dataplane.ExportConfig{Region: r, Device: n.dev, Incarnation: inc,
		Token: func() string { return Token }})
	if err != nil {
		t.Fatal(err)
	}
	hello := dataplane.Hello{Purpose: dataplane.PurposeRPC, Token: Token, ClientID: inc, Incarnation: inc, Node: string(n.ID)}
	svc, err := dataplane.NewService(dataplane.ServiceConfig{Store: store, Export: exp, Map: n.c.maps, Self: n.ID,
		Lease: o.Lease, Quarantine: o.Quarantine, Now: o.Now,
		Peers: peerCaller{c: n.c, from: hello}, ClientID: inc, Incarnation: inc})
	if err != nil {
		t.Fatalf("node %s: chunk service: %v", n.ID, err)
	}
	srv, err := rpc.NewServer(rpc.ServerConfig{Device: n.dev, PD: n.pd})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range wire.Ops {
		srv.Handle(uint16(op), func(ctx context.Context, call *rpc.Call) ([]byte, error) {
			return svc.Serve(ctx, op, call.Peer, call.Payload), nil
		})
	}
	n.proc.Store(&Proc{Region: r, Store: store, Export: exp, Service: svc, RPC: srv, Hello: hello})
}

// stop ends the node's process: data sessions closed, region detached.
func (n *Node) stop() {
	p := n.proc.Swap(nil)
	if p == nil {
		return
	}
	p.RPC.Close()
	p.Export.Close()
	p.Region.Close()
}

// Proc is the node's running process (nil while stopped).
func (n *Node) Proc() *Proc { return n.proc.Load() }

// Restart drops the node's process state and starts a new process on the
// region's bytes as they are (what a process crash leaves on real pmem:
// every store that reached the medium).
func (n *Node) Restart() {
	n.procMu.Lock()
	defer n.procMu.Unlock()
	n.stop()
	n.start(false)
}

// Stop ends the node's process; the node stays down (requests to it fail)
// until Start. The map is not changed: see Cluster.SetState.
func (n *Node) Stop() {
	n.procMu.Lock()
	defer n.procMu.Unlock()
	n.stop()
}

// Start starts a process on the region of a stopped node.
func (n *Node) Start() {
	n.procMu.Lock()
	defer n.procMu.Unlock()
	if n.proc.Load() == nil {
		n.start(false)
	}
}

// Crash drops the node's process and starts a new one on a crash image of
// its Tracker: only what was flushed and fenced survives, plus, for lines
// stored and not yet durable, a random choice of their values.
func (n *Node) Crash(rng *rand.Rand) {
	n.procMu.Lock()
	defer n.procMu.Unlock()
	tr, ok := n.medium.(*pmem.Tracker)
	if !ok {
		n.c.t.Fatal("dptest: Crash needs Options.Tracker")
	}
	img := tr.CrashImage(rng)
	n.stop()
	n.medium = pmem.NewTracker(img)
	n.start(false)
}

// Evict closes every data connection of client id at every node.
func (c *Cluster) Evict(clientID uint64) int {
	total := 0
	for _, n := range c.Nodes {
		if p := n.Proc(); p != nil {
			total += p.Export.Evict(clientID)
		}
	}
	return total
}

// Maps is the cluster's map source.
func (c *Cluster) Maps() *Maps { return c.maps }

// peerCaller is a node's connections to the other nodes' chunk services,
// in-process: each request is served as if it came on a connection opened
// with the calling process's Hello.
type peerCaller struct {
	c    *Cluster
	from dataplane.Hello
}

func (pc peerCaller) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	for _, n := range pc.c.Nodes {
		if n.ID != node.ID {
			continue
		}
		p := n.Proc()
		if p == nil {
			return nil, fmt.Errorf("dptest: node %s is down", n.ID)
		}
		return p.Service.Serve(ctx, wire.Op(op), peer{pc.from}, req), nil
	}
	return nil, fmt.Errorf("dptest: no node %s", node.ID)
}

// Truncate does what the namespace does when ino, of size oldSize, is
// truncated to size: it asks the chunk service of the inode's owner to
// trim it everywhere (dataplane.Service.Truncate).
func (c *Cluster) Truncate(ctx context.Context, ino, oldSize, size uint64) error {
	svc, err := c.inodeOwner(ino)
	if err != nil {
		return err
	}
	return svc.Truncate(ctx, ino, oldSize, size)
}

// Free does what the namespace does when it frees ino: Service.Free at
// the inode's owner.
func (c *Cluster) Free(ctx context.Context, ino uint64) error {
	svc, err := c.inodeOwner(ino)
	if err != nil {
		return err
	}
	return svc.Free(ctx, ino, 0)
}

func (c *Cluster) inodeOwner(ino uint64) (*dataplane.Service, error) {
	owner, err := c.maps.Current().OwnerOfInode(ino)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if n.ID == owner.ID {
			if p := n.Proc(); p != nil {
				return p.Service, nil
			}
			return nil, fmt.Errorf("dptest: node %s, the owner of inode %d, is down", n.ID, ino)
		}
	}
	return nil, fmt.Errorf("dptest: no node %s", owner.ID)
}

// SetState publishes a map in which node id is in state st (since the new
// epoch), as the cluster's failure detector does.
func (c *Cluster) SetState(id cluster.NodeID, st cluster.NodeState) {
	c.maps.mu.Lock()
	m := c.maps.m.Clone()
	c.maps.mu.Unlock()
	m.Epoch++
	for i := range m.Nodes {
		if m.Nodes[i].ID == id {
			m.Nodes[i].State, m.Nodes[i].StateEpoch = st, m.Epoch
		}
	}
	c.maps.Set(m)
}

// PoolCaller is a dpclient.Caller over an rdma/rpc pool: the RPC path a
// real client takes.
type PoolCaller struct{ Pool *rpc.Pool }

// Call implements dpclient.Caller.
func (pc PoolCaller) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	return pc.Pool.Call(ctx, node.RDMAAddr, op, dataplane.RandomID(), req)
}

// EngineOption changes an engine's configuration.
type EngineOption func(*dpclient.Config)

// NewEngine starts a client engine with a device of its own, reaching the
// chunk services over rdma/rpc; it is closed when the test ends.
func (c *Cluster) NewEngine(opts ...EngineOption) *dpclient.Engine {
	t := c.t
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	id, inc := dataplane.RandomID(), dataplane.RandomID()
	hello, err := dataplane.EncodeHello(dataplane.Hello{Purpose: dataplane.PurposeRPC, Token: Token, ClientID: id, Incarnation: inc, Client: "dptest"})
	if err != nil {
		t.Fatal(err)
	}
	pool, err := rpc.NewPool(rpc.PoolConfig{PD: pd, Client: rpc.ClientConfig{Device: dev, PrivateData: hello}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := dpclient.Config{Device: dev, Map: c.maps, RPC: PoolCaller{pool}, Token: func() string { return Token },
		ClientID: id, Incarnation: inc, Name: "dptest"}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := dpclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.Close()
		pool.Close()
		pd.Close()
		dev.Close()
	})
	return e
}

// Maps is a map source whose map a test may change.
type Maps struct {
	mu      sync.Mutex
	m       *cluster.Map
	changed chan struct{}
}

var _ cluster.MapSource = (*Maps)(nil)

// Current returns the map.
func (s *Maps) Current() *cluster.Map {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

// Watch waits for a map newer than since.
func (s *Maps) Watch(ctx context.Context, since uint64) (*cluster.Map, error) {
	for {
		s.mu.Lock()
		m, ch := s.m, s.changed
		s.mu.Unlock()
		if m.Epoch > since {
			return m, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return m, ctx.Err()
		}
	}
}

// Set publishes m.
func (s *Maps) Set(m *cluster.Map) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = m
	close(s.changed)
	s.changed = make(chan struct{})
}
