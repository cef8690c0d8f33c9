package rpc

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func newTestPool(t *testing.T, td *testClient, clock *fakeClock) *Pool {
	t.Helper()
	cfg := PoolConfig{PD: td.pd, Client: ClientConfig{Device: td.dev, PrivateData: []byte("pool")}, IdleTimeout: time.Hour}
	if clock != nil {
		cfg.Client.Now = clock.now
	}
	p, err := NewPool(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPoolSharesOneConnectionPerAddress(t *testing.T) {
	a := newTestServer(t, ServerConfig{})
	b := newTestServer(t, ServerConfig{})
	p := newTestPool(t, newTestDevice(t), nil)
	const callers = 16
	clients := make(chan *Client, 2*callers)
	var wg sync.WaitGroup
	for i := range callers {
		for _, ts := range []*testServer{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, err := p.Call(ctxT(t), ts.addr, opPeer, uint64(i), nil)
				if err != nil || string(got) != "pool" {
					t.Errorf("call to %s: %q, %v", ts.addr, got, err)
				}
				c, err := p.Get(ctxT(t), ts.addr)
				if err != nil {
					t.Errorf("get %s: %v", ts.addr, err)
					return
				}
				clients <- c
			}()
		}
	}
	wg.Wait()
	close(clients)
	seen := map[string]*Client{}
	for c := range clients {
		if prev, ok := seen[c.Addr()]; ok {
			require.Same(t, prev, c, "two connections to %s", c.Addr())
		}
		seen[c.Addr()] = c
	}
	require.Len(t, seen, 2)
	require.Equal(t, 2, p.Len())
	require.Equal(t, 1, a.srv.Stats().Conns)
	require.Equal(t, 1, b.srv.Stats().Conns)
}

func TestPoolRedialsAfterBreak(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	td := newTestDevice(t)
	clock := &fakeClock{}
	p := newTestPool(t, td, clock)
	_, err := p.Call(ctxT(t), ts.addr, opNull, 1, nil)
	require.NoError(t, err)
	first, err := p.Get(ctxT(t), ts.addr)
	require.NoError(t, err)
	td.dev.DropConnections()
	// An idle client learns of the loss by itself: from its provider
	// reading the dropped link (the queue pair goes to the error state)
	// or from the connection manager, whichever comes first; either way
	// it fails and releases its queue pair.
	select {
	case <-first.Done():
	case <-time.After(testWait):
		t.Fatalf("an idle client did not notice its dropped connection within %v (queue pair %v)", testWait, first.conn.QP.State())
	}
	clock.advance(time.Second)
	got, err := p.Call(ctxT(t), ts.addr, opEcho, 2, []byte("again"))
	require.NoError(t, err)
	require.Equal(t, "again", string(got))
	second, err := p.Get(ctxT(t), ts.addr)
	require.NoError(t, err)
	require.NotSame(t, first, second)
	require.ErrorIs(t, first.Err(), ErrBroken)
}

func TestPoolDialFailureIsNotCached(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	p := newTestPool(t, newTestDevice(t), nil)
	_, err := p.Call(ctxT(t), "127.0.0.1:1", opNull, 1, nil)
	require.Error(t, err)
	require.Zero(t, p.Len(), "a failed dial leaves no entry")
	_, err = p.Call(ctxT(t), ts.addr, opNull, 1, nil)
	require.NoError(t, err)
}

func TestPoolClosesIdleConnections(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	clock := &fakeClock{}
	p := newTestPool(t, newTestDevice(t), clock)
	_, err := p.Call(ctxT(t), ts.addr, opNull, 1, nil)
	require.NoError(t, err)
	c, err := p.Get(ctxT(t), ts.addr)
	require.NoError(t, err)

	clock.advance(59 * time.Minute)
	require.Zero(t, p.CloseIdle(), "closed before its idle timeout")

	// A call in flight keeps the connection however long it takes.
	done := make(chan error, 1)
	go func() {
		_, err := p.Call(ctxT(t), ts.addr, opBlock, 2, nil)
		done <- err
	}()
	ts.waitStarted(t, 1)
	clock.advance(2 * time.Hour)
	require.Zero(t, p.CloseIdle(), "closed with a call in flight")
	close(ts.release)
	require.NoError(t, <-done)

	clock.advance(time.Hour)
	require.Equal(t, 1, p.CloseIdle())
	<-c.Done()
	require.ErrorIs(t, c.Err(), ErrClosed)
	require.Zero(t, p.Len())
	waitFor(t, "server drops the idle connection", func() bool { return ts.srv.Stats().Conns == 0 })
	// The next call dials again.
	_, err = p.Call(ctxT(t), ts.addr, opNull, 3, nil)
	require.NoError(t, err)
}

func TestPoolClose(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	p := newTestPool(t, newTestDevice(t), nil)
	done := make(chan error, 1)
	go func() {
		_, err := p.Call(ctxT(t), ts.addr, opBlock, 1, nil)
		done <- err
	}()
	ts.waitStarted(t, 1)
	require.NoError(t, p.Close())
	require.ErrorIs(t, <-done, ErrClosed)
	_, err := p.Call(ctxT(t), ts.addr, opNull, 2, nil)
	require.ErrorIs(t, err, ErrClosed)
}
