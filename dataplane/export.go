package dataplane

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
)

// Sentinel errors.
var (
	// ErrUnauthorized means a peer did not present the cluster's token.
	ErrUnauthorized = errors.New("dataplane: unauthorized")
	// ErrBadHello means a connection request's private data is malformed.
	ErrBadHello = errors.New("dataplane: malformed connection request")
)

// Hello is what a client sends with its RDMA connection request: the
// cluster token proves it may be given access to the region. It travels
// as JSON in the connection manager's private data.
type Hello struct {
	Version int    `json:"v"`
	Token   string `json:"token"`
	// Client names the caller, for the node's logs.
	Client string `json:"client,omitempty"`
}

// helloVersion is the Hello format this node speaks.
const helloVersion = 1

// EncodeHello returns h as connection private data.
func EncodeHello(h Hello) ([]byte, error) {
	h.Version = helloVersion
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(b) > rdma.MaxPrivateData {
		return nil, fmt.Errorf("%w: connection request of %d bytes", ErrBadHello, len(b))
	}
	return b, nil
}

// DecodeHello parses connection private data.
func DecodeHello(b []byte) (Hello, error) {
	var h Hello
	if err := json.Unmarshal(b, &h); err != nil {
		return Hello{}, fmt.Errorf("%w: %v", ErrBadHello, err)
	}
	if h.Version != helloVersion {
		return Hello{}, fmt.Errorf("%w: version %d, this node speaks %d (upgrade the older side)", ErrBadHello, h.Version, helloVersion)
	}
	return h, nil
}

// ExportConfig describes what a node exports.
type ExportConfig struct {
	// Region is the node's persistent-memory region; the whole mapping is
	// registered as one memory region.
	Region *pmem.Region
	// Device is the RDMA device clients reach the node through.
	Device rdma.Device
	// ListenAddr is where clients connect (host:port).
	ListenAddr string
	// Token returns the cluster token a client must present. It is a
	// function because a node learns the token when it joins.
	Token func() string
	// MaxConns bounds the connections served at once (default 1024).
	MaxConns int
	Logger   *slog.Logger
}

// Export serves a node's region over RDMA: it registers the region as a
// memory region and accepts RC connections from clients that present the
// cluster token. The clients then read and write the region with one-sided
// operations that the RDMA provider executes; no code of the node runs on
// that path. A connection lives until the client closes it or goes away.
type Export struct {
	cfg  ExportConfig
	log  *slog.Logger
	pd   rdma.PD
	mr   rdma.MR
	cq   rdma.CQ
	ln   *rdma.Listener
	desc Descriptor

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[*rdma.Conn]struct{}
}

// Descriptor is what clients need to address an exported region.
type Descriptor struct {
	RegionUUID pmem.UUID
	Base       uint64
	Length     uint64
	RKey       uint32
}

// cqDepth bounds the completions of the export's queue pairs: one-sided
// requests produce none at the responder, so only errors and the flushes
// of a broken connection arrive, and they are drained as they come.
const cqDepth = 4096

// StartExport registers the region and starts accepting connections.
func StartExport(cfg ExportConfig) (e *Export, err error) {
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 1024
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e = &Export{cfg: cfg, log: log, conns: make(map[*rdma.Conn]struct{})}
	started := e // the named result is nil once an error is returned
	defer func() {
		if err != nil {
			started.release()
		}
	}()
	if e.pd, err = cfg.Device.AllocPD(); err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	// One-sided access from clients needs every remote right: READ for
	// reads, WRITE for client-active writes, ATOMIC for locks.
	buf := cfg.Region.Bytes()
	if e.mr, err = e.pd.RegMR(buf, rdma.AccessAll); err != nil {
		return nil, fmt.Errorf("dataplane: register the region: %w", err)
	}
	if e.cq, err = cfg.Device.CreateCQ(cqDepth); err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	if e.ln, err = rdma.Listen(e.pd, cfg.ListenAddr); err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	e.desc = Descriptor{
		RegionUUID: cfg.Region.Superblock().RegionUUID,
		Base:       e.mr.Addr(),
		Length:     uint64(len(buf)),
		RKey:       e.mr.RKey(),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.wg.Add(2)
	go e.acceptLoop()
	go e.drainCQ()
	log.Info("exporting region over RDMA", "addr", e.Addr(), "device", cfg.Device.Name(),
		"region", e.desc.RegionUUID, "bytes", e.desc.Length)
	return e, nil
}

// Addr is the address clients connect to.
func (e *Export) Addr() string { return e.ln.Addr().String() }

// Descriptor describes the exported region; the rkey in it is a capability.
func (e *Export) Descriptor() Descriptor { return e.desc }

// Conns is how many clients are connected.
func (e *Export) Conns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.conns)
}

func (e *Export) acceptLoop() {
	defer e.wg.Done()
	for {
		req, err := e.ln.Next(e.ctx)
		if err != nil {
			return
		}
		// The handshake runs on its own goroutine, so that a client
		// that stalls in it does not hold up the others.
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.handle(req)
		}()
	}
}

func (e *Export) handle(req *rdma.ConnRequest) {
	h, err := DecodeHello(req.PrivateData)
	if err == nil {
		want := e.cfg.Token()
		if want == "" || subtle.ConstantTimeCompare([]byte(h.Token), []byte(want)) != 1 {
			err = fmt.Errorf("%w: wrong cluster token (use the token in the first node's data directory)", ErrUnauthorized)
		}
	}
	e.mu.Lock()
	if err == nil && len(e.conns) >= e.cfg.MaxConns {
		err = fmt.Errorf("dataplane: node serves %d connections already; try again later", len(e.conns))
	}
	e.mu.Unlock()
	if err != nil {
		e.log.Warn("refusing RDMA connection", "peer", req.Remote.Addr, "err", err)
		req.Reject(err.Error())
		return
	}
	conn, err := req.Accept(e.ctx, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 1, MaxRecvWR: 1}})
	if err != nil {
		e.log.Warn("RDMA connection failed", "peer", req.Remote.Addr, "err", err)
		return
	}
	e.mu.Lock()
	e.conns[conn] = struct{}{}
	e.mu.Unlock()
	e.log.Debug("client connected", "client", h.Client, "peer", req.Remote.Addr, "qpn", conn.QP.QPN())
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		select {
		case <-conn.Done():
		case <-e.ctx.Done():
		}
		e.mu.Lock()
		delete(e.conns, conn)
		e.mu.Unlock()
		conn.Close()
		e.log.Debug("client disconnected", "client", h.Client, "qpn", conn.QP.QPN())
	}()
}

// drainCQ empties the shared CQ, so that the errors of broken connections
// never overrun it.
func (e *Export) drainCQ() {
	defer e.wg.Done()
	wc := make([]rdma.WorkCompletion, 64)
	for {
		n, err := e.cq.Wait(e.ctx, wc)
		if err != nil {
			return
		}
		for i := range wc[:n] {
			if wc[i].Status != rdma.WCSuccess && wc[i].Status != rdma.WCWRFlushErr {
				e.log.Debug("export queue pair error", "qpn", wc[i].QPN, "status", wc[i].Status)
			}
		}
	}
}

// Close disconnects every client and deregisters the region. It waits for
// RDMA accesses in progress, so the region may be closed afterwards.
func (e *Export) Close() error {
	e.cancel()
	e.ln.Close()
	e.wg.Wait()
	return e.release()
}

func (e *Export) release() error {
	var errs []error
	if e.cq != nil {
		errs = append(errs, e.cq.Close())
	}
	if e.mr != nil {
		errs = append(errs, e.mr.Dereg())
	}
	if e.pd != nil {
		errs = append(errs, e.pd.Close())
	}
	return errors.Join(errs...)
}

// DialExport connects to a node's export with the cluster token, for
// one-sided access to its region. The caller closes the connection.
func DialExport(ctx context.Context, pd rdma.PD, cq rdma.CQ, addr, token, client string) (*rdma.Conn, error) {
	hello, err := EncodeHello(Hello{Token: token, Client: client})
	if err != nil {
		return nil, err
	}
	// A refusal comes back as rdma.ErrRejected with the node's reason.
	return rdma.Dial(ctx, pd, addr, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: cq, RecvCQ: cq}, PrivateData: hello})
}
