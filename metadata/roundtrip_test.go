package metadata_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// TestRoundTrips counts the messages each operation sends on a 3-node
// cluster, client to node and node to node (calls between partitions of
// one node stay in-process and are not counted), and pins them: they are
// the figures docs/metadata.md gives.
func TestRoundTrips(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	m := c.Maps.Current()
	owner := func(ino uint64) cluster.NodeID { return m.Partitions[cluster.PartitionOf(ino)] }
	// metatest's maps place files and directories alike (PlaceHashed), so
	// dir=true stands for both.
	require.Equal(t, cluster.PlaceHashed, m.Placement())
	newOwner := func(dir uint64, name string) cluster.NodeID {
		return m.Partitions[m.NewInodePartition(dir, name, true)]
	}
	// name returns a name in dir whose new inode lands on another node
	// (remote) or on the directory's node and partition (local).
	name := func(dir uint64, prefix string, remote bool) string {
		for i := range 10000 {
			n := fmt.Sprintf("%s%d", prefix, i)
			p := m.NewInodePartition(dir, n, true)
			if remote && newOwner(dir, n) != owner(dir) || !remote && p == cluster.PartitionOf(dir) {
				return n
			}
		}
		t.Fatal("no name found")
		return ""
	}
	d, err := cl.Mkdir(bg, root, rootIno, name(rootIno, "d", true), 0o777)
	require.NoError(t, err)
	e, err := cl.Mkdir(bg, root, rootIno, name(rootIno, "e", true), 0o777)
	require.NoError(t, err)
	var cross, local wire.Attr
	type row struct {
		op           string
		client, node int
		wantC, wantN int
	}
	var rows []row
	count := func(op string, wantC, wantN int, fn func()) {
		c.Transport.ResetCalls()
		fn()
		var cc, nc int
		for _, o := range wire.ClientOps {
			cc += c.Transport.Calls(o)
		}
		for _, o := range wire.PeerOps {
			nc += c.Transport.Calls(o)
		}
		rows = append(rows, row{op, cc, nc, wantC, wantN})
	}
	count("create, inode on another node", 1, 1, func() {
		cross, err = cl.Create(bg, root, d.Ino, name(d.Ino, "f", true), 0o644, 0, false, 0)
		require.NoError(t, err)
	})
	count("create, inode in the directory's partition", 1, 0, func() {
		local, err = cl.Create(bg, root, d.Ino, name(d.Ino, "g", false), 0o644, 0, false, 0)
		require.NoError(t, err)
	})
	count("mkdir, on another node", 1, 1, func() {
		_, err = cl.Mkdir(bg, root, d.Ino, name(d.Ino, "m", true), 0o755)
		require.NoError(t, err)
	})
	crossName := ""
	ents, _, err := cl.ReadDir(bg, root, d.Ino, 0, 0, 0)
	require.NoError(t, err)
	for _, x := range ents {
		if x.Ino == cross.Ino {
			crossName = x.Name
		}
	}
	count("lookup, inode on another node", 2, 0, func() {
		_, err = cl.Lookup(bg, root, d.Ino, crossName)
		require.NoError(t, err)
	})
	count("getattr", 1, 0, func() {
		_, err = cl.GetAttr(bg, root, cross.Ino, 0)
		require.NoError(t, err)
	})
	count("readdir page", 1, 0, func() {
		_, _, err = cl.ReadDir(bg, root, d.Ino, 0, 0, 0)
		require.NoError(t, err)
	})
	count("link, across nodes", 1, 1, func() {
		_, err = cl.Link(bg, root, cross.Ino, e.Ino, name(e.Ino, "l", true))
		require.NoError(t, err)
	})
	count("rename of a file, same directory, across nodes, inode known", 1, 2, func() {
		require.NoError(t, cl.Rename(bg, root, wire.RenameRequest{SrcParent: d.Ino, SrcName: crossName, DstParent: d.Ino, DstName: "renamed", SrcIno: cross.Ino}))
	})
	sub, err := cl.Mkdir(bg, root, d.Ino, name(d.Ino, "s", true), 0o755)
	require.NoError(t, err)
	// Lock round (entries of d and e, the rename lock of partition 0), the
	// loop check's walk from e to the root, the apply round: how many of
	// these partitions are remote depends on placement, so this row is
	// bounded rather than pinned.
	count("rename of a directory to another parent, inode known", 1, -1, func() {
		ents, _, err := cl.ReadDir(bg, root, d.Ino, 0, 0, 0)
		require.NoError(t, err)
		c.Transport.ResetCalls()
		for _, x := range ents {
			if x.Ino == sub.Ino {
				require.NoError(t, cl.Rename(bg, root, wire.RenameRequest{SrcParent: d.Ino, SrcName: x.Name, DstParent: e.Ino, DstName: "moved", SrcIno: sub.Ino}))
			}
		}
	})
	count("unlink, inode on another node, inode unknown", 2, 1, func() {
		require.NoError(t, cl.Unlink(bg, root, d.Ino, "renamed", 0))
	})
	count("unlink, same partition, inode known", 1, 0, func() {
		ents, _, err := cl.ReadDir(bg, root, d.Ino, 0, 0, 0)
		require.NoError(t, err)
		c.Transport.ResetCalls()
		for _, x := range ents {
			if x.Ino == local.Ino {
				require.NoError(t, cl.Unlink(bg, root, d.Ino, x.Name, x.Ino))
			}
		}
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%-70s %6s %6s\n", "operation", "client", "node")
	for _, r := range rows {
		fmt.Fprintf(&b, "%-70s %6d %6d\n", r.op, r.client, r.node)
	}
	t.Logf("messages per operation:\n%s", b.String())
	for _, r := range rows {
		require.Equal(t, r.wantC, r.client, "client messages of %s", r.op)
		if r.wantN < 0 {
			require.LessOrEqual(t, r.node, 7, "node messages of %s", r.op)
			continue
		}
		require.Equal(t, r.wantN, r.node, "node messages of %s", r.op)
	}
}
