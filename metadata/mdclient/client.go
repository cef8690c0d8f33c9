package mdclient

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
)

// Caller sends one request to a node and returns the reply's payload. The
// client library implements it with rdma/rpc's Pool; tests call services
// in-process. reqID is the RPC's request id (the same on every retry of
// one operation). An error is a transport failure: the request may or may
// not have executed.
type Caller interface {
	Call(ctx context.Context, to cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error)
}

// Sentinel errors for failures that are not a server's errno.
var (
	// ErrTimeout: the operation's deadline passed before an answer; it
	// may or may not have executed.
	ErrTimeout = errors.New("mdclient: operation timed out (the cluster did not answer; check that the owning node runs)")
	// ErrUnavailable: no map, or the partition's owner cannot be reached.
	ErrUnavailable = errors.New("mdclient: namespace service unavailable")
	// ErrProtocol: an answer did not decode (version mismatch or a bug).
	ErrProtocol = errors.New("mdclient: protocol error")
)

// Config configures a Client. Maps and Caller are required.
type Config struct {
	Maps   cluster.MapSource
	Caller Caller
	// ClientID identifies this client to the servers (0: random). It
	// scopes at-most-once answers, opens and locks.
	ClientID uint64
	// Incarnation identifies this process (0: its start time in ns). Servers
	// compare incarnations numerically: a newer one fences older ones.
	Incarnation uint64
	// OpTimeout bounds an operation, retries included (default 30s).
	OpTimeout time.Duration
	// AttemptTimeout bounds one RPC attempt (default 5s).
	AttemptTimeout time.Duration
	// OnRestart is called when a node answers with an incarnation other
	// than the one it answered with before.
	OnRestart func(node cluster.NodeID, incarnation uint64)
	Logger    *slog.Logger
}

// Client issues namespace operations. Its methods are safe for concurrent
// use.
type Client struct {
	cfg Config
	log *slog.Logger

	mu       sync.Mutex
	nextSeq  uint64
	inflight map[uint64]struct{}
	incs     map[cluster.NodeID]uint64
}

// New returns a Client.
func New(cfg Config) (*Client, error) {
	if cfg.Maps == nil || cfg.Caller == nil {
		return nil, fmt.Errorf("mdclient: Config needs Maps and Caller")
	}
	if cfg.ClientID == 0 {
		cfg.ClientID = randomNonZero()
	}
	if cfg.Incarnation == 0 {
		cfg.Incarnation = uint64(time.Now().UnixNano())
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 30 * time.Second
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = 5 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{cfg: cfg, log: log, nextSeq: 1, inflight: map[uint64]struct{}{}, incs: map[cluster.NodeID]uint64{}}, nil
}

func randomNonZero() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint64(b[:]); v != 0 {
			return v
		}
	}
}

// ClientID is the id this client sends.
func (c *Client) ClientID() uint64 { return c.cfg.ClientID }

// Incarnation is this client's incarnation.
func (c *Client) Incarnation() uint64 { return c.cfg.Incarnation }

// Maps is the map source the client routes by.
func (c *Client) Maps() cluster.MapSource { return c.cfg.Maps }

func (c *Client) begin() (seq, low uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	seq = c.nextSeq
	c.nextSeq++
	c.inflight[seq] = struct{}{}
	low = seq
	for s := range c.inflight {
		low = min(low, s)
	}
	return seq, low
}

func (c *Client) end(seq uint64) {
	c.mu.Lock()
	delete(c.inflight, seq)
	c.mu.Unlock()
}

func (c *Client) lowSeq(seq uint64) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	low := seq
	for s := range c.inflight {
		low = min(low, s)
	}
	return low
}

func (c *Client) sawIncarnation(node cluster.NodeID, inc uint64) {
	if inc == 0 {
		return
	}
	c.mu.Lock()
	old, ok := c.incs[node]
	c.incs[node] = inc
	c.mu.Unlock()
	if ok && old != inc && c.cfg.OnRestart != nil {
		c.cfg.OnRestart(node, inc)
	}
}

// target says where a request goes: the owner of partition, or a fixed
// node.
type target struct {
	partition uint32
	node      cluster.NodeID // set: this node, whatever the map
}

func partitionOf(ino uint64) target { return target{partition: cluster.PartitionOf(ino)} }

// call runs one operation to completion: routing, retries with the same
// sequence, redirects (redirect, if not nil, updates the body with the
// inode the server named and returns where to go next), map refreshes.
func (c *Client) call(ctx context.Context, op wire.Op, cred wire.Cred, to target, body, reply wire.Body,
	redirect func(ino uint64) target) error {
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > c.cfg.OpTimeout {
		// (The client library's callers come with the bound
		// already: no second timer.)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.OpTimeout)
		defer cancel()
	}
	seq, _ := c.begin()
	defer c.end(seq)
	backoff := time.Millisecond
	var lastErr error
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return c.ctxErr(ctx, op, lastErr)
		}
		m := c.cfg.Maps.Current()
		if !m.Initialized() {
			if _, err := c.cfg.Maps.Watch(ctx, 0); err != nil {
				return c.ctxErr(ctx, op, fmt.Errorf("%w: no cluster map", ErrUnavailable))
			}
			continue
		}
		node, err := c.node(m, to)
		if err != nil {
			return err
		}
		h := wire.Header{Epoch: m.Epoch, ClientID: c.cfg.ClientID, Incarnation: c.cfg.Incarnation,
			LowSeq: c.lowSeq(seq), Cred: cred}
		if op.Mutating() {
			h.Seq = seq
		}
		payload := wire.EncodeRequest(op, &h, body)
		actx, acancel := context.WithTimeout(ctx, c.cfg.AttemptTimeout)
		resp, err := c.cfg.Caller.Call(actx, node, uint16(op), seq, payload)
		acancel()
		if err != nil {
			lastErr = fmt.Errorf("%w: %v at node %s: %w", ErrUnavailable, op, node.ID, err)
			c.log.Debug("namespace call failed; retrying", "op", op, "node", node.ID, "err", err)
			if !sleepCtx(ctx, backoff) {
				return c.ctxErr(ctx, op, lastErr)
			}
			backoff = min(2*backoff, 500*time.Millisecond)
			continue
		}
		rh, err := wire.DecodeReply(resp, reply)
		if err != nil {
			return fmt.Errorf("%w: %v from node %s: %w", ErrProtocol, op, node.ID, err)
		}
		c.sawIncarnation(node.ID, rh.Incarnation)
		switch rh.Status {
		case wire.StatusOK:
			return nil
		case wire.StatusWrongOwner:
			lastErr = fmt.Errorf("%w: node %s no longer owns partition %d (epoch %d)", ErrUnavailable, node.ID, to.partition, rh.Epoch)
			if rh.Epoch > m.Epoch {
				wctx, wcancel := context.WithTimeout(ctx, time.Second)
				_, _ = c.cfg.Maps.Watch(wctx, rh.Epoch-1)
				wcancel()
			} else if !sleepCtx(ctx, backoff) {
				return c.ctxErr(ctx, op, lastErr)
			}
			backoff = min(2*backoff, 500*time.Millisecond)
		case wire.StatusRedirect:
			if redirect == nil || rh.Ino == 0 || attempt > 64 {
				return fmt.Errorf("%w: unexpected redirect of %v to inode %#x", ErrProtocol, op, rh.Ino)
			}
			to = redirect(rh.Ino)
		case wire.StatusNotReady, wire.StatusLocked:
			lastErr = fmt.Errorf("%w: node %s: %v", ErrUnavailable, node.ID, rh.Status)
			if !sleepCtx(ctx, backoff) {
				return c.ctxErr(ctx, op, lastErr)
			}
			backoff = min(2*backoff, 200*time.Millisecond)
		default:
			if rh.Status.IsErrno() {
				return syscall.Errno(rh.Status)
			}
			return fmt.Errorf("%w: %v answered %v by node %s", ErrProtocol, op, rh.Status, node.ID)
		}
	}
}

func (c *Client) node(m *cluster.Map, to target) (cluster.NodeInfo, error) {
	if to.node != "" {
		n, ok := m.Node(to.node)
		if !ok {
			return cluster.NodeInfo{}, fmt.Errorf("%w: node %s is not in the map", ErrUnavailable, to.node)
		}
		return n, nil
	}
	n, err := m.OwnerOfPartition(to.partition)
	if err != nil {
		return cluster.NodeInfo{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return n, nil
}

func (c *Client) ctxErr(ctx context.Context, op wire.Op, last error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		if last != nil {
			return fmt.Errorf("%w: %v: %w", ErrTimeout, op, last)
		}
		return fmt.Errorf("%w: %v: %w", ErrTimeout, op, ctx.Err())
	}
	return fmt.Errorf("mdclient: %v: %w", op, ctx.Err())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
