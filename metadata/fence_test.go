package metadata_test

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// TestOwnershipAndFencing: a node refuses partitions it does not own with
// its epoch; requests from an older incarnation of a sender are refused
// once a newer one was seen, and the newer incarnation of a client ends
// the old one's session (its opens: an orphan it held is freed).
func TestOwnershipAndFencing(t *testing.T) {
	var pinMu sync.Mutex
	pinned := map[uint32]int{}
	c := metatest.Start(t, metatest.Config{Service: func(i int, cfg *metadata.Config) {
		cfg.Pin = func(ctx context.Context, p uint32) error {
			pinMu.Lock()
			pinned[p]++
			pinMu.Unlock()
			return nil
		}
	}})
	m := c.Maps.Current()
	// Partition 1 belongs to n2: ask n1.
	h := wire.Header{Epoch: m.Epoch, ClientID: 5, Incarnation: 100}
	resp, err := c.Transport.Call(bg, cluster.NodeInfo{ID: "n1"}, uint16(wire.OpGetAttr), 1,
		wire.EncodeRequest(wire.OpGetAttr, &h, &wire.GetAttrRequest{Ino: cluster.InodeNumber(1, 1)}))
	require.NoError(t, err)
	rh, err := wire.DecodeReply(resp, &wire.AttrReply{})
	require.NoError(t, err)
	require.Equal(t, wire.StatusWrongOwner, rh.Status)
	require.Equal(t, m.Epoch, rh.Epoch)

	// Root first: partition 0 was pinned before its log was created.
	cl := c.Client()
	a, err := cl.Create(bg, root, rootIno, "f", 0o644, 0, false, 0)
	require.NoError(t, err)
	pinMu.Lock()
	require.Equal(t, 1, pinned[0])
	require.Equal(t, 1, pinned[cluster.PartitionOf(a.Ino)])
	pinMu.Unlock()

	// A client incarnation opens the file, which is then unlinked.
	send(t, c, cluster.PartitionOf(a.Ino), wire.OpOpen, wire.Header{ClientID: 9, Incarnation: 1000, Seq: 1, Cred: root},
		&wire.OpenRequest{Ino: a.Ino, Flags: wire.OpenReadWrite}, &wire.AttrReply{})
	_, err = cl.WriteCommit(bg, root, a.Ino, 10, wire.Timespec{})
	require.NoError(t, err)
	require.NoError(t, cl.Unlink(bg, root, rootIno, "f", 0))
	o, err := cl.GetAttr(bg, root, a.Ino, a.Gen)
	require.NoError(t, err)
	require.Equal(t, uint32(0), o.Nlink, "kept open as an orphan")
	// Its newer incarnation arrives: the old session ends, the orphan goes.
	st := send(t, c, cluster.PartitionOf(a.Ino), wire.OpGetAttr, wire.Header{ClientID: 9, Incarnation: 2000, Cred: root},
		&wire.GetAttrRequest{Ino: rootIno}, &wire.AttrReply{}).Status
	require.Contains(t, []wire.Status{wire.StatusOK, wire.StatusWrongOwner}, st)
	require.Eventually(t, func() bool {
		_, err := cl.GetAttr(bg, root, a.Ino, a.Gen)
		return err == syscall.ESTALE
	}, 10*time.Second, time.Millisecond)
	// The old incarnation is fenced from now on.
	st = send(t, c, cluster.PartitionOf(a.Ino), wire.OpGetAttr, wire.Header{ClientID: 9, Incarnation: 1000, Cred: root},
		&wire.GetAttrRequest{Ino: rootIno}, &wire.AttrReply{}).Status
	require.Equal(t, wire.StatusStaleIncarnation, st)
}
