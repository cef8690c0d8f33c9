package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/octofs/octofs/rdma"
)

// Defaults of ServerConfig and ClientConfig.
const (
	DefaultSlots       = 64
	DefaultInlineSize  = 4096
	DefaultMaxMessage  = 1 << 20
	DefaultWorkers     = 64
	DefaultMaxHandlers = 4096
	DefaultMaxConns    = 1024
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Device creates the workers' completion queues.
	Device rdma.Device
	// PD is the protection domain of the node's rdma.Listener: the
	// connection requests handed to Accept create their queue pairs in
	// it, so the server registers its buffers there.
	PD rdma.PD
	// Workers is how many goroutines poll completion queues (one CQ
	// each; connections are spread over them). Default 64: a connection
	// alone on its CQ is served with no hand-off between goroutines (on
	// the soft provider its worker reads the connection's socket
	// itself), so a server keeps one per connection up to that many
	// connections; an idle worker costs a parked goroutine.
	Workers int
	// Slots is how many calls a client may have in flight on one
	// connection (default 64, at most MaxSlots). The client uses the
	// smaller of its own and this.
	Slots int
	// InlineSize is the size of a receive buffer, header included
	// (default 4096): requests up to InlineSize-HeaderSize bytes travel in
	// the SEND, larger ones are READ from the client's memory.
	InlineSize int
	// MaxMessage bounds request and reply payloads (default 1 MiB).
	MaxMessage int
	// MaxHandlers bounds the handlers running at once (default 4096); a
	// request beyond it is answered StatusBusy without running.
	MaxHandlers int
	// LargeBudget bounds the bytes of registered memory held at once
	// for messages larger than a receive buffer (default 64 × MaxMessage
	// or 256 MiB, whichever is smaller). A large request or reply beyond
	// it is answered StatusBusy.
	LargeBudget int64
	// MaxConns bounds the connections served at once (default 1024); it
	// also sizes the completion queues.
	MaxConns int
	Logger   *slog.Logger
}

func (cfg *ServerConfig) withDefaults() (ServerConfig, error) {
	c := *cfg
	if c.Device == nil || c.PD == nil {
		return c, fmt.Errorf("%w: a server needs a Device and the listener's PD", ErrConfig)
	}
	c.Workers = orDefault(c.Workers, DefaultWorkers)
	c.Slots = orDefault(c.Slots, DefaultSlots)
	c.InlineSize = orDefault(c.InlineSize, DefaultInlineSize)
	c.MaxMessage = orDefault(c.MaxMessage, DefaultMaxMessage)
	c.MaxHandlers = orDefault(c.MaxHandlers, DefaultMaxHandlers)
	c.MaxConns = orDefault(c.MaxConns, DefaultMaxConns)
	if c.LargeBudget == 0 {
		c.LargeBudget = min(64*int64(c.MaxMessage), 256<<20)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if err := checkSizes(c.Slots, c.InlineSize, c.MaxMessage); err != nil {
		return c, err
	}
	if c.Workers < 1 || c.MaxHandlers < 1 || c.MaxConns < 1 || c.LargeBudget < int64(classSize(largeClass(c.MaxMessage))) {
		return c, fmt.Errorf("%w: workers %d, max handlers %d, max conns %d, large budget %d (at least one large message)",
			ErrConfig, c.Workers, c.MaxHandlers, c.MaxConns, c.LargeBudget)
	}
	return c, nil
}

func checkSizes(slots, inline, maxMessage int) error {
	switch {
	case slots < 1 || slots > MaxSlots:
		return fmt.Errorf("%w: %d slots (1 to %d)", ErrConfig, slots, MaxSlots)
	case inline < minInline || inline > maxInlineSize:
		return fmt.Errorf("%w: inline size %d (%d to %d)", ErrConfig, inline, minInline, maxInlineSize)
	case maxMessage < 1 || maxMessage > maxWireMessage:
		return fmt.Errorf("%w: max message %d (1 to %d)", ErrConfig, maxMessage, maxWireMessage)
	}
	return nil
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// Peer is who is calling: an opaque value the acceptor gives Accept (for
// instance the node or client id it authenticated), handed to handlers.
type Peer any

// Call is one request as a handler sees it.
type Call struct {
	Op        uint16
	RequestID uint64
	// Payload is the request's payload. It is valid only until the
	// handler returns: it lies in a receive buffer that is reused then.
	Payload []byte
	// Peer is what the acceptor said about the connection's caller.
	Peer Peer
}

// Handler serves one op. It runs on a goroutine of its own; ctx ends when
// the connection breaks or the server closes, and a handler must then
// return promptly. The reply it returns may be retained by the server
// until it is sent; a handler must not modify it afterwards. An error
// becomes StatusHandlerError with the error's text (StatusBusy for one
// that wraps ErrBusy); the caller's request id lets the handler make a
// retried call execute at most once.
type Handler func(ctx context.Context, call *Call) ([]byte, error)

// Server serves calls on the connections handed to Accept.
type Server struct {
	cfg ServerConfig
	log *slog.Logger

	handlersMu sync.Mutex
	handlers   atomic.Pointer[map[uint16]registered]

	workers []*worker
	sem     chan struct{}
	bufs    *bufPool
	params  []byte
	perConn int // completion queue entries one connection can produce

	ctx    context.Context // ends when Close starts: connections and handlers stop
	cancel context.CancelFunc
	wctx   context.Context // ends when the workers are to stop
	wstop  context.CancelFunc

	closing atomic.Bool
	mu      sync.Mutex
	closed  bool
	conns   map[*serverConn]struct{}
	nextID  uint32
	connWG  sync.WaitGroup // connection watchers
	workWG  sync.WaitGroup // workers
	done    chan struct{}  // closed when Close has finished

	calls, busy, protocolErrors atomic.Uint64
}

// NewServer creates a server and starts its workers. Register handlers
// with Handle, hand it connections with Accept.
func NewServer(cfg ServerConfig) (*Server, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:   c,
		log:   c.Logger,
		sem:   make(chan struct{}, c.MaxHandlers),
		conns: make(map[*serverConn]struct{}),
		done:  make(chan struct{}),
		// The large-message pool keeps a quarter of its budget registered
		// between uses.
		bufs:   newBufPool(c.PD, rdma.AccessLocalWrite|rdma.AccessRemoteRead, c.LargeBudget, c.LargeBudget/4),
		params: serverParams{Slots: c.Slots, InlineSize: c.InlineSize, MaxMessage: c.MaxMessage}.marshal(),
	}
	empty := map[uint16]registered{}
	s.handlers.Store(&empty)
	s.perConn = s.recvsPerConn() + s.sendsPerConn()
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wctx, s.wstop = context.WithCancel(context.Background())
	connsPerWorker := (c.MaxConns + c.Workers - 1) / c.Workers
	depth := min(connsPerWorker*s.perConn, c.Device.Caps().MaxCQE)
	for i := range c.Workers {
		cq, err := c.Device.CreateCQ(depth)
		if err != nil {
			s.closeWorkers()
			return nil, fmt.Errorf("rpc: completion queue of %d entries: %w", depth, err)
		}
		s.workers = append(s.workers, &worker{s: s, idx: i, cq: cq, depth: depth, conns: make(map[uint32]*serverConn)})
	}
	for _, w := range s.workers {
		s.workWG.Add(1)
		go w.run()
	}
	return s, nil
}

// recvsPerConn is how many receives a connection keeps posted: one per
// slot for requests and one per slot for releases, so that a client that
// keeps to its slots never meets an empty receive queue.
func (s *Server) recvsPerConn() int { return 2 * s.cfg.Slots }

// sendsPerConn sizes a connection's send queue (sendQueueDepth).
func (s *Server) sendsPerConn() int { return sendQueueDepth(s.cfg.Slots) }

// sendQueueDepth sizes a send queue for slots calls in flight. A side
// has at most three sends per slot outstanding at once (the client: a
// request, a READ and a release; the server: a reply and a READ), plus
// the unsignaled ones verbs counts until a later signaled one completes.
// Twice that leaves room for acknowledgements a provider reads late; a
// full queue makes posts wait (postSendRetry).
func sendQueueDepth(slots int) int { return 2 * (3*slots + signalEvery) }

// serverRNRRetry is how often the server resends a reply that found no
// receive posted at the client before it closes the connection.
const serverRNRRetry = 6

// signalEvery: one send in this many is signaled, so that verbs providers
// reclaim send queue entries; the rest complete silently unless they fail.
const signalEvery = 16

// Handle registers fn for op, replacing any handler registered before; a
// nil fn removes op's. It may be called while the server runs.
func (s *Server) Handle(op uint16, fn Handler) { s.register(op, registered{fn: fn}) }

// HandleInline registers a handler for op that is first tried on the
// worker that received the request (try), instead of on a goroutine of
// its own: it saves the goroutine hand-off that dominates a short call's
// server time. try must be short and must never wait on another node, a
// client or a lock held across such a wait: while it runs, the worker
// serves none of its other connections' calls. If it would wait it
// returns ErrNotInline, having changed nothing, and fn serves the call on
// a goroutine as Handle's handlers do (a nil fn removes op's handler,
// whatever try is). Large requests (those READ from
// the client) go to fn directly. The worker posts the replies of a batch
// of requests together once it has run them all.
func (s *Server) HandleInline(op uint16, try, fn Handler) {
	s.register(op, registered{fn: fn, try: try})
}

// registered is an op's handler and its inline attempt (nil if none).
type registered struct {
	fn, try Handler
}

func (s *Server) register(op uint16, r registered) {
	s.handlersMu.Lock()
	defer s.handlersMu.Unlock()
	old := *s.handlers.Load()
	m := make(map[uint16]registered, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	if r.fn == nil {
		delete(m, op)
	} else {
		m[op] = r
	}
	s.handlers.Store(&m)
}

func (s *Server) handler(op uint16) registered { return (*s.handlers.Load())[op] }

// Accept serves the connection request req, which the caller has already
// authenticated: peer is what handlers will see as Call.Peer. It creates
// the queue pair on one of the server's completion queues, posts its
// receive buffers before the client can send, and returns once the
// connection is established (or refused: the request is then rejected
// with the reason, and the error returned).
func (s *Server) Accept(ctx context.Context, req *rdma.ConnRequest, peer Peer) error {
	s.mu.Lock()
	var refuse error
	switch {
	case s.closed:
		refuse = fmt.Errorf("%w: not accepting connections; try another node or later", ErrShuttingDown)
	case len(s.conns) >= s.cfg.MaxConns:
		refuse = fmt.Errorf("%w: the server has %d connections, its MaxConns; try later", ErrBusy, len(s.conns))
	}
	s.nextID++
	if s.nextID == 0 {
		s.nextID++
	}
	id := s.nextID
	s.mu.Unlock()
	var w *worker
	if refuse == nil {
		if w = s.reserve(); w == nil {
			refuse = fmt.Errorf("%w: no completion queue has room for another connection; try later", ErrBusy)
		}
	}
	if refuse != nil {
		req.Reject(refuse.Error())
		return refuse
	}
	c, err := newServerConn(s, w, id, peer)
	if err != nil {
		w.unreserve(s.perConn)
		req.Reject("rpc: " + err.Error())
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.freeMemory()
		w.unreserve(s.perConn)
		refuse = fmt.Errorf("%w: not accepting connections; try another node or later", ErrShuttingDown)
		req.Reject(refuse.Error())
		return refuse
	}
	s.conns[c] = struct{}{}
	s.connWG.Add(1)
	s.mu.Unlock()
	w.add(c)

	conn, err := req.Accept(ctx, rdma.ConnParams{
		QP: rdma.QPConfig{SendCQ: w.cq, RecvCQ: w.cq,
			MaxSendWR: s.sendsPerConn(), MaxRecvWR: s.recvsPerConn(), MaxSendSGE: 1, MaxRecvSGE: 1},
		// Clients READ large replies from the server's buffers; nothing
		// else may touch the server's memory.
		Access: rdma.AccessRemoteRead,
		// A client keeps a receive posted for every reply it can be
		// owed, so a reply that meets none is from a client that does
		// not receive: give up on it after a few tries (7 would retry
		// forever, at a pace the client's RNR timer sets).
		RNRRetry:    serverRNRRetry,
		PrivateData: s.params,
		Setup:       c.setup,
	})
	if err != nil {
		// The connection manager has closed the queue pair already.
		c.fail(err)
		go c.teardown()
		return fmt.Errorf("rpc: accept: %w", err)
	}
	c.conn = conn
	go c.watch()
	return nil
}

// reserve picks the worker with the most room for a connection's
// completions and reserves it, or returns nil if none has room.
func (s *Server) reserve() *worker {
	for range 2 {
		var best *worker
		bestFree := 0
		for _, w := range s.workers {
			w.mu.Lock()
			free := w.depth - w.reserved
			if w.broken {
				free = 0
			}
			w.mu.Unlock()
			if free >= s.perConn && free > bestFree {
				best, bestFree = w, free
			}
		}
		if best == nil {
			return nil
		}
		best.mu.Lock()
		if !best.broken && best.depth-best.reserved >= s.perConn {
			best.reserved += s.perConn
			best.mu.Unlock()
			return best
		}
		best.mu.Unlock()
	}
	return nil
}

// ServerStats are a server's counters.
type ServerStats struct {
	// Conns is the connections being served (including ones being torn
	// down).
	Conns int
	// Handlers is the handlers running.
	Handlers int
	// Calls counts requests answered; Busy those answered StatusBusy.
	Calls, Busy uint64
	// ProtocolErrors counts connections closed because the peer broke
	// the protocol.
	ProtocolErrors uint64
	// LargeBytes is the registered memory held for large messages.
	LargeBytes int64
}

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	n := len(s.conns)
	s.mu.Unlock()
	return ServerStats{Conns: n, Handlers: len(s.sem), Calls: s.calls.Load(), Busy: s.busy.Load(),
		ProtocolErrors: s.protocolErrors.Load(), LargeBytes: s.bufs.used()}
}

// Close stops the server: requests that arrive from now on are answered
// StatusShuttingDown, handlers' contexts end, every connection is closed
// (clients see ErrBroken), and Close returns once every handler has
// returned and every resource is released.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		<-s.done
		return nil
	}
	s.closed = true
	s.closing.Store(true)
	s.mu.Unlock()
	s.cancel()
	s.connWG.Wait()
	s.closeWorkers()
	s.bufs.close()
	close(s.done)
	return nil
}

func (s *Server) closeWorkers() {
	s.wstop()
	s.workWG.Wait()
	for _, w := range s.workers {
		w.cq.Close()
	}
}

// worker polls one completion queue shared by many connections.
type worker struct {
	s     *Server
	idx   int
	cq    rdma.CQ
	depth int

	// mu is held while the worker handles a batch of completions, so that
	// a connection removed under it is never in use by the worker.
	mu       sync.Mutex
	reserved int
	broken   bool
	conns    map[uint32]*serverConn
	// dirty are the connections with replies pending in this batch.
	dirty []*serverConn
}

func (w *worker) add(c *serverConn) {
	w.mu.Lock()
	w.conns[c.id] = c
	w.mu.Unlock()
}

// remove forgets c; when it returns the worker no longer touches c.
func (w *worker) remove(c *serverConn) {
	w.mu.Lock()
	delete(w.conns, c.id)
	w.reserved -= w.s.perConn
	w.mu.Unlock()
}

func (w *worker) unreserve(n int) {
	w.mu.Lock()
	w.reserved -= n
	w.mu.Unlock()
}

func (w *worker) run() {
	defer w.s.workWG.Done()
	wcs := make([]rdma.WorkCompletion, 64)
	for {
		n, err := w.cq.Wait(w.s.wctx, wcs)
		if err != nil {
			if w.s.wctx.Err() != nil {
				return
			}
			// An overrun (a provider that broke its accounting, since
			// connections reserve their entries) or a closed CQ: every
			// queue pair on it is in error. Fail its connections and
			// take no more.
			w.s.log.Error("rpc: completion queue failed; its connections are closed", "worker", w.idx, "err", err)
			w.mu.Lock()
			w.broken = true
			conns := make([]*serverConn, 0, len(w.conns))
			for _, c := range w.conns {
				conns = append(conns, c)
			}
			w.mu.Unlock()
			for _, c := range conns {
				c.fail(fmt.Errorf("%w: completion queue failed: %v", ErrBroken, err))
			}
			return
		}
		w.mu.Lock()
		for i := range wcs[:n] {
			wc := &wcs[i]
			connID, k, idx := splitWRID(wc.ID)
			c := w.conns[connID]
			if c == nil {
				continue // a connection torn down already
			}
			c.complete(wc, k, idx)
		}
		for _, c := range w.dirty {
			c.postPending()
		}
		clear(w.dirty)
		w.dirty = w.dirty[:0]
		w.mu.Unlock()
	}
}

// Work request ids: connection id (32 bits) | kind (8) | index (24).
const (
	wrRecv uint8 = 1 // a receive buffer; index: the buffer
	wrSend uint8 = 2 // a request, reply or release; index: the slot
	wrRead uint8 = 3 // an RDMA READ of a large message; index: the slot
)

func makeWRID(conn uint32, k uint8, idx int) uint64 {
	return uint64(conn)<<32 | uint64(k)<<24 | uint64(idx)&0xffffff
}

func splitWRID(id uint64) (conn uint32, k uint8, idx int) {
	return uint32(id >> 32), uint8(id >> 24), int(id & 0xffffff)
}

// errorMessage is the text of a status reply: err's, cut to fit the
// smallest receive buffer.
func errorMessage(err error) []byte {
	msg := err.Error()
	if len(msg) > maxStatusMessage {
		msg = msg[:maxStatusMessage]
	}
	return []byte(msg)
}
