// Package metatest starts namespace services in one test process: each
// node a metadata.Service on its own volatile pmem region with a plog
// store, a static cluster map, and an in-process transport between them
// and to clients, with hooks to fail or cut calls. The metadata tests use
// it, and so can tests of the layers above (client library, FUSE) that
// need a real namespace without RDMA.
package metatest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
)

// Maps is a MapSource whose map tests set.
type Maps struct {
	mu      sync.Mutex
	m       *cluster.Map
	changed chan struct{}
}

// NewMaps returns a source holding m.
func NewMaps(m *cluster.Map) *Maps { return &Maps{m: m, changed: make(chan struct{})} }

// Current implements cluster.MapSource.
func (s *Maps) Current() *cluster.Map {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

// Set publishes m.
func (s *Maps) Set(m *cluster.Map) {
	s.mu.Lock()
	s.m = m
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

// Watch implements cluster.MapSource.
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

// StaticMap assigns partitions round-robin to nodes n1..nN.
func StaticMap(nodes, partitions int) *cluster.Map {
	m := &cluster.Map{ClusterID: "metatest", Epoch: 1}
	for i := range nodes {
		m.Nodes = append(m.Nodes, cluster.NodeInfo{ID: NodeName(i), State: cluster.StateUp})
	}
	for p := range partitions {
		m.Partitions = append(m.Partitions, NodeName(p%nodes))
	}
	return m
}

// NodeName is the id of node i.
func NodeName(i int) cluster.NodeID { return cluster.NodeID(fmt.Sprintf("n%d", i+1)) }

// ErrDown is what calls to or from a node marked down fail with.
var ErrDown = errors.New("metatest: node down")

// Transport carries calls between clients and nodes in-process. Hook, if
// set, is consulted before each call (from is "" for clients) and may
// fail it.
type Transport struct {
	mu    sync.Mutex
	svcs  map[cluster.NodeID]*metadata.Service
	down  map[cluster.NodeID]bool
	hook  func(from, to cluster.NodeID, op wire.Op) error
	calls map[wire.Op]int
}

// NewTransport returns an empty transport.
func NewTransport() *Transport {
	return &Transport{svcs: map[cluster.NodeID]*metadata.Service{}, down: map[cluster.NodeID]bool{}, calls: map[wire.Op]int{}}
}

// SetHook installs fn (nil removes it).
func (t *Transport) SetHook(fn func(from, to cluster.NodeID, op wire.Op) error) {
	t.mu.Lock()
	t.hook = fn
	t.mu.Unlock()
}

// Calls returns how many calls of op went through (clients and nodes).
func (t *Transport) Calls(op wire.Op) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.calls[op]
}

// ResetCalls zeroes the call counters.
func (t *Transport) ResetCalls() {
	t.mu.Lock()
	clear(t.calls)
	t.mu.Unlock()
}

func (t *Transport) set(id cluster.NodeID, s *metadata.Service, down bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s != nil {
		t.svcs[id] = s
	}
	t.down[id] = down
}

// Call implements mdclient.Caller for clients.
func (t *Transport) Call(ctx context.Context, to cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	return t.call(ctx, "", to.ID, op, reqID, payload)
}

func (t *Transport) call(ctx context.Context, from, to cluster.NodeID, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	t.mu.Lock()
	svc, hook := t.svcs[to], t.hook
	down := t.down[to] || (from != "" && t.down[from])
	t.calls[wire.Op(op)]++
	t.mu.Unlock()
	if down || svc == nil {
		return nil, fmt.Errorf("%w: %s -> %s", ErrDown, from, to)
	}
	if hook != nil {
		if err := hook(from, to, wire.Op(op)); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// The payload is copied as a real transport would deliver it.
	reply := svc.Handle(ctx, op, reqID, append([]byte(nil), payload...))
	// A reply from or to a node that went down meanwhile is lost.
	t.mu.Lock()
	down = t.down[to] || (from != "" && t.down[from]) || t.svcs[to] != svc
	t.mu.Unlock()
	if down {
		return nil, fmt.Errorf("%w: %s -> %s (reply lost)", ErrDown, from, to)
	}
	return reply, nil
}

// nodeCaller is a node's view of the transport.
type nodeCaller struct {
	t    *Transport
	from cluster.NodeID
}

func (c nodeCaller) Call(ctx context.Context, to cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	return c.t.call(ctx, c.from, to.ID, op, reqID, payload)
}

// Data records the data hooks' calls; it implements metadata.DataHooks.
type Data struct {
	mu        sync.Mutex
	freed     map[uint64]int
	truncated map[uint64][]uint64
	attempts  map[uint64]int
	fail      func(ino uint64) error
	usage     map[uint64]uint64
}

// NewData returns an empty recorder.
func NewData() *Data {
	return &Data{freed: map[uint64]int{}, truncated: map[uint64][]uint64{}, attempts: map[uint64]int{}}
}

// SetFail makes the hooks fail for the inodes fn fails (the service
// retries); nil ends it.
func (d *Data) SetFail(fn func(ino uint64) error) {
	d.mu.Lock()
	d.fail = fn
	d.mu.Unlock()
}

func (d *Data) try(ino uint64) error {
	d.attempts[ino]++
	if d.fail != nil {
		return d.fail(ino)
	}
	return nil
}

// Truncate implements metadata.DataHooks.
func (d *Data) Truncate(ctx context.Context, ino, oldSize, size uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.try(ino); err != nil {
		return err
	}
	d.truncated[ino] = append(d.truncated[ino], size)
	return nil
}

// Free implements metadata.DataHooks.
func (d *Data) Free(ctx context.Context, ino, size uint64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.try(ino); err != nil {
		return err
	}
	d.freed[ino]++
	return nil
}

// SetUsage makes Usage answer bytes for ino (without it, Usage fails and
// st_blocks stays the service's estimate).
func (d *Data) SetUsage(ino, bytes uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.usage == nil {
		d.usage = map[uint64]uint64{}
	}
	d.usage[ino] = bytes
}

// Usage implements metadata.DataHooks.
func (d *Data) Usage(ctx context.Context, ino, size uint64, everywhere bool) (uint64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b, ok := d.usage[ino]; ok {
		return b, nil
	}
	return 0, errors.New("metatest: no usage set for this inode")
}

// Attempts counts the hook calls for ino, failed ones included.
func (d *Data) Attempts(ino uint64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.attempts[ino]
}

// TruncatedTo lists the sizes ino was truncated to.
func (d *Data) TruncatedTo(ino uint64) []uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]uint64(nil), d.truncated[ino]...)
}

// FreedCount returns how often ino's data was freed.
func (d *Data) FreedCount(ino uint64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.freed[ino]
}

// Config configures a Cluster. Zero fields take defaults.
type Config struct {
	Nodes      int // default 3
	Partitions int // default 16
	RegionSize int // bytes per node, default 64 MiB
	Logger     *slog.Logger
	// Plog configures every node's log store.
	Plog plog.Options
	// Medium, if set, gives node i's medium (formatted by Start).
	Medium func(i int, size int) pmem.Medium
	// Service adjusts a node's service configuration before it starts.
	Service func(i int, cfg *metadata.Config)
}

// Node is one node of a Cluster.
type Node struct {
	ID     cluster.NodeID
	Medium pmem.Medium
	Region *pmem.Region
	Store  *plog.Store
	Svc    *metadata.Service
	index  int
}

// Cluster is a set of namespace services in one process.
type Cluster struct {
	TB        testing.TB
	Cfg       Config
	Maps      *Maps
	Transport *Transport
	Data      *Data
	Nodes     []*Node
	incs      uint64
	mu        sync.Mutex
}

// Start formats a region per node and starts the services; the test's
// cleanup closes them.
func Start(tb testing.TB, cfg Config) *Cluster {
	tb.Helper()
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 16
	}
	if cfg.RegionSize == 0 {
		cfg.RegionSize = 64 << 20
	}
	c := &Cluster{TB: tb, Cfg: cfg, Maps: NewMaps(StaticMap(cfg.Nodes, cfg.Partitions)), Transport: NewTransport(), Data: NewData(), incs: 1000}
	for i := range cfg.Nodes {
		var m pmem.Medium
		if cfg.Medium != nil {
			m = cfg.Medium(i, cfg.RegionSize)
		} else {
			m = pmem.NewMemMedium(cfg.RegionSize)
		}
		r, err := pmem.Format(m, pmem.FormatOptions{BlockSize: 4096}, pmem.Options{})
		if err != nil {
			tb.Fatalf("metatest: format node %d: %v", i, err)
		}
		n := &Node{ID: NodeName(i), Medium: m, Region: r, index: i}
		c.Nodes = append(c.Nodes, n)
		if err := c.start(n); err != nil {
			tb.Fatalf("metatest: start %s: %v", n.ID, err)
		}
	}
	tb.Cleanup(c.Close)
	return c
}

func (c *Cluster) start(n *Node) error {
	po := c.Cfg.Plog
	if po.Logger == nil {
		po.Logger = c.Cfg.Logger
	}
	st, err := plog.Open(n.Region, po)
	if err != nil {
		return err
	}
	n.Store = st
	c.mu.Lock()
	c.incs++
	inc := c.incs
	c.mu.Unlock()
	cfg := metadata.Config{Node: n.ID, Map: c.Maps, Store: st, Peers: nodeCaller{c.Transport, n.ID}, Data: c.Data,
		Logger: c.Cfg.Logger, Incarnation: inc, ResolveInterval: 50 * time.Millisecond, SessionLease: 5 * time.Second}
	if c.Cfg.Service != nil {
		c.Cfg.Service(n.index, &cfg)
	}
	svc, err := metadata.New(cfg)
	if err != nil {
		return err
	}
	n.Svc = svc
	c.Transport.set(n.ID, svc, false)
	return nil
}

// Client returns a namespace client over the transport.
func (c *Cluster) Client() *mdclient.Client {
	cl, err := mdclient.New(mdclient.Config{Maps: c.Maps, Caller: c.Transport, OpTimeout: 20 * time.Second, AttemptTimeout: 2 * time.Second})
	if err != nil {
		c.TB.Fatalf("metatest: client: %v", err)
	}
	return cl
}

// Isolate cuts node i off the transport: nothing it sends or is sent
// arrives (the first moment of a crash; Kill finishes it).
func (c *Cluster) Isolate(i int) { c.Transport.set(c.Nodes[i].ID, nil, true) }

// Kill stops node i as a crash would: it is cut off from the transport
// (nothing it sends or is sent arrives) and its service is closed. Its
// medium is left as it is.
func (c *Cluster) Kill(i int) {
	n := c.Nodes[i]
	c.Transport.set(n.ID, nil, true)
	n.Svc.Close()
}

// Restart starts node i again on image (nil: its medium as it is now),
// replaying its logs with a new incarnation.
func (c *Cluster) Restart(i int, image []byte) {
	c.TB.Helper()
	n := c.Nodes[i]
	if image != nil {
		n.Medium = pmem.NewMemMediumFrom(image)
	}
	r, err := pmem.Attach(n.Medium, pmem.Options{})
	if err != nil {
		c.TB.Fatalf("metatest: attach %s: %v", n.ID, err)
	}
	n.Region = r
	if err := c.start(n); err != nil {
		c.TB.Fatalf("metatest: restart %s: %v", n.ID, err)
	}
}

// Close stops every service.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n.Svc != nil {
			n.Svc.Close()
		}
	}
}
