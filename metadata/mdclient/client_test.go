package mdclient

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/wire"
)

// staticMaps is a MapSource whose map a test replaces.
type staticMaps struct {
	mu      sync.Mutex
	m       *cluster.Map
	changed chan struct{}
}

func newMaps(m *cluster.Map) *staticMaps { return &staticMaps{m: m, changed: make(chan struct{})} }

func (s *staticMaps) Current() *cluster.Map {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m
}

func (s *staticMaps) set(m *cluster.Map) {
	s.mu.Lock()
	s.m = m
	close(s.changed)
	s.changed = make(chan struct{})
	s.mu.Unlock()
}

func (s *staticMaps) Watch(ctx context.Context, since uint64) (*cluster.Map, error) {
	for {
		s.mu.Lock()
		m, ch := s.m, s.changed
		s.mu.Unlock()
		if m.Epoch > since {
			return m, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return m, ctx.Err()
		}
	}
}

// twoNodes: partitions alternate between n1 and n2.
func twoNodes(epoch uint64, swap bool) *cluster.Map {
	m := &cluster.Map{ClusterID: "c", Epoch: epoch,
		Nodes: []cluster.NodeInfo{{ID: "n1", State: cluster.StateUp}, {ID: "n2", State: cluster.StateUp}}}
	for p := range 8 {
		id := cluster.NodeID("n1")
		if (p%2 == 1) != swap {
			id = "n2"
		}
		m.Partitions = append(m.Partitions, id)
	}
	return m
}

type call struct {
	node  cluster.NodeID
	op    wire.Op
	reqID uint64
	h     wire.Header
	body  wire.Body
}

// scripted answers each call with the next function of its script.
type scripted struct {
	mu     sync.Mutex
	calls  []call
	answer func(n int, c call) ([]byte, error)
}

func (s *scripted) Call(ctx context.Context, to cluster.NodeInfo, op uint16, reqID uint64, payload []byte) ([]byte, error) {
	gotOp, h, body, err := wire.DecodeRequest(payload)
	if err != nil {
		return nil, err
	}
	if uint16(gotOp) != op {
		return nil, errors.New("op mismatch")
	}
	s.mu.Lock()
	c := call{node: to.ID, op: gotOp, reqID: reqID, h: h, body: body}
	s.calls = append(s.calls, c)
	n := len(s.calls) - 1
	s.mu.Unlock()
	return s.answer(n, c)
}

func reply(st wire.Status, epoch, ino uint64, body wire.Body) []byte {
	return wire.EncodeReply(wire.ReplyHeader{Status: st, Epoch: epoch, Ino: ino, Incarnation: 1}, body)
}

func TestRetriesAndRouting(t *testing.T) {
	dir := cluster.InodeNumber(2, 10)    // partition 2: n1 in the first map
	victim := cluster.InodeNumber(5, 11) // partition 5: n2
	attr := wire.Attr{Ino: 7, Mode: wire.ModeRegular | 0o644}
	tests := map[string]struct {
		run    func(c *Client) error
		answer func(n int, c call, maps *staticMaps) ([]byte, error)
		check  func(t *testing.T, calls []call)
	}{
		"transport errors retry with the same sequence": {
			run: func(c *Client) error {
				_, err := c.SetAttr(context.Background(), wire.Cred{UID: 5}, wire.SetAttrRequest{Ino: dir, Valid: wire.SetMode, Mode: 0o600})
				return err
			},
			answer: func(n int, c call, _ *staticMaps) ([]byte, error) {
				if n < 2 {
					return nil, errors.New("broken")
				}
				return reply(wire.StatusOK, 1, 0, &wire.AttrReply{Attr: attr}), nil
			},
			check: func(t *testing.T, calls []call) {
				require.Len(t, calls, 3)
				for _, c := range calls {
					require.Equal(t, calls[0].h.Seq, c.h.Seq)
					require.Equal(t, calls[0].reqID, c.reqID)
					require.NotZero(t, c.h.Seq)
					require.Equal(t, uint32(5), c.h.Cred.UID)
				}
			},
		},
		"wrong owner waits for the new map and goes to the new owner": {
			run: func(c *Client) error {
				_, err := c.GetAttr(context.Background(), wire.Cred{}, dir, 0)
				return err
			},
			answer: func(n int, c call, maps *staticMaps) ([]byte, error) {
				if c.node == "n1" {
					go maps.set(twoNodes(2, true))
					return reply(wire.StatusWrongOwner, 2, 0, nil), nil
				}
				return reply(wire.StatusOK, 2, 0, &wire.AttrReply{Attr: attr}), nil
			},
			check: func(t *testing.T, calls []call) {
				require.Len(t, calls, 2)
				require.Equal(t, cluster.NodeID("n1"), calls[0].node)
				require.Equal(t, cluster.NodeID("n2"), calls[1].node)
				require.Equal(t, uint64(0), calls[0].h.Seq, "getattr is not mutating")
				require.Equal(t, uint64(2), calls[1].h.Epoch)
			},
		},
		"unlink follows the redirect to the victim's owner": {
			run: func(c *Client) error { return c.Unlink(context.Background(), wire.Cred{}, dir, "x", 0) },
			answer: func(n int, c call, _ *staticMaps) ([]byte, error) {
				if n == 0 {
					return reply(wire.StatusRedirect, 1, victim, nil), nil
				}
				return reply(wire.StatusOK, 1, 0, &wire.Empty{}), nil
			},
			check: func(t *testing.T, calls []call) {
				require.Len(t, calls, 2)
				require.Equal(t, cluster.NodeID("n1"), calls[0].node)
				require.Equal(t, cluster.NodeID("n2"), calls[1].node)
				require.Equal(t, victim, calls[1].body.(*wire.UnlinkRequest).Ino)
				require.Equal(t, calls[0].h.Seq, calls[1].h.Seq)
			},
		},
		"errno passes through": {
			run: func(c *Client) error {
				_, err := c.Lookup(context.Background(), wire.Cred{}, dir, "nope")
				if err != syscall.ENOENT {
					return errors.New("want a bare ENOENT")
				}
				return nil
			},
			answer: func(n int, c call, _ *staticMaps) ([]byte, error) {
				return reply(wire.Status(syscall.ENOENT), 1, 0, nil), nil
			},
			check: func(t *testing.T, calls []call) { require.Len(t, calls, 1) },
		},
		"lookup without attributes asks the inode's owner": {
			run: func(c *Client) error {
				a, err := c.Lookup(context.Background(), wire.Cred{}, dir, "f")
				if err == nil && a.Ino != victim {
					return errors.New("wrong attributes")
				}
				return err
			},
			answer: func(n int, c call, _ *staticMaps) ([]byte, error) {
				if n == 0 {
					return reply(wire.StatusOK, 1, 0, &wire.LookupReply{Ino: victim, Type: wire.ModeRegular}), nil
				}
				return reply(wire.StatusOK, 1, 0, &wire.AttrReply{Attr: wire.Attr{Ino: victim}}), nil
			},
			check: func(t *testing.T, calls []call) {
				require.Len(t, calls, 2)
				require.Equal(t, wire.OpGetAttr, calls[1].op)
				require.Equal(t, cluster.NodeID("n2"), calls[1].node)
			},
		},
		"create goes to the new inode's partition": {
			run: func(c *Client) error {
				_, err := c.Create(context.Background(), wire.Cred{}, dir, "newfile", 0o644, 0, false, 0)
				return err
			},
			answer: func(n int, c call, _ *staticMaps) ([]byte, error) {
				return reply(wire.StatusOK, 1, 0, &wire.AttrReply{Attr: attr}), nil
			},
			check: func(t *testing.T, calls []call) {
				require.Len(t, calls, 1)
				p := cluster.PartitionForName(dir, "newfile", 8)
				want := cluster.NodeID("n1")
				if p%2 == 1 {
					want = "n2"
				}
				require.Equal(t, want, calls[0].node)
				require.Equal(t, uint32(wire.ModeRegular|0o644), calls[0].body.(*wire.MakeRequest).Mode)
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			maps := newMaps(twoNodes(1, false))
			s := &scripted{}
			s.answer = func(n int, c call) ([]byte, error) { return tc.answer(n, c, maps) }
			c, err := New(Config{Maps: maps, Caller: s, OpTimeout: 10 * time.Second})
			require.NoError(t, err)
			require.NoError(t, tc.run(c))
			tc.check(t, s.calls)
		})
	}
}

func TestTimeout(t *testing.T) {
	maps := newMaps(twoNodes(1, false))
	s := &scripted{answer: func(int, call) ([]byte, error) { return nil, errors.New("down") }}
	c, err := New(Config{Maps: maps, Caller: s, OpTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	_, err = c.GetAttr(context.Background(), wire.Cred{}, 1, 0)
	require.ErrorIs(t, err, ErrTimeout)
}

func TestLowSeq(t *testing.T) {
	maps := newMaps(twoNodes(1, false))
	release := make(chan struct{})
	s := &scripted{}
	s.answer = func(n int, c call) ([]byte, error) {
		if n == 0 {
			<-release
		}
		return reply(wire.StatusOK, 1, 0, &wire.AttrReply{}), nil
	}
	c, err := New(Config{Maps: maps, Caller: s})
	require.NoError(t, err)
	done := make(chan error)
	go func() {
		_, err := c.SetAttr(context.Background(), wire.Cred{}, wire.SetAttrRequest{Ino: 1})
		done <- err
	}()
	// Wait until the first call is in flight.
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.calls) == 1
	}, 5*time.Second, time.Millisecond)
	_, err = c.SetAttr(context.Background(), wire.Cred{}, wire.SetAttrRequest{Ino: 1})
	require.NoError(t, err)
	s.mu.Lock()
	firstSeq, second := s.calls[0].h.Seq, s.calls[1]
	s.mu.Unlock()
	require.Equal(t, firstSeq, second.h.LowSeq, "the first request is still in flight")
	require.Greater(t, second.h.Seq, firstSeq)
	close(release)
	require.NoError(t, <-done)
}
