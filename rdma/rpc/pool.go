package rpc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/octofs/octofs/rdma"
)

// PoolConfig configures a Pool.
type PoolConfig struct {
	// PD is the protection domain of Client.Device the connections use.
	PD rdma.PD
	// Client configures every connection; its PrivateData is the hello
	// every node is dialed with.
	Client ClientConfig
	// IdleTimeout: a connection without calls for this long is closed
	// (default 2 minutes; negative: never).
	IdleTimeout time.Duration
	// DialTimeout bounds each dial (default 10 s). A dial serves every
	// caller waiting for its address, so it does not end with the
	// context of the caller that started it.
	DialTimeout time.Duration
}

// Default pool timeouts.
const (
	DefaultIdleTimeout = 2 * time.Minute
	DefaultDialTimeout = 10 * time.Second
)

// Pool keeps one shared connection per server address: dialed when first
// needed (concurrent callers wait for the same dial), dialed again after it
// breaks, closed when idle. It is safe for concurrent use.
type Pool struct {
	cfg  PoolConfig
	ctx  context.Context // ends with Close: stops dials and the janitor
	stop context.CancelFunc

	mu      sync.Mutex
	entries map[string]*poolEntry
	closed  bool
	wg      sync.WaitGroup
}

type poolEntry struct {
	ready  chan struct{} // closed when the dial has finished
	client *Client
	err    error
}

// NewPool creates a pool; connections are dialed on first use.
func NewPool(cfg PoolConfig) (*Pool, error) {
	c, err := cfg.Client.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.PD == nil {
		return nil, fmt.Errorf("%w: a pool needs the PD of its device", ErrConfig)
	}
	cfg.Client = c
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	p := &Pool{cfg: cfg, entries: make(map[string]*poolEntry)}
	p.ctx, p.stop = context.WithCancel(context.Background())
	if cfg.IdleTimeout > 0 {
		p.wg.Add(1)
		go p.janitor()
	}
	return p, nil
}

// Get returns the shared connection to addr, dialing it if there is none
// or the last one broke. The connection belongs to the pool: do not close
// it. A call on it may fail with ErrClosed (not sent) if the pool closes
// it as idle meanwhile; Pool.Call retries that case itself.
func (p *Pool) Get(ctx context.Context, addr string) (*Client, error) {
	// Two rounds: a connection found broken is replaced once; a fresh
	// dial's result is final.
	for range 2 {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, fmt.Errorf("%w: pool", ErrClosed)
		}
		e := p.entries[addr]
		if e != nil && e.unusable() {
			delete(p.entries, addr)
			e = nil
		}
		fresh := e == nil
		if fresh {
			e = &poolEntry{ready: make(chan struct{})}
			p.entries[addr] = e
			p.wg.Add(1)
			go p.dial(addr, e)
		}
		p.mu.Unlock()
		select {
		case <-e.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: dialing %s: %w", ErrTimeout, addr, context.Cause(ctx))
		}
		if e.err != nil {
			return nil, e.err
		}
		if fresh || !e.unusable() {
			return e.client, nil
		}
	}
	return nil, fmt.Errorf("%w: connection to %s broke as it was dialed", ErrBroken, addr)
}

// unusable reports whether the entry's dial finished without a working
// connection. It does not wait.
func (e *poolEntry) unusable() bool {
	select {
	case <-e.ready:
	default:
		return false
	}
	if e.err != nil {
		return true
	}
	select {
	case <-e.client.Done():
		return true
	default:
		return false
	}
}

func (p *Pool) dial(addr string, e *poolEntry) {
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.DialTimeout)
	defer cancel()
	c, err := Dial(ctx, p.cfg.PD, addr, p.cfg.Client)
	e.client, e.err = c, err
	p.mu.Lock()
	closed := p.closed
	if err != nil && p.entries[addr] == e {
		// The next Get dials again instead of repeating this failure.
		delete(p.entries, addr)
	}
	p.mu.Unlock()
	close(e.ready)
	if closed && c != nil {
		c.Close()
	}
}

// Call calls op on the server at addr over the shared connection. A call
// refused before it was sent because the connection had broken or was
// closed as idle is retried once on a fresh connection; a call that may
// have executed is not retried (retry it with the same request id).
func (p *Pool) Call(ctx context.Context, addr string, op uint16, requestID uint64, payload []byte) ([]byte, error) {
	var err error
	for range 2 {
		var c *Client
		if c, err = p.Get(ctx, addr); err != nil {
			return nil, err
		}
		var res []byte
		res, err = c.Call(ctx, op, requestID, payload)
		if err == nil || !wasNotSent(err) || !(errors.Is(err, ErrBroken) || errors.Is(err, ErrClosed)) {
			return res, err
		}
	}
	return nil, err
}

// CloseIdle closes the connections that have had no call in flight for
// IdleTimeout or longer, and returns how many it closed. The pool's
// janitor calls it every half IdleTimeout.
func (p *Pool) CloseIdle() int {
	if p.cfg.IdleTimeout < 0 {
		return 0
	}
	cutoff := p.cfg.Client.Now().Add(-p.cfg.IdleTimeout)
	var idle []*Client
	p.mu.Lock()
	for addr, e := range p.entries {
		select {
		case <-e.ready:
		default:
			continue
		}
		if e.err != nil {
			continue
		}
		if since, ok := e.client.idle(); ok && !since.After(cutoff) {
			delete(p.entries, addr)
			idle = append(idle, e.client)
		}
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.Close()
	}
	return len(idle)
}

func (p *Pool) janitor() {
	defer p.wg.Done()
	t := time.NewTicker(p.cfg.IdleTimeout / 2)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			p.CloseIdle()
		case <-p.ctx.Done():
			return
		}
	}
}

// Len is how many connections the pool holds (dialing ones included).
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.entries)
}

// Close closes every connection (their calls in flight fail with
// ErrClosed) and stops the pool; later calls fail with ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	entries := p.entries
	p.entries = nil
	p.mu.Unlock()
	p.stop()
	for _, e := range entries {
		<-e.ready
		if e.client != nil {
			e.client.Close()
		}
	}
	p.wg.Wait()
	return nil
}
