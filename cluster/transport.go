package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// RaftLimits bound what the raft port accepts. Zero fields take the
// defaults in parentheses.
type RaftLimits struct {
	// Handshakes is how many connections may be in their TLS handshake at
	// once (64); more are closed at once.
	Handshakes int
	// HandshakeTimeout bounds a handshake (5s).
	HandshakeTimeout time.Duration
	// Conns is how many authenticated connections the node keeps (256);
	// beyond it the least recently used one is closed.
	Conns int
	// ConnsPerPeer is how many authenticated connections one member may
	// hold (16); beyond it its least recently used one is closed. Raft
	// itself uses a handful per peer.
	ConnsPerPeer int
	// IdleTimeout closes an authenticated connection on which nothing
	// arrived for this long (2m); the dialing side replaces a connection
	// idle for half of it before reusing it, so raft never sends on one
	// the other side closed.
	IdleTimeout time.Duration
	// WriteTimeout bounds one write to a peer (10s).
	WriteTimeout time.Duration
}

func (l *RaftLimits) setDefaults() {
	if l.Handshakes <= 0 {
		l.Handshakes = 64
	}
	if l.HandshakeTimeout <= 0 {
		l.HandshakeTimeout = 5 * time.Second
	}
	if l.Conns <= 0 {
		l.Conns = 256
	}
	if l.ConnsPerPeer <= 0 {
		l.ConnsPerPeer = 16
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = 2 * time.Minute
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 10 * time.Second
	}
}

// tlsStream is raft's stream layer: mutual TLS over TCP with the cluster's
// certificates, membership checks on both ends, and bounded resources.
//
// Connections are accepted by tlsStream's own loop; each handshake runs on
// its own goroutine under a deadline, so a peer that stalls in it holds up
// no one, and raft sees only authenticated members' connections. A
// connection costs raft two buffers (about 260 KiB) only after that.
type tlsStream struct {
	ln        net.Listener
	advertise net.Addr
	lim       RaftLimits
	log       *slog.Logger
	// member reports whether the node a verified certificate names may
	// talk raft with this node, and, for a dialed address, whether it is
	// the node the map places there.
	member func(id NodeID, dialed string) error

	pki atomic.Pointer[raftPKI]

	accepted chan net.Conn
	closed   chan struct{}
	closeMu  sync.Once

	mu          sync.Mutex
	handshaking int
	conns       map[*serverConn]struct{}

	stats streamStats
}

// streamStats count what the raft port refused, for metrics and tests.
type streamStats struct {
	refusedBusy      atomic.Uint64 // closed at accept: too many handshakes
	failedHandshakes atomic.Uint64 // TLS or membership failures
	evicted          atomic.Uint64 // closed for a newer connection (limits)
	idleClosed       atomic.Uint64 // closed after IdleTimeout
	redials          atomic.Uint64 // dialing side replaced an idle connection
}

var _ raft.StreamLayer = (*tlsStream)(nil)

func newTLSStream(ln net.Listener, advertise net.Addr, lim RaftLimits, log *slog.Logger, member func(NodeID, string) error) *tlsStream {
	lim.setDefaults()
	s := &tlsStream{
		ln: ln, advertise: advertise, lim: lim, log: log, member: member,
		accepted: make(chan net.Conn),
		closed:   make(chan struct{}),
		conns:    map[*serverConn]struct{}{},
	}
	go s.acceptLoop()
	return s
}

// setPKI installs the node's credentials; until then every connection is
// refused (a joining node has none until the leader admits it).
func (s *tlsStream) setPKI(p *raftPKI) { s.pki.Store(p) }

func (s *tlsStream) serverConfig(p *raftPKI) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.node},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.pool,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := peerID(cs)
			if err == nil {
				err = s.member(id, "")
			}
			return err
		},
	}
}

func (s *tlsStream) clientConfig(p *raftPKI, addr string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.node},
		RootCAs:      p.pool,
		ServerName:   raftServerName,
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := peerID(cs)
			if err == nil {
				err = s.member(id, addr)
			}
			return err
		},
	}
}

func (s *tlsStream) acceptLoop() {
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("raft accept failed", "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-s.closed:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		s.mu.Lock()
		busy := s.handshaking >= s.lim.Handshakes
		if !busy {
			s.handshaking++
		}
		s.mu.Unlock()
		if busy {
			s.stats.refusedBusy.Add(1)
			c.Close()
			continue
		}
		go s.handshake(c)
	}
}

func (s *tlsStream) handshake(c net.Conn) {
	done := func() {
		s.mu.Lock()
		s.handshaking--
		s.mu.Unlock()
	}
	p := s.pki.Load()
	if p == nil {
		done()
		s.stats.failedHandshakes.Add(1)
		c.Close()
		return
	}
	tc := tls.Server(c, s.serverConfig(p))
	ctx, cancel := context.WithTimeout(context.Background(), s.lim.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	done()
	if err != nil {
		s.stats.failedHandshakes.Add(1)
		s.log.Debug("refused raft connection", "remote", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	id, _ := peerID(tc.ConnectionState())
	sc := &serverConn{Conn: tc, s: s, id: id}
	sc.touch()
	s.register(sc)
	select {
	case s.accepted <- sc:
	case <-s.closed:
		sc.Close()
	}
}

// register adds an authenticated connection, closing the least recently
// used one of the same peer, or of all, when a limit is reached.
func (s *tlsStream) register(sc *serverConn) {
	var evict []*serverConn
	s.mu.Lock()
	var oldestPeer, oldestAll *serverConn
	peer := 0
	for c := range s.conns {
		if c.id == sc.id {
			peer++
			if oldestPeer == nil || c.lastUse.Load() < oldestPeer.lastUse.Load() {
				oldestPeer = c
			}
		}
		if oldestAll == nil || c.lastUse.Load() < oldestAll.lastUse.Load() {
			oldestAll = c
		}
	}
	switch {
	case peer >= s.lim.ConnsPerPeer:
		evict = append(evict, oldestPeer)
	case len(s.conns) >= s.lim.Conns:
		evict = append(evict, oldestAll)
	}
	for _, c := range evict {
		delete(s.conns, c)
	}
	s.conns[sc] = struct{}{}
	s.mu.Unlock()
	for _, c := range evict {
		s.stats.evicted.Add(1)
		s.log.Debug("closing a raft connection for a newer one", "peer", c.id)
		c.Close()
	}
}

func (s *tlsStream) unregister(sc *serverConn) {
	s.mu.Lock()
	delete(s.conns, sc)
	s.mu.Unlock()
}

// openConns returns how many authenticated and handshaking connections the
// node holds.
func (s *tlsStream) openConns() (authenticated, handshaking int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns), s.handshaking
}

// Accept hands raft the next authenticated connection.
func (s *tlsStream) Accept() (net.Conn, error) {
	select {
	case c := <-s.accepted:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes every connection the node accepted.
func (s *tlsStream) Close() error {
	var err error
	s.closeMu.Do(func() {
		close(s.closed)
		err = s.ln.Close()
		s.mu.Lock()
		conns := make([]*serverConn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return err
}

func (s *tlsStream) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.ln.Addr()
}

// Dial connects to a peer's raft port with mutual TLS.
func (s *tlsStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.dial(string(addr), timeout)
	if err != nil {
		return nil, err
	}
	cc := &clientConn{s: s, addr: string(addr), timeout: timeout, conn: c}
	cc.lastUse = time.Now()
	return cc, nil
}

func (s *tlsStream) dial(addr string, timeout time.Duration) (net.Conn, error) {
	p := s.pki.Load()
	if p == nil {
		return nil, fmt.Errorf("cluster: raft dial %s: this node has no raft credentials yet (it has not joined)", addr)
	}
	if timeout <= 0 {
		timeout = s.lim.HandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{}, Config: s.clientConfig(p, addr)}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster: raft dial %s: %w", addr, err)
	}
	return c, nil
}

// serverConn is an accepted, authenticated raft connection. Every read
// waits at most IdleTimeout and every write WriteTimeout, so a silent or
// stuck peer's connection is closed rather than held forever.
type serverConn struct {
	net.Conn
	s       *tlsStream
	id      NodeID
	lastUse atomic.Int64
	once    sync.Once
}

func (c *serverConn) touch() { c.lastUse.Store(time.Now().UnixNano()) }

func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.s.lim.IdleTimeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	c.touch()
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.s.stats.idleClosed.Add(1)
		c.s.log.Debug("closing idle raft connection", "peer", c.id, "idle", c.s.lim.IdleTimeout)
	}
	return n, err
}

func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.s.lim.WriteTimeout)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	c.touch()
	return n, err
}

func (c *serverConn) Close() error {
	var err error
	c.once.Do(func() {
		c.s.unregister(c)
		err = c.Conn.Close()
	})
	return err
}

// clientConn is a dialed raft connection that raft keeps in its pool.
// Before a write after more than half the idle timeout of silence, it
// replaces its TLS connection with a new one: the peer may have closed the
// old one as idle, and raft writes a request only at a message boundary
// with nothing left to read (raft reads a response only after sending a
// request), so the swap is invisible to it.
type clientConn struct {
	s       *tlsStream
	addr    string
	timeout time.Duration

	mu       sync.Mutex
	conn     net.Conn
	lastUse  time.Time
	reading  bool
	rdl, wdl time.Time
}

func (c *clientConn) current() net.Conn {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.conn
}

func (c *clientConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if !c.reading && time.Since(c.lastUse) > c.s.lim.IdleTimeout/2 {
		nc, err := c.s.dial(c.addr, c.timeout)
		if err != nil {
			c.mu.Unlock()
			return 0, err
		}
		c.conn.Close()
		c.conn = nc
		if !c.rdl.IsZero() {
			nc.SetReadDeadline(c.rdl)
		}
		if !c.wdl.IsZero() {
			nc.SetWriteDeadline(c.wdl)
		}
		c.s.stats.redials.Add(1)
	}
	conn := c.conn
	c.mu.Unlock()
	n, err := conn.Write(b)
	c.mu.Lock()
	c.lastUse = time.Now()
	c.mu.Unlock()
	return n, err
}

func (c *clientConn) Read(b []byte) (int, error) {
	c.mu.Lock()
	c.reading = true
	conn := c.conn
	c.mu.Unlock()
	n, err := conn.Read(b)
	c.mu.Lock()
	c.reading = false
	c.lastUse = time.Now()
	c.mu.Unlock()
	return n, err
}

func (c *clientConn) Close() error { return c.current().Close() }

func (c *clientConn) LocalAddr() net.Addr  { return c.current().LocalAddr() }
func (c *clientConn) RemoteAddr() net.Addr { return c.current().RemoteAddr() }

func (c *clientConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl, c.wdl = t, t
	conn := c.conn
	c.mu.Unlock()
	return conn.SetDeadline(t)
}

func (c *clientConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	conn := c.conn
	c.mu.Unlock()
	return conn.SetReadDeadline(t)
}

func (c *clientConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	conn := c.conn
	c.mu.Unlock()
	return conn.SetWriteDeadline(t)
}
