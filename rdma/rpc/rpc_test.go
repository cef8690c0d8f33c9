package rpc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCallPayloads(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{})
	inline := DefaultInlineSize - HeaderSize
	for _, tc := range []struct {
		name string
		size int
	}{
		{"empty", 0},
		{"one byte", 1},
		{"inline max", inline},
		{"inline max+1", inline + 1},
		{"8KiB+1", 8<<10 + 1},
		{"64KiB", 64 << 10},
		{"1MiB", 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := pattern(tc.size, 3)
			got, err := c.Call(ctxT(t), opEcho, 42, req)
			require.NoError(t, err)
			require.True(t, bytes.Equal(req, got), "echo of %d bytes came back as %d bytes, different", tc.size, len(got))
			got, err = c.Call(ctxT(t), opSized, 43, sizedReq(tc.size))
			require.NoError(t, err)
			require.True(t, bytes.Equal(pattern(tc.size, byte(tc.size)), got), "reply of %d bytes", tc.size)
		})
	}
	// The last large reply's release reaches the server after its call
	// returned.
	waitFor(t, "every large buffer released", func() bool { return ts.srv.Stats().LargeBytes == 0 })
}

func TestCallStatuses(t *testing.T) {
	ts := newTestServer(t, ServerConfig{MaxMessage: 64 << 10})
	c := dialTest(t, ts, ClientConfig{})
	for _, tc := range []struct {
		name    string
		op      uint16
		payload []byte
		want    error
		status  Status
	}{
		{"unknown op", 999, nil, ErrUnknownOp, StatusUnknownOp},
		{"handler error", opFail, nil, ErrHandler, StatusHandlerError},
		{"handler panic", opPanic, nil, ErrHandler, StatusHandlerError},
		{"handler busy", opBusy, nil, ErrBusy, StatusBusy},
		{"reply too large", opSized, sizedReq(64<<10 + 1), ErrTooLarge, StatusTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Call(ctxT(t), tc.op, 1, tc.payload)
			require.ErrorIs(t, err, tc.want)
			var se *StatusError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.status, se.Status)
			require.Equal(t, tc.op, se.Op)
		})
	}
	t.Run("handler error text", func(t *testing.T) {
		_, err := c.Call(ctxT(t), opFail, 1, nil)
		require.ErrorContains(t, err, string(errTestHandler))
	})
	t.Run("request too large for the server", func(t *testing.T) {
		// The client learned the server's limit when it connected.
		_, err := c.Call(ctxT(t), opEcho, 1, make([]byte, 64<<10+1))
		require.ErrorIs(t, err, ErrTooLarge)
		require.Equal(t, 64<<10, c.MaxMessage())
	})
	t.Run("still works", func(t *testing.T) {
		got, err := c.Call(ctxT(t), opEcho, 1, []byte("ok"))
		require.NoError(t, err)
		require.Equal(t, "ok", string(got))
	})
}

func TestPeerReachesHandler(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{PrivateData: []byte("node-7")})
	got, err := c.Call(ctxT(t), opPeer, 1, nil)
	require.NoError(t, err)
	require.Equal(t, "node-7", string(got))
}

// TestConcurrentCalls keeps every slot busy from more goroutines than
// slots, with a mix of sizes, and checks every reply against its call.
func TestConcurrentCalls(t *testing.T) {
	ts := newTestServer(t, ServerConfig{Slots: 16})
	c := dialTest(t, ts, ClientConfig{Slots: 64})
	require.Equal(t, 16, c.Slots(), "the server grants 16 slots")
	const goroutines, calls = 40, 50
	sizes := []int{0, 10, 1000, 5000, 70000}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				size := sizes[(g+i)%len(sizes)]
				req := pattern(size, byte(g*31+i))
				id := uint64(g)<<32 | uint64(i)
				got, err := c.Call(ctxT(t), opEcho, id, req)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d call %d: %w", g, i, err)
					return
				}
				if !bytes.Equal(req, got) {
					errs <- fmt.Errorf("goroutine %d call %d: reply of %d bytes does not match the request", g, i, len(got))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestLateReplyNeverReachesALaterCall times a call out on a one-slot
// connection, then makes more calls on the same slot while the first
// one's handler is still running: its late reply must be dropped, and no
// later call may see it.
func TestLateReplyNeverReachesALaterCall(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{Slots: 1})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, opBlock, 1, []byte("late"))
		done <- err
	}()
	ts.waitStarted(t, 1)
	cancel()
	err := <-done
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.Canceled)

	// The slot stays reserved until the late reply arrives, so the next
	// call waits for it instead of being answered with it.
	next := make(chan []byte, 1)
	go func() {
		got, err := c.Call(ctxT(t), opEcho, 2, []byte("fresh"))
		if err != nil {
			t.Errorf("call after the timeout: %v", err)
		}
		next <- got
	}()
	close(ts.release)
	require.Equal(t, "fresh", string(<-next))
	for i := range 20 {
		want := fmt.Sprintf("call %d", i)
		got, err := c.Call(ctxT(t), opEcho, uint64(10+i), []byte(want))
		require.NoError(t, err)
		require.Equal(t, want, string(got))
	}
}

// TestLateLargeReplyIsReleased: a large reply to a call that timed out is
// released without being read, so the server frees its buffer.
func TestLateLargeReplyIsReleased(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{Slots: 2})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Call(ctx, opBlock, 1, pattern(100<<10, 1))
		done <- err
	}()
	ts.waitStarted(t, 1)
	cancel()
	require.ErrorIs(t, <-done, ErrTimeout)
	close(ts.release)
	// Calls keep the client polling, which sees the late reply.
	waitFor(t, "the late large reply released", func() bool {
		if _, err := c.Call(ctxT(t), opNull, 2, nil); err != nil {
			t.Fatal(err)
		}
		return ts.srv.Stats().LargeBytes == 0
	})
}

// TestInlineHandlers: an inline handler answers on the worker, without a
// handler slot (it succeeds while MaxHandlers handlers run); one that
// declines (ErrNotInline) runs again on a goroutine, which takes a slot
// like any other (busy while they are all taken, answered once one is
// free).
func TestInlineHandlers(t *testing.T) {
	ts := newTestServer(t, ServerConfig{MaxHandlers: 2})
	c := dialTest(t, ts, ClientConfig{})
	out, err := c.Call(ctxT(t), opInline, 1, nil)
	require.NoError(t, err)
	require.Equal(t, "inline", string(out))
	out, err = c.Call(ctxT(t), opInline, 2, []byte("wait"))
	require.NoError(t, err)
	require.Equal(t, "goroutine", string(out))
	// The goroutine frees its handler slot after its reply is on its way.
	waitFor(t, "the declined call's handler slot freed", func() bool { return ts.srv.Stats().Handlers == 0 })

	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Call(ctxT(t), opBlock, uint64(10+i), nil); err != nil {
				t.Errorf("blocked call: %v", err)
			}
		}()
	}
	ts.waitStarted(t, 2)
	out, err = c.Call(ctxT(t), opInline, 3, nil)
	require.NoError(t, err, "an inline call needs no handler slot")
	require.Equal(t, "inline", string(out))
	_, err = c.Call(ctxT(t), opInline, 4, []byte("wait"))
	require.ErrorIs(t, err, ErrBusy, "a declined inline call needs a handler slot")
	close(ts.release)
	wg.Wait()
	waitFor(t, "the blocked calls' handler slots freed", func() bool { return ts.srv.Stats().Handlers == 0 })
	out, err = c.Call(ctxT(t), opInline, 5, []byte("wait"))
	require.NoError(t, err)
	require.Equal(t, "goroutine", string(out))
}

func TestHandlersBusy(t *testing.T) {
	ts := newTestServer(t, ServerConfig{MaxHandlers: 2})
	c := dialTest(t, ts, ClientConfig{})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Call(ctxT(t), opBlock, uint64(i), nil)
			if err != nil {
				t.Errorf("blocked call: %v", err)
			}
		}()
	}
	ts.waitStarted(t, 2)
	_, err := c.Call(ctxT(t), opNull, 9, nil)
	require.ErrorIs(t, err, ErrBusy)
	close(ts.release)
	wg.Wait()
	waitFor(t, "the blocked calls' handler slots freed", func() bool { return ts.srv.Stats().Handlers == 0 })
	_, err = c.Call(ctxT(t), opNull, 10, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, ts.srv.Stats().Busy)
}

func TestClientCloseFailsCallsInFlight(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Call(context.Background(), opBlock, uint64(i), nil)
			errs <- err
		}()
	}
	ts.waitStarted(t, n)
	require.NoError(t, c.Close())
	for range n {
		require.ErrorIs(t, <-errs, ErrClosed)
	}
	_, err := c.Call(ctxT(t), opNull, 1, nil)
	require.ErrorIs(t, err, ErrClosed)
	<-c.Done()
	// The server notices and releases the connection.
	waitFor(t, "server drops the closed connection", func() bool { return ts.srv.Stats().Conns == 0 })
}

func TestServerCloseFailsCallsInFlight(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{})
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Call(context.Background(), opBlock, uint64(i), nil)
			errs <- err
		}()
	}
	ts.waitStarted(t, n)
	// Handlers see their context end and return; Close waits for them.
	require.NoError(t, ts.srv.Close())
	for range n {
		require.ErrorIs(t, <-errs, ErrBroken)
	}
	<-c.Done()
	require.ErrorIs(t, c.Err(), ErrBroken)
	_, err := c.Call(ctxT(t), opNull, 1, nil)
	require.ErrorIs(t, err, ErrBroken)
	require.True(t, wasNotSent(err), "a call on a broken connection is refused before it is sent")
	st := ts.srv.Stats()
	require.Zero(t, st.Conns)
	require.Zero(t, st.Handlers)
	require.Zero(t, st.LargeBytes)
}

func TestLinkFailureFailsCallsInFlight(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	td := newTestDevice(t)
	c := td.dial(t, ts.addr, ClientConfig{})
	const n = 4
	errs := make(chan error, n)
	for i := range n {
		go func() {
			_, err := c.Call(context.Background(), opBlock, uint64(i), nil)
			errs <- err
		}()
	}
	ts.waitStarted(t, n)
	td.dev.DropConnections()
	for range n {
		require.ErrorIs(t, <-errs, ErrBroken)
	}
	close(ts.release)
	waitFor(t, "server drops the broken connection", func() bool { return ts.srv.Stats().Conns == 0 })
	require.Zero(t, ts.srv.Stats().Handlers)
}

func TestAcceptAfterCloseRejects(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	require.NoError(t, ts.srv.Close())
	td := newTestDevice(t)
	_, err := Dial(ctxT(t), td.pd, ts.addr, ClientConfig{Device: td.dev})
	require.Error(t, err)
	require.ErrorContains(t, err, "shutting down")
}

func TestConfigErrors(t *testing.T) {
	td := newTestDevice(t)
	for _, tc := range []struct {
		name string
		cfg  ClientConfig
	}{
		{"no device", ClientConfig{}},
		{"too many slots", ClientConfig{Device: td.dev, Slots: MaxSlots + 1}},
		{"inline too small", ClientConfig{Device: td.dev, InlineSize: 100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(ctxT(t), td.pd, "127.0.0.1:1", tc.cfg)
			require.ErrorIs(t, err, ErrConfig)
		})
	}
	_, err := NewServer(ServerConfig{})
	require.ErrorIs(t, err, ErrConfig)
	require.False(t, errors.Is(err, ErrBusy))
}

// TestFullSendQueueIsBackPressure runs null calls at full depth long
// enough that a provider's late acknowledgements fill a send queue: posts
// must then wait for room, not fail the connection.
func TestFullSendQueueIsBackPressure(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{})
	const goroutines, calls = 64, 300
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				if _, err := c.Call(ctxT(t), opNull, uint64(g*calls+i), nil); err != nil {
					t.Errorf("call %d of goroutine %d: %v", i, g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestCallWithEndedContextIsNotSent(t *testing.T) {
	ts := newTestServer(t, ServerConfig{})
	c := dialTest(t, ts, ClientConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := c.Call(ctx, opNull, 1, nil)
	require.ErrorIs(t, err, ErrTimeout)
	require.ErrorIs(t, err, context.Canceled)
	_, err = c.Call(ctxT(t), opNull, 2, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, ts.srv.Stats().Calls, "the call with an ended context reached the server")
}
