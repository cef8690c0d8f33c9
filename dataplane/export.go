package dataplane

import (
	"context"
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
	// ErrNoSession means a request named a data session the node does not
	// have (closed, evicted, or of an earlier process of the node): the
	// client reconnects its data connection and asks again.
	ErrNoSession = errors.New("dataplane: no such data session")
	// ErrNotExposed means a span was asked for that is not (or no longer)
	// remotely accessible.
	ErrNotExposed = errors.New("dataplane: span not exposed")
	// ErrClosed means the export or engine was closed.
	ErrClosed = errors.New("dataplane: closed")
)

// ExportConfig describes what a node exports.
type ExportConfig struct {
	// Region is the node's persistent-memory region. Only the spans given
	// to Expose (the chunk service's data pools) are ever registered for
	// remote access; StartExport (legacy) registers all of it.
	Region *pmem.Region
	// Device is the RDMA device clients reach the node through.
	Device rdma.Device
	// Token returns the cluster token a client must present. It is a
	// function because a node learns the token when it joins, and
	// because it may be rotated (then call Revalidate).
	Token func() string
	// Incarnation is this node process's incarnation (random, non-zero),
	// told to every data client so it can tell a restarted node apart.
	// StartExport picks one when it is zero.
	Incarnation uint64
	// MaxConns bounds the data connections served at once (default 1024).
	MaxConns int
	Logger   *slog.Logger

	// ListenAddr is where StartExport listens (legacy; NewExport has no
	// listener: the node's accept loop calls Accept).
	ListenAddr string
}

// Export is the node side of client-active I/O: it accepts data
// connections (Accept) and gives each one a protection domain of its own
// in which the spans the chunk service exposes (its data pools) are
// registered lazily, one memory region per span, when the chunk service
// first hands that connection an extent in the span (RemoteKey). So:
//
//   - nothing but data pools is ever remotely accessible (no superblock,
//     redo log, bitmap, record or service log is in any memory region);
//   - an rkey works only on the connection it was issued for, because a
//     queue pair reaches only memory regions of its own protection domain;
//     closing a connection (the client leaving, Evict, Revalidate after a
//     token rotation, the node stopping) deregisters its regions, so every
//     rkey it was given fails at the responder from then on.
//
// The clients read and write the pools with one-sided operations that the
// RDMA provider executes; no code of the node runs on that path.
type Export struct {
	cfg ExportConfig
	log *slog.Logger
	cq  rdma.CQ

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// spansMu orders exposure against registration: RemoteKey holds it
	// shared while it registers, Withdraw exclusively while it
	// deregisters, so a withdrawn span is never registered again.
	spansMu sync.RWMutex
	spans   map[uint64]Span // by Off

	mu          sync.Mutex
	sessions    map[uint64]*session
	nextSession uint64
	closed      bool

	legacy *legacyExport
}

// Span is a range of the region, by byte offset, that may be exposed for
// remote access: a data pool.
type Span struct {
	Off, Len uint64
}

// End is one past the span's last byte.
func (s Span) End() uint64 { return s.Off + s.Len }

// RemoteKey is how one data session addresses one exposed span: the
// remote address of the span's first byte and the rkey, valid on that
// session's connection only.
type RemoteKey struct {
	Addr uint64
	RKey uint32
}

// session is one accepted data connection with its protection domain and
// the memory regions registered in it so far, by span offset.
type session struct {
	id    uint64
	hello Hello
	conn  *rdma.Conn
	pd    rdma.PD

	mu  sync.Mutex
	mrs map[uint64]rdma.MR
	// closed: no key is handed out any more. accepting: Accept is
	// still setting the connection up and releases the session itself
	// if it was closed meanwhile. released: its connection, regions and
	// protection domain are gone.
	closed, accepting, released bool
	// gone is closed once released.
	gone chan struct{}
}

// cqDepth bounds the completions of the export's queue pairs: one-sided
// requests produce none at the responder, so only errors and the flushes
// of a broken connection arrive, and they are drained as they come.
const cqDepth = 4096

// NewExport prepares a node's export. It registers nothing and listens on
// nothing: the node's accept loop hands it data connections (Accept) and
// the chunk service tells it what may be exposed (Expose, Withdraw).
func NewExport(cfg ExportConfig) (*Export, error) {
	if cfg.MaxConns == 0 {
		cfg.MaxConns = 1024
	}
	if cfg.Incarnation == 0 {
		return nil, fmt.Errorf("dataplane: export needs the node's incarnation")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	e := &Export{cfg: cfg, log: log, spans: make(map[uint64]Span), sessions: make(map[uint64]*session)}
	var err error
	if e.cq, err = cfg.Device.CreateCQ(cqDepth); err != nil {
		return nil, fmt.Errorf("dataplane: %w", err)
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.wg.Add(1)
	go e.drainCQ()
	return e, nil
}

// Incarnation is the node process's incarnation the export tells clients.
func (e *Export) Incarnation() uint64 { return e.cfg.Incarnation }

// Accept serves a data connection request whose Hello the caller decoded
// (purpose PurposeData): it checks the token, creates the connection's
// protection domain and queue pair, and answers with a Grant. It answers
// the request either way (accept or reject); the caller must not touch req
// afterwards. The connection lives until the client closes it or goes
// away, Evict or Revalidate closes it, or the export closes.
func (e *Export) Accept(ctx context.Context, req *rdma.ConnRequest, h Hello) error {
	err := h.Authorize(e.cfg.Token())
	if err == nil && h.Purpose != PurposeData {
		err = fmt.Errorf("%w: purpose %q sent to the data export", ErrBadHello, h.Purpose)
	}
	var pd rdma.PD
	if err == nil {
		if pd, err = e.cfg.Device.AllocPD(); err != nil {
			e.log.Warn("refusing data connection", "peer", req.Remote.Addr, "client", h.Client, "err", err)
			req.Reject("node out of RDMA resources")
			return fmt.Errorf("dataplane: %w", err)
		}
	}
	var s *session
	if err == nil {
		e.mu.Lock()
		switch {
		case e.closed:
			err = fmt.Errorf("%w: the node is shutting down", ErrClosed)
		case len(e.sessions) >= e.cfg.MaxConns:
			err = fmt.Errorf("dataplane: node serves %d data connections already; try again later", len(e.sessions))
		default:
			e.nextSession++
			// The protection domain is the session's from the start:
			// RemoteKey may register in it as soon as the client
			// knows the session, which can be before Accept returns.
			s = &session{id: e.nextSession, hello: h, pd: pd, mrs: make(map[uint64]rdma.MR), accepting: true, gone: make(chan struct{})}
			// Reserved, so MaxConns counts handshakes in progress too.
			e.sessions[s.id] = s
		}
		e.mu.Unlock()
	}
	if err != nil {
		if pd != nil {
			pd.Close()
		}
		e.log.Warn("refusing data connection", "peer", req.Remote.Addr, "client", h.Client, "err", err)
		req.Reject(err.Error())
		return err
	}
	fail := func(err error) error {
		s.mu.Lock()
		s.accepting, s.closed = false, true
		s.mu.Unlock()
		e.releaseSession(s)
		return err
	}
	grant := EncodeGrant(Grant{Session: s.id, Incarnation: e.cfg.Incarnation, BlockSize: e.cfg.Region.Geometry().BlockSize})
	conn, err := req.Accept(ctx, rdma.ConnParams{
		PD:          s.pd,
		QP:          rdma.QPConfig{SendCQ: e.cq, RecvCQ: e.cq, MaxSendWR: 1, MaxRecvWR: 1},
		Access:      rdma.AccessRemoteRead | rdma.AccessRemoteWrite,
		PrivateData: grant,
	})
	if err != nil {
		e.log.Warn("data connection failed", "peer", req.Remote.Addr, "err", err)
		return fail(err)
	}
	s.mu.Lock()
	s.conn, s.accepting = conn, false
	ended := s.closed
	s.mu.Unlock()
	if ended {
		// Evicted (or the export closed) during the handshake.
		e.releaseSession(s)
		return fmt.Errorf("%w: session %d ended during its handshake", ErrNoSession, s.id)
	}
	e.mu.Lock()
	closed := e.closed
	if !closed {
		e.wg.Add(1)
	}
	e.mu.Unlock()
	if closed {
		e.endSession(s)
		return fmt.Errorf("%w: the node is shutting down", ErrClosed)
	}
	e.log.Debug("data client connected", "client", h.Client, "client_id", h.ClientID, "session", s.id, "qpn", conn.QP.QPN())
	go func() {
		defer e.wg.Done()
		select {
		case <-conn.Done():
		case <-e.ctx.Done():
		}
		e.endSession(s)
	}()
	return nil
}

// endSession ends a session: no key is handed out for it any more, and
// its connection is closed and its memory regions deregistered (waiting
// for accesses in progress) before endSession returns. A session whose
// handshake is in progress is released by Accept as soon as the
// handshake ends; endSession waits for that.
func (e *Export) endSession(s *session) {
	s.mu.Lock()
	s.closed = true
	accepting := s.accepting
	s.mu.Unlock()
	if !accepting {
		e.releaseSession(s)
	}
	<-s.gone
}

// releaseSession closes a closed session's connection, deregisters its
// memory regions, closes its protection domain and forgets it, once.
func (e *Export) releaseSession(s *session) {
	s.mu.Lock()
	if s.released {
		s.mu.Unlock()
		return
	}
	s.released = true
	conn := s.conn
	mrs := s.mrs
	s.mrs = nil
	s.mu.Unlock()
	if conn != nil {
		conn.Close()
	}
	for _, mr := range mrs {
		mr.Dereg()
	}
	if s.pd != nil {
		s.pd.Close()
	}
	e.mu.Lock()
	delete(e.sessions, s.id)
	e.mu.Unlock()
	close(s.gone)
	e.log.Debug("data client disconnected", "client", s.hello.Client, "session", s.id)
}

// Expose makes span remotely accessible: data sessions may be given keys
// for it from now on. The span must be a data pool: bytes only clients'
// file data lives in.
func (e *Export) Expose(span Span) error {
	if span.Len == 0 || span.End() < span.Off || span.End() > uint64(len(e.cfg.Region.Bytes())) {
		return fmt.Errorf("%w: span [%#x,%#x) outside the region", ErrNotExposed, span.Off, span.End())
	}
	e.spansMu.Lock()
	defer e.spansMu.Unlock()
	e.spans[span.Off] = span
	return nil
}

// Withdraw ends remote access to the span starting at off: every session's
// memory region for it is deregistered before Withdraw returns, so the
// span's bytes may be given to anything afterwards.
func (e *Export) Withdraw(off uint64) {
	e.spansMu.Lock()
	defer e.spansMu.Unlock()
	delete(e.spans, off)
	e.mu.Lock()
	sessions := make([]*session, 0, len(e.sessions))
	for _, s := range e.sessions {
		sessions = append(sessions, s)
	}
	e.mu.Unlock()
	for _, s := range sessions {
		s.mu.Lock()
		if mr, ok := s.mrs[off]; ok {
			delete(s.mrs, off)
			mr.Dereg()
		}
		s.mu.Unlock()
	}
}

// RemoteKey returns how data session sid addresses the exposed span that
// starts at off, registering the span in the session's protection domain
// the first time. ErrNoSession if the session is gone.
func (e *Export) RemoteKey(sid uint64, off uint64) (RemoteKey, error) {
	e.spansMu.RLock()
	defer e.spansMu.RUnlock()
	span, ok := e.spans[off]
	if !ok {
		return RemoteKey{}, fmt.Errorf("%w: no span at %#x", ErrNotExposed, off)
	}
	e.mu.Lock()
	s := e.sessions[sid]
	e.mu.Unlock()
	if s == nil {
		return RemoteKey{}, fmt.Errorf("%w: session %d", ErrNoSession, sid)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return RemoteKey{}, fmt.Errorf("%w: session %d", ErrNoSession, sid)
	}
	mr := s.mrs[off]
	if mr == nil {
		buf := e.cfg.Region.Bytes()[span.Off:span.End():span.End()]
		var err error
		mr, err = s.pd.RegMR(buf, rdma.AccessLocalWrite|rdma.AccessRemoteRead|rdma.AccessRemoteWrite)
		if err != nil {
			return RemoteKey{}, fmt.Errorf("dataplane: register span [%#x,%#x) for session %d: %w", span.Off, span.End(), sid, err)
		}
		s.mrs[off] = mr
	}
	return RemoteKey{Addr: mr.Addr(), RKey: mr.RKey()}, nil
}

// SessionClient returns the ClientID of data session sid, or ErrNoSession.
func (e *Export) SessionClient(sid uint64) (uint64, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.sessions[sid]
	if s == nil {
		return 0, fmt.Errorf("%w: session %d", ErrNoSession, sid)
	}
	return s.hello.ClientID, nil
}

// Evict closes every data connection of client id, deregistering their
// memory regions: the client's rkeys fail from the moment Evict returns.
// The client may connect again (and get new keys) if it still holds the
// token. It returns how many connections it closed.
func (e *Export) Evict(clientID uint64) int {
	return e.closeWhere(func(s *session) bool { return s.hello.ClientID == clientID })
}

// Revalidate closes every data connection whose token is no longer the
// cluster's: call it after the token is rotated.
func (e *Export) Revalidate() int {
	token := e.cfg.Token()
	return e.closeWhere(func(s *session) bool { return s.hello.Authorize(token) != nil })
}

func (e *Export) closeWhere(match func(*session) bool) int {
	e.mu.Lock()
	var victims []*session
	for _, s := range e.sessions {
		if match(s) {
			victims = append(victims, s)
		}
	}
	e.mu.Unlock()
	n := 0
	for _, s := range victims {
		s.mu.Lock()
		live := !s.closed
		s.mu.Unlock()
		if live {
			e.endSession(s)
			n++
		}
	}
	return n
}

// Conns is how many data connections are established or being set up.
func (e *Export) Conns() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := len(e.sessions)
	if e.legacy != nil {
		n += e.legacy.numConns()
	}
	return n
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

// Close disconnects every client and deregisters every memory region. It
// waits for RDMA accesses in progress, so the region may be closed
// afterwards.
func (e *Export) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cancel()
	if e.legacy != nil {
		e.legacy.ln.Close()
	}
	e.wg.Wait()
	// Sessions whose handshake was in progress end through Accept's
	// context; any left are ended here.
	e.closeWhere(func(*session) bool { return true })
	var errs []error
	if e.legacy != nil {
		errs = append(errs, e.legacy.release())
	}
	errs = append(errs, e.cq.Close())
	return errors.Join(errs...)
}
