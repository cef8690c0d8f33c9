package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane"
	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/pmem/plog"
	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/provider"
)

// Sentinel errors.
var (
	// ErrStarting refuses connections that arrive before the services
	// have replayed their logs.
	ErrStarting = errors.New("node: starting, try again shortly")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("node: closed")
)

// StorageConfig describes a node's storage side.
type StorageConfig struct {
	// PmemPath is the region: a devdax device, a file on a DAX file
	// system, or a plain file, created with PmemSize bytes if missing.
	PmemPath string
	PmemSize int64
	// Require refuses a weaker backing than asked for.
	Require pmem.Requirement
	// Region, if set, is used instead of opening PmemPath (tests); the
	// storage closes it.
	Region *pmem.Region

	// Provider names the RDMA provider (provider.Default if empty),
	// Device the verbs device (first active if empty), Addr where the node
	// listens for RDMA connections (host:port), SoftAddr the soft
	// provider's NIC address (default: Addr's host, any port).
	Provider string
	Device   string
	Addr     string
	SoftAddr string

	// Logger receives the storage side's logs (default: discard).
	Logger *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Storage is a node's storage side: the region, the RDMA device and
// listener, the export and, once Serve runs, the services.
type Storage struct {
	cfg         StorageConfig
	log         *slog.Logger
	region      *pmem.Region
	dev         rdma.Device
	pd          rdma.PD // the listener's; RPC queue pairs live in it
	ln          *rdma.Listener
	export      *dataplane.Export
	incarnation uint64

	// token is the cluster token, known once the cluster node runs.
	token atomic.Pointer[string]

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	services *services // nil until Serve has started them
	closed   bool
}

// OpenStorage opens (or creates) the region, opens the RDMA device and
// starts listening; nothing is served until Serve.
func OpenStorage(cfg StorageConfig) (_ *Storage, err error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Provider == "" {
		cfg.Provider = provider.Default
	}
	s := &Storage{cfg: cfg, log: cfg.Logger}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	// s, not a named result: an error return sets the result to nil, and
	// what was opened must still be released.
	defer func() {
		if err != nil {
			s.cancel()
			s.release()
		}
	}()
	if s.region = cfg.Region; s.region == nil {
		if s.region, err = openRegion(cfg); err != nil {
			return nil, err
		}
	}
	if s.incarnation, err = nextIncarnation(s.region, cfg.Now()); err != nil {
		return nil, err
	}
	info := s.region.Info()
	s.log.Info("pmem region open", "path", info.Path, "mode", info.Mode, "domain", info.Domain,
		"flush", info.Instruction, "replayed", s.region.Recovery().Replayed)

	softAddr := cfg.SoftAddr
	if softAddr == "" {
		host, _, err := net.SplitHostPort(cfg.Addr)
		if err != nil {
			return nil, fmt.Errorf("RDMA address %q: %w", cfg.Addr, err)
		}
		softAddr = net.JoinHostPort(host, "0")
	}
	if s.dev, err = provider.Open(cfg.Provider, rdma.DeviceConfig{Device: cfg.Device, GIDIndex: rdma.AutoGID, Addr: softAddr, Logger: s.log}); err != nil {
		return nil, fmt.Errorf("RDMA provider %q: %w", cfg.Provider, err)
	}
	if s.pd, err = s.dev.AllocPD(); err != nil {
		return nil, fmt.Errorf("RDMA: %w", err)
	}
	if s.ln, err = rdma.Listen(s.pd, cfg.Addr); err != nil {
		return nil, err
	}
	if s.export, err = dataplane.NewExport(dataplane.ExportConfig{
		Region: s.region, Device: s.dev, Token: s.clusterToken, Incarnation: s.incarnation, Logger: s.log,
	}); err != nil {
		return nil, err
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func openRegion(cfg StorageConfig) (*pmem.Region, error) {
	popts := pmem.Options{Logger: cfg.Logger, Require: cfg.Require}
	var region *pmem.Region
	var err error
	if _, statErr := os.Stat(cfg.PmemPath); errors.Is(statErr, os.ErrNotExist) {
		region, err = pmem.Create(cfg.PmemPath, cfg.PmemSize, pmem.FormatOptions{Now: cfg.Now()}, popts)
		if err == nil {
			cfg.Logger.Info("created pmem region", "path", cfg.PmemPath, "bytes", cfg.PmemSize)
		}
	} else {
		region, err = pmem.Open(cfg.PmemPath, popts)
	}
	if err != nil {
		return nil, fmt.Errorf("pmem region %s: %w", cfg.PmemPath, err)
	}
	return region, nil
}

// incarnationRoot is the region root word that holds the node's last
// incarnation.
const incarnationRoot = pmem.NumRoots - 1

// nextIncarnation gives this process its incarnation: the clock in
// nanoseconds, or one more than the last one if the clock went back, so
// incarnations of a node only grow (peers fence older ones). It is
// recorded in the region before anything is served.
func nextIncarnation(r *pmem.Region, now time.Time) (uint64, error) {
	inc := max(uint64(now.UnixNano()), r.Root(incarnationRoot)+1)
	if err := r.Store8(r.RootOffset(incarnationRoot), inc); err != nil {
		return 0, fmt.Errorf("pmem region: record the node's incarnation: %w", err)
	}
	return inc, nil
}

// Incarnation is this node process's incarnation: non-zero, larger than
// every earlier process's on this region.
func (s *Storage) Incarnation() uint64 { return s.incarnation }

// RDMAAddr is where clients and peers connect.
func (s *Storage) RDMAAddr() string { return s.ln.Addr().String() }

// Region describes the region for the cluster map. No rkey is published:
// data connections get theirs from the export, per connection.
func (s *Storage) Region() cluster.RegionDescriptor {
	return cluster.RegionDescriptor{
		UUID:   s.region.Superblock().RegionUUID.String(),
		Length: uint64(len(s.region.Bytes())),
	}
}

// PmemRegion is the open region (for tests and tools).
func (s *Storage) PmemRegion() *pmem.Region { return s.region }

// SetToken tells the storage the cluster token connections must present.
func (s *Storage) SetToken(t string) { s.token.Store(&t) }

func (s *Storage) clusterToken() string {
	if p := s.token.Load(); p != nil {
		return *p
	}
	return ""
}

// Bind records the cluster and node in the region's superblock the first
// time, and refuses a region that belongs to another cluster or node.
func (s *Storage) Bind(clusterID string, node cluster.NodeID) error {
	wantCluster, wantNode := RegionIdentity(clusterID, node)
	sb := s.region.Superblock()
	switch {
	case sb.ClusterUUID.IsZero() && sb.NodeID == 0:
		if err := s.region.SetIdentity(wantCluster, wantNode); err != nil {
			return fmt.Errorf("pmem region: record identity: %w", err)
		}
		s.log.Info("pmem region bound to this node", "cluster", clusterID, "node", node)
		return nil
	case sb.ClusterUUID != wantCluster || sb.NodeID != wantNode:
		return fmt.Errorf("%w: the pmem region belongs to another cluster or node (cluster %s, node %#x; this is cluster %s node %s): point --pmem at this node's own region, or at a new path to create one",
			pmem.ErrWrongCluster, sb.ClusterUUID, sb.NodeID, clusterID, node)
	}
	return nil
}

// RegionIdentity maps the cluster's and node's names to the identity a
// pmem superblock records: a hash of each, fixed forever since regions
// store it.
func RegionIdentity(clusterID string, node cluster.NodeID) (pmem.UUID, uint64) {
	sum := sha256.Sum256([]byte(clusterID))
	var u pmem.UUID
	copy(u[:], sum[:16])
	h := fnv.New64a()
	h.Write([]byte(node))
	return u, h.Sum64()
}

// Serve waits until n knows its cluster, binds the region to it, opens the
// logs and starts the services; from then on connections are served. It
// returns once the services run, or with the error that prevents them
// (a region of another cluster or node, a damaged log), or when ctx ends.
func (s *Storage) Serve(ctx context.Context, n *cluster.Node) error {
	s.SetToken(n.Token())
	var epoch uint64
	for {
		m := n.Map()
		if m != nil && m.ClusterID != "" {
			if err := s.Bind(m.ClusterID, n.ID()); err != nil {
				return err
			}
			break
		}
		if m != nil {
			epoch = m.Epoch
		}
		if _, err := n.Watch(ctx, epoch); err != nil {
			return ctx.Err()
		}
	}
	// The token may have been learnt while waiting (a joining node).
	s.SetToken(n.Token())
	store, err := plog.Open(s.region, plog.Options{Logger: s.log})
	if err != nil {
		return fmt.Errorf("node logs: %w", err)
	}
	svc, err := startServices(ctx, s, n, store)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		svc.close()
		return ErrClosed
	}
	s.services = svc
	s.log.Info("node serving", "node", n.ID(), "rdma", s.RDMAAddr(), "incarnation", fmt.Sprintf("%#x", s.incarnation))
	return nil
}

func (s *Storage) running() *services {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.services
}

// acceptLoop hands each connection request to the service its Hello names.
func (s *Storage) acceptLoop() {
	defer s.wg.Done()
	for {
		req, err := s.ln.Next(s.ctx)
		if err != nil {
			return
		}
		// Each handshake runs on its own goroutine, so that a peer that
		// stalls in one does not hold up the others.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.route(req)
		}()
	}
}

func (s *Storage) route(req *rdma.ConnRequest) {
	h, err := dataplane.DecodeHello(req.PrivateData)
	if err == nil {
		err = h.Authorize(s.clusterToken())
	}
	svc := s.running()
	if err == nil && svc == nil {
		err = ErrStarting
	}
	if err != nil {
		s.log.Warn("refusing RDMA connection", "peer", req.Remote.Addr, "err", err)
		req.Reject(err.Error())
		return
	}
	switch h.Purpose {
	case dataplane.PurposeData:
		err = s.export.Accept(s.ctx, req, h)
	case dataplane.PurposeRPC:
		err = svc.acceptRPC(s.ctx, req, h)
	}
	if err != nil {
		s.log.Debug("connection not established", "peer", req.Remote.Addr, "purpose", h.Purpose, "err", err)
	}
}

// Close stops serving and releases everything, services first.
func (s *Storage) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	svc := s.services
	s.services = nil
	s.mu.Unlock()
	s.cancel()
	if s.ln != nil {
		s.ln.Close()
	}
	var errs []error
	if svc != nil {
		errs = append(errs, svc.close())
	}
	s.wg.Wait()
	errs = append(errs, s.release())
	return errors.Join(errs...)
}

func (s *Storage) release() error {
	var errs []error
	if s.export != nil {
		errs = append(errs, s.export.Close())
	}
	if s.pd != nil {
		errs = append(errs, s.pd.Close())
	}
	if s.dev != nil {
		errs = append(errs, s.dev.Close())
	}
	if s.region != nil {
		errs = append(errs, s.region.Close())
	}
	return errors.Join(errs...)
}
