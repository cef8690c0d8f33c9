package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/dataplane/dpclient"
	dpwire "github.com/octofs/octofs/dataplane/wire"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/pmem/plog"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/rpc"
)

// services are what a bound node runs on its region: the RPC server, the
// chunk service, the namespace service, and the pool of RPC connections
// to the other nodes they call.
type services struct {
	store  *plog.Store
	rpc    *rpc.Server
	peers  *rpc.Pool
	chunks *dataplane.Service
	data   *dpclient.Engine // the node's own client of other nodes' chunk services
	ns     *metadata.Service

	stop chan struct{}
	done chan struct{}
}

// rpcPeer is what RPC handlers learn of a connection's caller.
type rpcPeer struct {
	hello dataplane.Hello
}

// Hello is the Hello the connection was opened with (dataplane.Identified:
// the chunk service checks each request against it).
func (p rpcPeer) Hello() dataplane.Hello { return p.hello }

func startServices(ctx context.Context, s *Storage, n *cluster.Node, store *plog.Store) (svc *services, err error) {
	svc = &services{store: store, stop: make(chan struct{}), done: make(chan struct{})}
	pin := (&pinner{n: n, log: s.log}).pin
	defer func() {
		if err != nil {
			svc.close()
		}
	}()
	if svc.rpc, err = rpc.NewServer(rpc.ServerConfig{Device: s.dev, PD: s.pd, Logger: s.log}); err != nil {
		return nil, fmt.Errorf("node: RPC server: %w", err)
	}
	if svc.peers, err = newPeerPool(s, n); err != nil {
		return nil, err
	}
	if svc.chunks, err = dataplane.NewService(dataplane.ServiceConfig{
		Store: store, Export: s.export, Map: n, Self: n.ID(), Pin: pin,
		Peers: peerCaller{svc.peers}, ClientID: s.incarnation, Incarnation: s.incarnation,
		Now: s.cfg.Now, Logger: s.log,
	}); err != nil {
		return nil, fmt.Errorf("node: chunk service: %w", err)
	}
	for _, op := range dpwire.Ops {
		svc.rpc.Handle(uint16(op), func(ctx context.Context, call *rpc.Call) ([]byte, error) {
			return svc.chunks.Serve(ctx, op, call.Peer, call.Payload), nil
		})
	}
	if svc.data, err = dpclient.New(dpclient.Config{
		Device: s.dev, Map: n, RPC: peerCaller{svc.peers}, Token: s.clusterToken,
		ClientID: s.incarnation, Incarnation: s.incarnation, Name: "node " + string(n.ID()),
		Now: s.cfg.Now, Logger: s.log,
	}); err != nil {
		return nil, fmt.Errorf("node: data client: %w", err)
	}
	if svc.ns, err = metadata.New(metadata.Config{
		Node: n.ID(), Map: n, Store: store, Pin: pin,
		Peers: mdclient.PoolCaller{Pool: svc.peers}, Data: svc.chunks,
		Clock: s.cfg.Now, Logger: s.log, Incarnation: s.incarnation,
	}); err != nil {
		return nil, fmt.Errorf("node: namespace service: %w", err)
	}
	svc.ns.Register(svc.rpc)
	go svc.maintain()
	return svc, nil
}

// sweepInterval is how often the chunk service's quarantines and empty
// pools are swept.
const sweepInterval = time.Second

// maintain runs the services' periodic work until close.
func (svc *services) maintain() {
	defer close(svc.done)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-svc.stop:
			return
		case <-t.C:
			svc.chunks.Sweep()
		}
	}
}

// newPeerPool is the node's pool of RPC connections to other nodes, for
// the namespace service's collect-dispatch and the chunk calls it makes.
func newPeerPool(s *Storage, n *cluster.Node) (*rpc.Pool, error) {
	hello, err := dataplane.EncodeHello(dataplane.Hello{
		Purpose: dataplane.PurposeRPC, Token: s.clusterToken(),
		ClientID: s.incarnation, Incarnation: s.incarnation,
		Node: string(n.ID()), Client: "node " + string(n.ID()),
	})
	if err != nil {
		return nil, err
	}
	p, err := rpc.NewPool(rpc.PoolConfig{PD: s.pd, Client: rpc.ClientConfig{Device: s.dev, PrivateData: hello, Logger: s.log}})
	if err != nil {
		return nil, fmt.Errorf("node: peer connections: %w", err)
	}
	return p, nil
}

func (svc *services) acceptRPC(ctx context.Context, req *rdma.ConnRequest, h dataplane.Hello) error {
	return svc.rpc.Accept(ctx, req, rpcPeer{hello: h})
}

// pinner pins partitions for the services. On the first pin a node makes,
// it pins every partition it owns, concurrently (raft commits concurrent
// commands together): with placement by hash, a file system's first
// minutes touch every partition, and pinning them one raft round trip at a
// time, as each is first written, made the first thousand creates of a
// new file system slow. The price is that a node's share is fixed from its
// first write, which partitions without hand-off impose anyway once data
// is spread.
type pinner struct {
	n    *cluster.Node
	log  *slog.Logger
	once sync.Once
}

// pinAllConcurrency bounds the pin commands in flight at once.
const pinAllConcurrency = 32

func (p *pinner) pin(ctx context.Context, partition uint32) error {
	p.once.Do(func() { p.pinOwned(ctx) })
	return p.n.PinPartition(ctx, partition)
}

// pinOwned pins every partition this node owns, best effort: a failure
// here only means the partition is pinned later, when first written.
func (p *pinner) pinOwned(ctx context.Context) {
	m := p.n.Map()
	var owned []uint32
	for i, id := range m.Partitions {
		if id == p.n.ID() && !m.IsPinned(uint32(i)) {
			owned = append(owned, uint32(i))
		}
	}
	sem := make(chan struct{}, pinAllConcurrency)
	var wg sync.WaitGroup
	var failed atomic.Int32
	for _, part := range owned {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := p.n.PinPartition(ctx, part); err != nil {
				failed.Add(1)
			}
		}()
	}
	wg.Wait()
	p.log.Info("pinned the partitions this node owns", "partitions", len(owned), "failed", failed.Load())
}

// The namespace frees file data through the local chunk service, which
// reaches every node's and defers trims for nodes that are down.
var _ metadata.DataHooks = (*dataplane.Service)(nil)

// peerCaller reaches other nodes' services over RPC, by node.
type peerCaller struct {
	pool *rpc.Pool
}

// Call calls op at node with a fresh request id.
func (pc peerCaller) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	if node.RDMAAddr == "" {
		return nil, fmt.Errorf("node: %s has no RDMA address in the map", node.ID)
	}
	return pc.pool.Call(ctx, node.RDMAAddr, op, dataplane.RandomID(), req)
}

func (svc *services) close() error {
	select {
	case <-svc.done:
	default:
		if svc.chunks != nil {
			close(svc.stop)
			<-svc.done
		}
	}
	var errs []error
	if svc.rpc != nil {
		errs = append(errs, svc.rpc.Close())
	}
	if svc.ns != nil {
		errs = append(errs, svc.ns.Close())
	}
	if svc.data != nil {
		errs = append(errs, svc.data.Close())
	}
	if svc.peers != nil {
		errs = append(errs, svc.peers.Close())
	}
	return errors.Join(errs...)
}
