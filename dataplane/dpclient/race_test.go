package dpclient_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/dataplane/dptest"
	"github.com/octofs/octofs/dataplane/wire"
)

// heldMaps is a Caller that, once armed, holds the reply of the next
// OpMap until released.
type heldMaps struct {
	next dpclient.Caller

	mu      sync.Mutex
	armed   bool
	got     chan struct{} // closed when the held map's reply arrived
	release chan struct{}
}

func (h *heldMaps) Call(ctx context.Context, node cluster.NodeInfo, op uint16, req []byte) ([]byte, error) {
	rep, err := h.next.Call(ctx, node, op, req)
	h.mu.Lock()
	hold := h.armed && op == uint16(wire.OpMap)
	if hold {
		h.armed = false
	}
	h.mu.Unlock()
	if hold {
		close(h.got)
		<-h.release
	}
	return rep, err
}

// TestStaleMapReplyAfterAllocation: a read's map of a chunk, answered
// before a write of this client allocated blocks in it and arriving
// after the write, must not replace the write's extents in the cache:
// the next read would take the written range for a hole and read zeros
// (found by fsx through the mount: a page read ahead while mmap'd pages
// were written back).
func TestStaleMapReplyAfterAllocation(t *testing.T) {
	c := dptest.New(t, dptest.Options{})
	h := &heldMaps{got: make(chan struct{}), release: make(chan struct{})}
	e := c.NewEngine(func(cfg *dpclient.Config) {
		h.next = cfg.RPC
		cfg.RPC = h
	})
	ctx := testCtx(t)
	const ino = 1<<48 | 9
	h.mu.Lock()
	h.armed = true
	h.mu.Unlock()
	readDone := make(chan error, 1)
	go func() { readDone <- e.ReadAt(ctx, ino, make([]byte, 4096), 0) }()
	<-h.got // the map (a hole) is answered, not yet delivered
	data := pattern(9, 8192)
	require.NoError(t, e.WriteAt(ctx, ino, data, 0))
	close(h.release)
	require.NoError(t, <-readDone)
	got := make([]byte, len(data))
	require.NoError(t, e.ReadAt(ctx, ino, got, 0))
	require.True(t, bytes.Equal(data, got), "a read after the write sees it (got zeros: %v)", bytes.Equal(got, make([]byte, len(got))))
}
