package metadata_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

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

// TestInlineChange: a create, open and unlink that stay in one partition
// of the node, and a listing, are served on the RPC worker, and a repeat
// gets the first answer; one that would wait gives up (rpc.ErrNotInline) before it
// changes anything: a new inode in another partition (another node must
// be asked), or a partition lock someone else holds. Served normally, the
// same requests succeed.
func TestInlineChange(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	ctx := context.Background()
	m := c.Maps.Current()
	d, err := cl.Mkdir(ctx, wire.Cred{}, cluster.RootInode, "d", 0o777)
	require.NoError(t, err)
	part := cluster.PartitionOf(d.Ino)
	node := c.Nodes[ownerIndex(c, d.Ino)]
	name := func(local bool) string {
		for i := 0; ; i++ {
			n := fmt.Sprintf("f%d", i)
			if (m.NewInodePartition(d.Ino, n, false) == part) == local {
				if _, err := cl.Lookup(ctx, wire.Cred{}, d.Ino, n); errors.Is(err, syscall.ENOENT) {
					return n
				}
			}
		}
	}
	seq := uint64(0)
	call := func(op wire.Op, body wire.Body) *rpc.Call {
		seq++
		h := wire.Header{Epoch: m.Epoch, ClientID: 7, Incarnation: 1, Seq: seq}
		return &rpc.Call{Op: uint16(op), Payload: wire.EncodeRequest(op, &h, body)}
	}
	status := func(out []byte, reply wire.Body) wire.Status {
		rh, err := wire.DecodeReply(out, reply)
		require.NoError(t, err)
		return rh.Status
	}
	exists := func(n string) bool {
		_, err := cl.Lookup(ctx, wire.Cred{}, d.Ino, n)
		if errors.Is(err, syscall.ENOENT) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	// One partition: served inline, and a repeat is answered alike.
	local := name(true)
	create := call(wire.OpCreate, &wire.MakeRequest{Parent: d.Ino, Name: local, Mode: wire.ModeRegular | 0o644})
	var made wire.MakeReply
	out, err := node.Svc.HandleInline(ctx, create)
	require.NoError(t, err, "a create in the directory's partition needs no other node")
	require.Equal(t, wire.StatusOK, status(out, &made))
	require.True(t, exists(local))
	out, err = node.Svc.HandleInline(ctx, create)
	require.NoError(t, err)
	require.Equal(t, wire.StatusOK, status(out, &wire.MakeReply{}), "a repeat gets the first answer, not EEXIST")

	out, err = node.Svc.HandleInline(ctx, call(wire.OpOpen, &wire.OpenRequest{Ino: made.Attr.Ino, Flags: wire.OpenReadWrite}))
	require.NoError(t, err)
	require.Equal(t, wire.StatusOK, status(out, &wire.AttrReply{}))

	// The partition's lock is held: give up, change nothing.
	other := name(true)
	release, ok := node.Svc.HoldPartition(ctx, part)
	require.True(t, ok)
	held := call(wire.OpCreate, &wire.MakeRequest{Parent: d.Ino, Name: other, Mode: wire.ModeRegular | 0o644})
	_, err = node.Svc.HandleInline(ctx, held)
	require.ErrorIs(t, err, rpc.ErrNotInline, "a held partition lock is waited for")
	unlink := call(wire.OpUnlink, &wire.UnlinkRequest{Parent: d.Ino, Name: local})
	_, err = node.Svc.HandleInline(ctx, unlink)
	require.ErrorIs(t, err, rpc.ErrNotInline)
	release()
	require.False(t, exists(other))
	require.True(t, exists(local))
	require.Equal(t, wire.StatusOK, status(node.Svc.Handle(ctx, held.Op, 0, held.Payload), &wire.MakeReply{}))
	require.True(t, exists(other))
	out, err = node.Svc.HandleInline(ctx, unlink)
	require.NoError(t, err, "the same unlink, once the lock is free")
	require.Equal(t, wire.StatusOK, status(out, &wire.DirReply{}))
	require.False(t, exists(local))

	// Another partition: another node takes part. Give up, change nothing.
	remote := name(false)
	cross := call(wire.OpCreate, &wire.MakeRequest{Parent: d.Ino, Name: remote, Mode: wire.ModeRegular | 0o644})
	owner := c.Nodes[ownerIndex(c, cluster.InodeNumber(m.NewInodePartition(d.Ino, remote, false), 1))]
	_, err = owner.Svc.HandleInline(ctx, cross)
	require.ErrorIs(t, err, rpc.ErrNotInline, "a create that needs another partition is not inline")
	require.False(t, exists(remote))
	require.Equal(t, wire.StatusOK, status(owner.Svc.Handle(ctx, cross.Op, 0, cross.Payload), &wire.MakeReply{}))
	require.True(t, exists(remote))

	// A listing is read-only unless it is due to update the directory's
	// atime (relatime: d changed since its last listing): then it gives
	// up before the update, which the normal run makes.
	list := call(wire.OpReadDir, &wire.ReadDirRequest{Ino: d.Ino})
	_, err = node.Svc.HandleInline(ctx, list)
	require.ErrorIs(t, err, rpc.ErrNotInline, "a listing that updates atime is not inline")
	var page wire.ReadDirReply
	require.Equal(t, wire.StatusOK, status(node.Svc.Handle(ctx, list.Op, 0, list.Payload), &page))
	require.Len(t, page.Entries, 2)
	out, err = node.Svc.HandleInline(ctx, list)
	require.NoError(t, err, "the next listing changes nothing")
	page = wire.ReadDirReply{}
	require.Equal(t, wire.StatusOK, status(out, &page))
	require.Len(t, page.Entries, 2)

	// A release is inline while it only ends an open; the last release
	// of an orphan, which frees it, and one that must mark or trim
	// blocks give up first, and run normally.
	relName := name(true)
	mk := call(wire.OpCreate, &wire.MakeRequest{Parent: d.Ino, Name: relName, Mode: wire.ModeRegular | 0o644})
	var rel wire.MakeReply
	require.Equal(t, wire.StatusOK, status(node.Svc.Handle(ctx, mk.Op, 0, mk.Payload), &rel))
	ino := rel.Attr.Ino
	opens := func() int {
		n, _ := node.Svc.Opens(ctx, ino)
		return n
	}
	open := func() {
		t.Helper()
		out, err := node.Svc.HandleInline(ctx, call(wire.OpOpen, &wire.OpenRequest{Ino: ino, Flags: wire.OpenReadOnly}))
		require.NoError(t, err)
		require.Equal(t, wire.StatusOK, status(out, &wire.AttrReply{}))
	}
	releaseRO := func() *rpc.Call {
		return call(wire.OpRelease, &wire.ReleaseRequest{Ino: ino, Flags: wire.OpenReadOnly})
	}
	open()
	open()
	require.Equal(t, 2, opens())
	out, err = node.Svc.HandleInline(ctx, releaseRO())
	require.NoError(t, err, "a release that only ends an open is inline")
	require.Equal(t, wire.StatusOK, status(out, &wire.Empty{}))
	require.Equal(t, 1, opens())
	alloc := call(wire.OpRelease, &wire.ReleaseRequest{Ino: ino, Flags: wire.OpenReadWrite | wire.ReleaseAllocated})
	_, err = node.Svc.HandleInline(ctx, alloc)
	require.ErrorIs(t, err, rpc.ErrNotInline, "marking blocks commits a record")
	require.Equal(t, 1, opens(), "a release that gave up changed nothing")
	rm := call(wire.OpUnlink, &wire.UnlinkRequest{Parent: d.Ino, Name: relName})
	require.Equal(t, wire.StatusOK, status(node.Svc.Handle(ctx, rm.Op, 0, rm.Payload), &wire.DirReply{}))
	last := releaseRO()
	_, err = node.Svc.HandleInline(ctx, last)
	require.ErrorIs(t, err, rpc.ErrNotInline, "the last release of an orphan frees it")
	require.Equal(t, 1, opens(), "a release that gave up changed nothing")
	require.Equal(t, wire.StatusOK, status(node.Svc.Handle(ctx, last.Op, 0, last.Payload), &wire.Empty{}))
	require.Eventually(t, func() bool { _, ok := node.Svc.Opens(ctx, ino); return !ok }, 10*time.Second, 10*time.Millisecond,
		"the orphan is freed after its last release")
}
