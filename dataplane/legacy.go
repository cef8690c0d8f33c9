package dataplane

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/octofs/octofs/pmem"
	"github.com/octofs/octofs/rdma"
)

// This file is the export as it was before the chunk service: the whole
// region registered as one memory region with every remote right, and a
// listener of its own. It stays until node wiring switches to NewExport
// with the node's single listener; then it is deleted.

// legacyExport is the whole-region registration and listener of
// StartExport.
type legacyExport struct {
	pd   rdma.PD
	mr   rdma.MR
	ln   *rdma.Listener
	desc Descriptor

	mu    sync.Mutex
	conns map[*rdma.Conn]struct{}
}

// Descriptor is what clients need to address a region exported by
// StartExport.
type Descriptor struct {
	RegionUUID pmem.UUID
	Base       uint64
	Length     uint64
	RKey       uint32
}

// StartExport registers the whole region with every remote right and
// accepts connections on cfg.ListenAddr from clients that present the
// cluster token.
//
// Deprecated: it exposes the region's metadata areas to every token
// holder. Nodes use NewExport with the node's listener routing data
// connections to Accept.
func StartExport(cfg ExportConfig) (e *Export, err error) {
	if cfg.Incarnation == 0 {
		cfg.Incarnation = RandomID()
	}
	e, err = NewExport(cfg)
	if err != nil {
		return nil, err
	}
	l := &legacyExport{conns: make(map[*rdma.Conn]struct{})}
	e.legacy = l
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	if l.pd, err = cfg.Device.AllocPD(); err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	buf := cfg.Region.Bytes()
	if l.mr, err = l.pd.RegMR(buf, rdma.AccessAll); err != nil {
		return nil, fmt.Errorf("dataplane: register the region: %w", err)
	}
	if l.ln, err = rdma.Listen(l.pd, cfg.ListenAddr); err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	l.desc = Descriptor{
		RegionUUID: cfg.Region.Superblock().RegionUUID,
		Base:       l.mr.Addr(),
		Length:     uint64(len(buf)),
		RKey:       l.mr.RKey(),
	}
	e.wg.Add(1)
	go e.legacyAcceptLoop()
	e.log.Info("exporting region over RDMA", "addr", e.Addr(), "device", cfg.Device.Name(),
		"region", l.desc.RegionUUID, "bytes", l.desc.Length)
	return e, nil
}

// Addr is the address StartExport listens on.
func (e *Export) Addr() string {
	if e.legacy == nil {
		return ""
	}
	return e.legacy.ln.Addr().String()
}

// Descriptor describes the region StartExport registered; the rkey in it
// is a capability. An export from NewExport has none (zero).
func (e *Export) Descriptor() Descriptor {
	if e.legacy == nil {
		return Descriptor{}
	}
	return e.legacy.desc
}

func (l *legacyExport) numConns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

func (e *Export) legacyAcceptLoop() {
	defer e.wg.Done()
	for {
		req, err := e.legacy.ln.Next(e.ctx)
		if err != nil {
			return
		}
		// The handshake runs on its own goroutine, so that a client
		// that stalls in it does not hold up the others.
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			e.legacyHandle(req)
		}()
	}
}

func (e *Export) legacyHandle(req *rdma.ConnRequest) {
	l := e.legacy
	h, err := DecodeHello(req.PrivateData)
	if err == nil {
		err = h.Authorize(e.cfg.Token())
	}
	l.mu.Lock()
	if err == nil && len(l.conns) >= e.cfg.MaxConns {
		err = fmt.Errorf("dataplane: node serves %d connections already; try again later", len(l.conns))
	}
	l.mu.Unlock()
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
	l.mu.Lock()
	l.conns[conn] = struct{}{}
	l.mu.Unlock()
	e.log.Debug("client connected", "client", h.Client, "peer", req.Remote.Addr, "qpn", conn.QP.QPN())
	select {
	case <-conn.Done():
	case <-e.ctx.Done():
	}
	l.mu.Lock()
	delete(l.conns, conn)
	l.mu.Unlock()
	conn.Close()
	e.log.Debug("client disconnected", "client", h.Client, "qpn", conn.QP.QPN())
}

func (l *legacyExport) release() error {
	var errs []error
	if l.mr != nil {
		errs = append(errs, l.mr.Dereg())
	}
	if l.pd != nil {
		errs = append(errs, l.pd.Close())
	}
	return errors.Join(errs...)
}

// DialExport connects to a region exported by StartExport with the
// cluster token, for one-sided access to the whole region through
// Descriptor's rkey. The caller closes the connection.
//
// Deprecated: goes with StartExport; data clients use DialData.
func DialExport(ctx context.Context, pd rdma.PD, cq rdma.CQ, addr, token, client string) (*rdma.Conn, error) {
	hello, err := EncodeHello(Hello{Purpose: PurposeData, Token: token, ClientID: RandomID(), Incarnation: RandomID(), Client: client})
	if err != nil {
		return nil, err
	}
	// A refusal comes back as rdma.ErrRejected with the node's reason.
	return rdma.Dial(ctx, pd, addr, rdma.ConnParams{QP: rdma.QPConfig{SendCQ: cq, RecvCQ: cq}, PrivateData: hello})
}
