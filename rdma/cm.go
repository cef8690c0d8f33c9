package rdma

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// This file is the connection manager: it creates an RC queue pair on each
// side, exchanges the two Endpoints over a TCP connection and moves both
// queue pairs to RTS, the way rdma_cm or perftest's out-of-band exchange
// does. The TCP connection carries only the messages of cm_wire.go; it
// stays open while the RC connection lives, so that each side learns of
// the other's end (Conn.Done). The Endpoints it carries include each queue
// pair's Secret, so only the two sides of the exchange can connect to the
// queue pairs it set up (on providers that use it).

// ConnParams describe the queue pair a connection creates.
type ConnParams struct {
	// QP sizes the queue pair and names its completion queues.
	QP QPConfig
	// Access lists the remote operations the peer may perform on this
	// side (default: remote read, write and atomic).
	Access Access
	// Timeout, RetryCount, RNRRetry and MinRNRTimer are the QP's
	// transport retry attributes (see QPAttr). Zero values pick defaults:
	// Timeout 17 (~0.54 s, so a peer that stops answering is declared
	// dead after ~4.3 s with 7 retries; a peer whose connection breaks
	// fails at once), RetryCount 7, RNRRetry 7 (forever), MinRNRTimer 12
	// (0.64 ms).
	Timeout     uint8
	RetryCount  uint8
	RNRRetry    uint8
	MinRNRTimer RNRTimer
	// PrivateData is handed to the peer with the request or the reply,
	// for authentication or the peer's own set-up (at most
	// MaxPrivateData bytes).
	PrivateData []byte
	// Setup, if set, runs once the new queue pair is in Init, before the
	// peer can send to it: the place to post receive buffers.
	Setup func(QP) error
	// PD, if set, is the protection domain ConnRequest.Accept creates the
	// queue pair in instead of the listener's (as rdma_cm takes a PD per
	// connection), so that a connection can be given memory regions no
	// other connection can name. Dial takes its PD as an argument and
	// ignores this field.
	PD PD
}

// Default transport attributes for connections made by Dial and Accept.
const (
	DefaultTimeout     = 17
	DefaultRetryCount  = 7
	DefaultRNRRetry    = 7
	DefaultMinRNRTimer = RNRTimer(12)
)

func (p *ConnParams) withDefaults() ConnParams {
	q := *p
	if q.Access == 0 {
		q.Access = AccessRemoteRead | AccessRemoteWrite | AccessRemoteAtomic
	}
	if q.Timeout == 0 {
		q.Timeout = DefaultTimeout
	}
	if q.RetryCount == 0 {
		q.RetryCount = DefaultRetryCount
	}
	if q.RNRRetry == 0 {
		q.RNRRetry = DefaultRNRRetry
	}
	if q.MinRNRTimer == 0 {
		q.MinRNRTimer = DefaultMinRNRTimer
	}
	return q
}

// Conn is an established RC connection. Its out-of-band TCP connection
// stays open for the connection's life, as rdma_cm's does, so that each
// side learns when the other closes or goes away: Done.
type Conn struct {
	QP QP
	// Remote is the peer queue pair's endpoint.
	Remote Endpoint
	// PrivateData is what the peer sent with its request or reply.
	PrivateData []byte

	ctrl net.Conn
	done chan struct{}
	once sync.Once
}

// Keepalive of the out-of-band connection: a peer whose host vanishes is
// noticed within about idle + count × interval.
const (
	cmKeepaliveIdle     = 10 * time.Second
	cmKeepaliveInterval = 5 * time.Second
	cmKeepaliveCount    = 3
)

func newConn(qp QP, remote Endpoint, private []byte, ctrl net.Conn) *Conn {
	c := &Conn{QP: qp, Remote: remote, PrivateData: private, ctrl: ctrl, done: make(chan struct{})}
	ctrl.SetDeadline(time.Time{})
	if tc, ok := ctrl.(*net.TCPConn); ok {
		tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: cmKeepaliveIdle, Interval: cmKeepaliveInterval, Count: cmKeepaliveCount})
	}
	go func() {
		// Nothing more is sent on the connection: any result of a
		// read means the peer closed, died, or Close was called.
		var b [1]byte
		ctrl.Read(b[:])
		c.once.Do(func() { close(c.done) })
	}()
	return c
}

// Done is closed when the peer closes its Conn or becomes unreachable, or
// Close is called. The queue pair is not destroyed by it: the owner
// decides, typically by calling Close.
func (c *Conn) Done() <-chan struct{} { return c.done }

// Close destroys the queue pair and tells the peer, whose Done closes.
func (c *Conn) Close() error {
	c.ctrl.Close()
	c.once.Do(func() { close(c.done) })
	return c.QP.Close()
}

// Dial connects to a Listener at addr: it creates a queue pair in pd,
// exchanges endpoints and returns once both sides are in RTS. The caller
// owns the returned QP.
func Dial(ctx context.Context, pd PD, addr string, p ConnParams) (*Conn, error) {
	p = p.withDefaults()
	if len(p.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data, at most %d", ErrInvalid, len(p.PrivateData), MaxPrivateData)
	}
	qp, err := pd.CreateQP(p.QP)
	if err != nil {
		return nil, err
	}
	conn, err := dial(ctx, qp, addr, p)
	if err != nil {
		qp.Close()
		return nil, err
	}
	return conn, nil
}

func dial(ctx context.Context, qp QP, addr string, p ConnParams) (*Conn, error) {
	if err := initQP(qp, p); err != nil {
		return nil, err
	}
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: connect to %s: %w", addr, err)
	}
	stop := closeOnDone(ctx, nc)
	defer stop()
	conn, err := dialExchange(ctx, nc, qp, addr, p)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return conn, nil
}

// dialExchange is the requester's side of the out-of-band exchange on nc.
func dialExchange(ctx context.Context, nc net.Conn, qp QP, addr string, p ConnParams) (*Conn, error) {
	if err := writeCMMsg(nc, &cmMsg{Kind: cmRequest, Endpoint: qp.Endpoint(), PrivateData: p.PrivateData}); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: connect to %s: %w", addr, err))
	}
	reply, err := readCMMsg(nc)
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: connect to %s: %w", addr, err))
	}
	switch reply.Kind {
	case cmReject:
		return nil, fmt.Errorf("%w by %s: %s", ErrRejected, addr, reply.PrivateData)
	case cmAccept:
	default:
		return nil, fmt.Errorf("%w: connect to %s: reply of kind %d", ErrProtocol, addr, reply.Kind)
	}
	if err := connectQP(qp, reply.Endpoint, p); err != nil {
		return nil, err
	}
	if err := writeCMMsg(nc, &cmMsg{Kind: cmReady}); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: connect to %s: %w", addr, err))
	}
	// The listener answers Ready with Ready once it is in RTS, so that
	// neither side sends to a queue pair that cannot receive yet.
	done, err := readCMMsg(nc)
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: connect to %s: %w", addr, err))
	}
	if done.Kind != cmReady {
		return nil, fmt.Errorf("%w: connect to %s: expected ready, got kind %d", ErrProtocol, addr, done.Kind)
	}
	return newConn(qp, reply.Endpoint, reply.PrivateData, nc), nil
}

// initQP moves a new queue pair to Init and runs the caller's Setup.
func initQP(qp QP, p ConnParams) error {
	// Port 0: the port the device was opened on.
	if err := qp.Modify(QPAttr{State: QPSInit, Access: p.Access}); err != nil {
		return err
	}
	if p.Setup != nil {
		return p.Setup(qp)
	}
	return nil
}

// connectQP moves an Init queue pair through RTR to RTS towards remote.
func connectQP(qp QP, remote Endpoint, p ConnParams) error {
	if err := qp.Modify(QPAttr{State: QPSRTR, Remote: remote, PathMTU: remote.MTU, MinRNRTimer: p.MinRNRTimer, MaxDestRdAtomic: 16}); err != nil {
		return err
	}
	return qp.Modify(QPAttr{State: QPSRTS, Timeout: p.Timeout, RetryCount: p.RetryCount, RNRRetry: p.RNRRetry, MaxRdAtomic: 16})
}

// Listener accepts RC connection requests on a TCP address.
type Listener struct {
	pd PD
	ln net.Listener
}

// Listen accepts connection requests on addr (host:port) for queue pairs
// in pd.
func Listen(pd PD, addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rdma: listen on %s: %w", addr, err)
	}
	return &Listener{pd: pd, ln: ln}, nil
}

// Addr is the address the listener accepts on.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Close stops accepting; established connections are unaffected.
func (l *Listener) Close() error { return l.ln.Close() }

// ConnRequest is a peer's request to connect, to be accepted or rejected.
type ConnRequest struct {
	pd          PD
	nc          net.Conn
	Remote      Endpoint
	PrivateData []byte
}

// Next waits for the next connection request. A malformed request is
// answered by closing its TCP connection and does not end Next.
func (l *Listener) Next(ctx context.Context) (*ConnRequest, error) {
	stop := closeOnDone(ctx, l.ln)
	defer stop()
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		// A peer that connects and says nothing must not hold the
		// listener: the request has a deadline.
		nc.SetDeadline(time.Now().Add(cmHandshakeTimeout))
		msg, err := readCMMsg(nc)
		if err != nil || msg.Kind != cmRequest {
			nc.Close()
			continue
		}
		return &ConnRequest{pd: l.pd, nc: nc, Remote: msg.Endpoint, PrivateData: msg.PrivateData}, nil
	}
}

// Accept accepts the next connection request with p, a shorthand for Next
// followed by ConnRequest.Accept.
func (l *Listener) Accept(ctx context.Context, p ConnParams) (*Conn, error) {
	for {
		req, err := l.Next(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := req.Accept(ctx, p)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A peer that went away during the handshake is its own
		// problem, not the listener's: wait for the next one.
	}
}

// cmHandshakeTimeout bounds each step of the out-of-band exchange.
const cmHandshakeTimeout = 10 * time.Second

// Accept creates a queue pair with p, connects it to the requester and
// returns once both sides are in RTS.
func (r *ConnRequest) Accept(ctx context.Context, p ConnParams) (conn *Conn, err error) {
	defer func() {
		if err != nil {
			r.nc.Close()
		}
	}()
	p = p.withDefaults()
	if len(p.PrivateData) > MaxPrivateData {
		return nil, fmt.Errorf("%w: %d bytes of private data, at most %d", ErrInvalid, len(p.PrivateData), MaxPrivateData)
	}
	stop := closeOnDone(ctx, r.nc)
	defer stop()
	pd := r.pd
	if p.PD != nil {
		pd = p.PD
	}
	qp, err := pd.CreateQP(p.QP)
	if err != nil {
		writeCMMsg(r.nc, &cmMsg{Kind: cmReject, PrivateData: []byte(err.Error())})
		return nil, err
	}
	conn, err = r.accept(ctx, qp, p)
	if err != nil {
		qp.Close()
		return nil, err
	}
	return conn, nil
}

func (r *ConnRequest) accept(ctx context.Context, qp QP, p ConnParams) (*Conn, error) {
	if err := initQP(qp, p); err != nil {
		writeCMMsg(r.nc, &cmMsg{Kind: cmReject, PrivateData: []byte(err.Error())})
		return nil, err
	}
	if err := connectQP(qp, r.Remote, p); err != nil {
		writeCMMsg(r.nc, &cmMsg{Kind: cmReject, PrivateData: []byte(err.Error())})
		return nil, err
	}
	if err := writeCMMsg(r.nc, &cmMsg{Kind: cmAccept, Endpoint: qp.Endpoint(), PrivateData: p.PrivateData}); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: accept: %w", err))
	}
	msg, err := readCMMsg(r.nc)
	if err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: accept: %w", err))
	}
	if msg.Kind != cmReady {
		return nil, fmt.Errorf("%w: accept: expected ready, got kind %d", ErrProtocol, msg.Kind)
	}
	if err := writeCMMsg(r.nc, &cmMsg{Kind: cmReady}); err != nil {
		return nil, ctxErr(ctx, fmt.Errorf("rdma: accept: %w", err))
	}
	return newConn(qp, r.Remote, r.PrivateData, r.nc), nil
}

// Reject refuses the request; reason reaches the requester's error.
func (r *ConnRequest) Reject(reason string) error {
	defer r.nc.Close()
	if len(reason) > MaxPrivateData {
		reason = reason[:MaxPrivateData]
	}
	return writeCMMsg(r.nc, &cmMsg{Kind: cmReject, PrivateData: []byte(reason)})
}

// closeOnDone closes c when ctx ends before stop is called, which unblocks
// any I/O on c.
func closeOnDone(ctx context.Context, c interface{ Close() error }) (stop func()) {
	if ctx.Done() == nil {
		return func() {}
	}
	s := context.AfterFunc(ctx, func() { c.Close() })
	return func() { s() }
}

// ctxErr prefers ctx's error over err when ctx has ended, since err is then
// only the symptom of closing the connection.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return cerr
	}
	if errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return err
}

// RandomPSN returns a random 24-bit initial packet sequence number, as
// verbs applications choose one.
func RandomPSN() uint32 { return rand.Uint32() & 0xffffff }
