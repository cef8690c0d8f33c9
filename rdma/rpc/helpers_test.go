package rpc

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/rdma"
	"github.com/octofs/octofs/rdma/soft"
)

// testWait bounds every wait of these tests; a correct run takes a small
// fraction of it even under the race detector on a shared machine.
const testWait = 20 * time.Second

// Test ops.
const (
	opEcho  uint16 = 1 // replies with the request's payload
	opNull  uint16 = 2 // replies with nothing
	opFail  uint16 = 3 // returns an error
	opBlock uint16 = 4 // waits for release or ctx, then echoes
	opPeer  uint16 = 5 // replies with the peer's name
	opPanic uint16 = 6 // panics
	opSized uint16 = 7 // replies with as many bytes as the 4-byte payload says
	opBusy  uint16 = 8 // returns ErrBusy
	// opInline is tried on the worker (HandleInline) and replies
	// "inline"; with the payload "wait" the attempt gives up, and its
	// goroutine handler replies "goroutine".
	opInline uint16 = 9
)

// testServer is a Server behind a listener on a soft device of its own,
// with an acceptor that hands every request to the server with the
// request's private data as the peer (string).
type testServer struct {
	dev     *soft.Device
	pd      rdma.PD
	ln      *rdma.Listener
	srv     *Server
	addr    string
	release chan struct{} // closed to let opBlock handlers return
	started chan struct{} // a token per opBlock handler that started
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

func newTestServer(t testing.TB, cfg ServerConfig) *testServer {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cfg.Device, cfg.PD = dev, pd
	srv, err := NewServer(cfg)
	require.NoError(t, err)
	ln, err := rdma.Listen(pd, "127.0.0.1:0")
	require.NoError(t, err)
	ts := &testServer{dev: dev, pd: pd, ln: ln, srv: srv, addr: ln.Addr().String(),
		release: make(chan struct{}), started: make(chan struct{}, 4096)}
	ts.register()
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	ts.wg.Add(1)
	go func() {
		defer ts.wg.Done()
		for {
			req, err := ln.Next(ctx)
			if err != nil {
				return
			}
			ts.wg.Add(1)
			go func() {
				defer ts.wg.Done()
				srv.Accept(ctx, req, string(req.PrivateData))
			}()
		}
	}()
	t.Cleanup(ts.close)
	return ts
}

func (ts *testServer) register() {
	s := ts.srv
	s.Handle(opEcho, func(_ context.Context, c *Call) ([]byte, error) { return append([]byte(nil), c.Payload...), nil })
	s.Handle(opNull, func(context.Context, *Call) ([]byte, error) { return nil, nil })
	s.HandleInline(opInline, func(_ context.Context, c *Call) ([]byte, error) {
		if string(c.Payload) == "wait" {
			return nil, ErrNotInline
		}
		return []byte("inline"), nil
	}, func(context.Context, *Call) ([]byte, error) { return []byte("goroutine"), nil })
	s.Handle(opFail, func(context.Context, *Call) ([]byte, error) { return nil, errTestHandler })
	s.Handle(opBusy, func(context.Context, *Call) ([]byte, error) { return nil, ErrBusy })
	s.Handle(opPanic, func(context.Context, *Call) ([]byte, error) { panic("test panic") })
	s.Handle(opPeer, func(_ context.Context, c *Call) ([]byte, error) { return []byte(c.Peer.(string)), nil })
	s.Handle(opSized, func(_ context.Context, c *Call) ([]byte, error) {
		n := int(c.Payload[0])<<24 | int(c.Payload[1])<<16 | int(c.Payload[2])<<8 | int(c.Payload[3])
		return pattern(n, byte(n)), nil
	})
	s.Handle(opBlock, func(ctx context.Context, c *Call) ([]byte, error) {
		ts.started <- struct{}{}
		select {
		case <-ts.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return append([]byte(nil), c.Payload...), nil
	})
}

type testError string

func (e testError) Error() string { return string(e) }

const errTestHandler = testError("the test handler failed")

func (ts *testServer) close() {
	ts.cancel()
	ts.ln.Close()
	ts.wg.Wait()
	ts.srv.Close()
}

// waitStarted waits until n opBlock handlers have started.
func (ts *testServer) waitStarted(t testing.TB, n int) {
	t.Helper()
	timeout := time.After(testWait)
	for range n {
		select {
		case <-ts.started:
		case <-timeout:
			t.Fatalf("opBlock handlers did not start within %v", testWait)
		}
	}
}

// testClient is a client on a soft device of its own.
type testClient struct {
	dev *soft.Device
	pd  rdma.PD
}

func newTestDevice(t testing.TB) *testClient {
	t.Helper()
	dev, err := soft.Open(rdma.DeviceConfig{})
	require.NoError(t, err)
	t.Cleanup(func() { dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	return &testClient{dev: dev, pd: pd}
}

func (tc *testClient) dial(t testing.TB, addr string, cfg ClientConfig) *Client {
	t.Helper()
	cfg.Device = tc.dev
	if cfg.PrivateData == nil {
		cfg.PrivateData = []byte("test-client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	defer cancel()
	c, err := Dial(ctx, tc.pd, addr, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func dialTest(t testing.TB, ts *testServer, cfg ClientConfig) *Client {
	return newTestDevice(t).dial(t, ts.addr, cfg)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7) + byte(i>>8)
	}
	return b
}

func sizedReq(n int) []byte { return []byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)} }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testWait)
	t.Cleanup(cancel)
	return ctx
}

// waitFor waits, bounded, until cond holds, checking it every millisecond:
// for conditions (server counters) that nothing signals.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testWait)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, testWait)
		}
		<-tick.C
	}
}
