package cluster

import (
	"context"
	"errors"
	"testing"
	"time"
)

// silentFuture is a raft future raft never answers, as an apply or a
// configuration change accepted just before raft shuts down
// (hashicorp/raft#498).
type silentFuture struct{ never chan struct{} }

func (f silentFuture) Error() error { <-f.never; return nil }

type answeredFuture struct{ err error }

func (f answeredFuture) Error() error { return f.err }

// TestAwaitEndsWhenTheNodeCloses: a node's wait for a raft future ends
// with ErrClosed once the node closes, even if raft never answers; a
// crash of the leader during a membership change left shutdown waiting
// for its leader loop for 14 minutes (TestPinPartitionWaitsForALeader in
// CI). An answered future gives its answer.
func TestAwaitEndsWhenTheNodeCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{ctx: ctx, cancel: cancel}
	boom := errors.New("boom")
	if err := n.await(answeredFuture{boom}); !errors.Is(err, boom) {
		t.Fatalf("answered future: %v, want %v", err, boom)
	}
	f := silentFuture{never: make(chan struct{})}
	defer close(f.never)
	got := make(chan error, 1)
	go func() { got <- n.await(f) }()
	select {
	case err := <-got:
		t.Fatalf("await returned %v before the node closed", err)
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-got:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("await after close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("await still waits 10s after the node closed")
	}
}
