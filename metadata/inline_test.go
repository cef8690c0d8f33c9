package metadata_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
	"github.com/octofs/octofs/rdma/rpc"
)

// TestInlineAttempt: a short read answers on the RPC worker, and gives
// up (rpc.ErrNotInline) instead of waiting: for a newer map than the
// node's, for a partition it has not loaded. The same requests served
// normally wait and answer.
func TestInlineAttempt(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	epoch := c.Maps.Current().Epoch
	owner := func(ino uint64) *metatest.Node { return c.Nodes[ownerIndex(c, ino)] }
	getattr := func(ino, epoch uint64) *rpc.Call {
		h := wire.Header{Epoch: epoch, ClientID: 7, Incarnation: 1}
		return &rpc.Call{Op: uint16(wire.OpGetAttr), Payload: wire.EncodeRequest(wire.OpGetAttr, &h, &wire.GetAttrRequest{Ino: ino})}
	}
	status := func(out []byte) wire.Status {
		rh, err := wire.DecodeReply(out, &wire.AttrReply{})
		require.NoError(t, err)
		return rh.Status
	}
	ctx := context.Background()
	root := owner(cluster.RootInode)

	// The first request loads the root's partition.
	require.Equal(t, wire.StatusOK, status(root.Svc.Handle(ctx, uint16(wire.OpGetAttr), 0, getattr(cluster.RootInode, epoch).Payload)))
	out, err := root.Svc.HandleInline(ctx, getattr(cluster.RootInode, epoch))
	require.NoError(t, err, "the root's getattr needs no wait")
	require.Equal(t, wire.StatusOK, status(out))

	_, err = root.Svc.HandleInline(ctx, getattr(cluster.RootInode, epoch+1))
	require.ErrorIs(t, err, rpc.ErrNotInline, "a newer map is waited for")

	// An inode in a partition no request has touched yet: its owner has
	// not loaded it.
	var ino uint64
	for p := uint32(0); p < 16; p++ {
		if p != cluster.PartitionOf(cluster.RootInode) {
			ino = cluster.InodeNumber(p, 99)
			break
		}
	}
	n := owner(ino)
	_, err = n.Svc.HandleInline(ctx, getattr(ino, epoch))
	require.ErrorIs(t, err, rpc.ErrNotInline, "loading a partition is waited for")
	out = n.Svc.Handle(ctx, uint16(wire.OpGetAttr), 0, getattr(ino, epoch).Payload)
	require.Equal(t, wire.Status(syscall.ENOENT), status(out))
}
