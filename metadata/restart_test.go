package metadata_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// send issues one raw request with header h to the owner of partition
// part and decodes its reply into reply.
func send(t *testing.T, c *metatest.Cluster, part uint32, op wire.Op, h wire.Header, body, reply wire.Body) wire.ReplyHeader {
	t.Helper()
	m := c.Maps.Current()
	node, err := m.OwnerOfPartition(part)
	require.NoError(t, err)
	h.Epoch = m.Epoch
	var rh wire.ReplyHeader
	require.Eventually(t, func() bool {
		resp, err := c.Transport.Call(bg, node, uint16(op), h.Seq, wire.EncodeRequest(op, &h, body))
		if err != nil {
			return false
		}
		rh, err = wire.DecodeReply(resp, reply)
		require.NoError(t, err)
		return rh.Status != wire.StatusNotReady
	}, 10*time.Second, time.Millisecond)
	return rh
}

// TestAtMostOnce repeats mutating requests with the same sequence, before
// and after the executing node restarts: each repeat gets the first
// answer and changes nothing.
func TestAtMostOnce(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	d, err := cl.Mkdir(bg, root, rootIno, "d", 0o777)
	require.NoError(t, err)
	h := wire.Header{ClientID: 77, Incarnation: 5, Cred: root}
	parts := uint32(len(c.Maps.Current().Partitions))

	create := &wire.MakeRequest{Parent: d.Ino, Name: "f", Mode: wire.ModeRegular | 0o644}
	cpart := cluster.PartitionForName(d.Ino, "f", parts)
	h.Seq = 10
	var a1, a2, a3 wire.MakeReply
	require.Equal(t, wire.StatusOK, send(t, c, cpart, wire.OpCreate, h, create, &a1).Status)
	require.Equal(t, wire.StatusOK, send(t, c, cpart, wire.OpCreate, h, create, &a2).Status)
	require.Equal(t, a1, a2)

	ren := &wire.RenameRequest{SrcParent: d.Ino, SrcName: "f", DstParent: rootIno, DstName: "g", SrcIno: a1.Attr.Ino}
	rpart := cluster.PartitionOf(a1.Attr.Ino)
	h.Seq = 11
	require.Equal(t, wire.StatusOK, send(t, c, rpart, wire.OpRename, h, ren, &wire.Empty{}).Status)
	require.Equal(t, wire.StatusOK, send(t, c, rpart, wire.OpRename, h, ren, &wire.Empty{}).Status)

	// A fresh sequence executes again: the name is taken now.
	h.Seq = 12
	require.Equal(t, wire.Status(syscall.EEXIST), send(t, c, cpart, wire.OpCreate, h, &wire.MakeRequest{Parent: rootIno, Name: "g", Mode: wire.ModeRegular}, &a3).Status)

	// Restart every node: the answers survive in the logs.
	for i := range c.Nodes {
		c.Kill(i)
	}
	for i := range c.Nodes {
		c.Restart(i, nil)
	}
	h.Seq = 10
	var a4 wire.MakeReply
	require.Equal(t, wire.StatusOK, send(t, c, cpart, wire.OpCreate, h, create, &a4).Status)
	require.Equal(t, a1, a4)
	h.Seq = 11
	require.Equal(t, wire.StatusOK, send(t, c, rpart, wire.OpRename, h, ren, &wire.Empty{}).Status)

	// LowSeq lets the node forget: a repeat below it executes again.
	h.Seq, h.LowSeq = 13, 13
	var a5 wire.MakeReply
	require.Equal(t, wire.StatusOK, send(t, c, cpart, wire.OpCreate, h, &wire.MakeRequest{Parent: d.Ino, Name: "f", Mode: wire.ModeRegular}, &a5).Status)
	h.Seq = 10
	require.Equal(t, wire.Status(syscall.EEXIST), send(t, c, cpart, wire.OpCreate, h, create, &a4).Status)

	tr, err := metatest.Walk(bg, cl)
	require.NoError(t, err)
	require.Empty(t, tr.Check())
	require.Equal(t, []string{"/d", "/d/f", "/g"}, tr.Paths())
}

// replayed is what a restart must bring back of tr: every entry as it
// was, but a regular file's st_blocks, a count kept in memory that a
// restarted node answers with the estimate from the size until it counts
// again (here never: metatest's Data does not count these files).
func replayed(tr *metatest.Tree) map[string]metatest.Entry {
	out := make(map[string]metatest.Entry, len(tr.ByPath))
	for p, e := range tr.ByPath {
		if e.Attr.Mode&wire.ModeType == wire.ModeRegular {
			e.Attr.Blocks = 0
		}
		out[p] = e
	}
	return out
}

// TestRestartReplay builds a namespace, restarts every node (replaying
// the logs, with a rewrite in between for some), and compares.
func TestRestartReplay(t *testing.T) {
	for _, rewrite := range []bool{false, true} {
		t.Run(fmt.Sprintf("rewrite=%v", rewrite), func(t *testing.T) {
			c := metatest.Start(t, metatest.Config{Service: func(i int, cfg *metadata.Config) {
				if rewrite {
					cfg.RewriteMinBytes, cfg.RewriteRatio = 4096, 1
				}
			}})
			cl := c.Client()
			buildTree(t, cl)
			before, err := metatest.Walk(bg, cl)
			require.NoError(t, err)
			require.Empty(t, before.Check())
			for i := range c.Nodes {
				c.Kill(i)
				c.Restart(i, nil)
			}
			after, err := metatest.Walk(bg, cl)
			require.NoError(t, err)
			require.Equal(t, replayed(before), replayed(after))
			require.Empty(t, c.Leaks(after))
			// Inode numbers are not reused after a restart.
			a, err := cl.Create(bg, root, rootIno, "new", 0o644, 0, false, 0)
			require.NoError(t, err)
			for _, e := range before.ByPath {
				require.NotEqual(t, e.Attr.Ino, a.Ino)
			}
			if rewrite {
				var rewrites int
				for _, n := range c.Nodes {
					for _, id := range n.Store.IDs() {
						l, err := n.Store.Log(id)
						require.NoError(t, err)
						if l.Stats().RewriteBytes > 0 {
							rewrites++
						}
					}
				}
				require.Positive(t, rewrites, "some log was rewritten")
			}
		})
	}
}

// buildTree makes a namespace with every kind of inode, links, xattrs,
// renames and removals.
func buildTree(t *testing.T, cl interface {
	Mkdir(context.Context, wire.Cred, uint64, string, uint32) (wire.Attr, error)
	Create(context.Context, wire.Cred, uint64, string, uint32, uint64, bool, uint32) (wire.Attr, error)
	Symlink(context.Context, wire.Cred, uint64, string, string) (wire.Attr, error)
	Link(context.Context, wire.Cred, uint64, uint64, string) (wire.Attr, error)
	Unlink(context.Context, wire.Cred, uint64, string, uint64) error
	Rmdir(context.Context, wire.Cred, uint64, string, uint64) error
	Rename(context.Context, wire.Cred, wire.RenameRequest) error
	SetXattr(context.Context, wire.Cred, uint64, string, []byte, uint32) error
	SetAttr(context.Context, wire.Cred, wire.SetAttrRequest) (wire.Attr, error)
}) {
	t.Helper()
	for i := range 4 {
		d, err := cl.Mkdir(bg, root, rootIno, fmt.Sprintf("dir%d", i), 0o755)
		require.NoError(t, err)
		for j := range 30 {
			f, err := cl.Create(bg, root, d.Ino, fmt.Sprintf("file%d", j), 0o644, 0, false, 0)
			require.NoError(t, err)
			if j%5 == 0 {
				_, err = cl.Link(bg, root, f.Ino, rootIno, fmt.Sprintf("link%d-%d", i, j))
				require.NoError(t, err)
			}
			if j%7 == 0 {
				require.NoError(t, cl.SetXattr(bg, root, f.Ino, "user.k", []byte(fmt.Sprint(i, j)), 0))
				_, err = cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: f.Ino, Valid: wire.SetSize | wire.SetMode, Size: uint64(j * 100), Mode: 0o600})
				require.NoError(t, err)
			}
			if j%3 == 0 {
				require.NoError(t, cl.Unlink(bg, root, d.Ino, fmt.Sprintf("file%d", j), 0))
			}
		}
		_, err = cl.Symlink(bg, root, d.Ino, "sym", "../x")
		require.NoError(t, err)
		sub, err := cl.Mkdir(bg, root, d.Ino, "sub", 0o700)
		require.NoError(t, err)
		_, err = cl.Create(bg, root, sub.Ino, "deep", wire.ModeFIFO|0o644, 0, false, 0)
		require.NoError(t, err)
		require.NoError(t, cl.Rename(bg, root, rr(d.Ino, "file1", sub.Ino, "renamed", 0)))
		_, err = cl.Mkdir(bg, root, d.Ino, "gone", 0o700)
		require.NoError(t, err)
		require.NoError(t, cl.Rmdir(bg, root, d.Ino, "gone", 0))
	}
	require.NoError(t, cl.Rename(bg, root, rr(rootIno, "dir0", rootIno+0, "dir9", 0)))
	d1, err := cl.Mkdir(bg, root, rootIno, "target", 0o755)
	require.NoError(t, err)
	require.NoError(t, cl.Rename(bg, root, rr(rootIno, "dir1", d1.Ino, "moved", 0)))
}

// TestClosingNodeAnswersNotReady: requests that a node is executing when
// it closes are answered "not ready" (the client retries, at this node
// once it is back or at its successor), never "internal error", which a
// client reports to the application as a protocol error.
func TestClosingNodeAnswersNotReady(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	d, err := cl.Mkdir(bg, root, rootIno, "d", 0o777)
	require.NoError(t, err)
	m := c.Maps.Current()
	dirPart := cluster.PartitionOf(d.Ino)
	var svc *metadata.Service
	for _, n := range c.Nodes {
		if n.ID == m.Partitions[dirPart] {
			svc = n.Svc
		}
	}
	require.NotNil(t, svc)
	var (
		mu       sync.Mutex
		statuses = map[wire.Status]int{}
		wg       sync.WaitGroup
		stop     atomic.Bool
	)
	for w := range 4 {
		wg.Go(func() {
			h := wire.Header{Epoch: m.Epoch, ClientID: uint64(1000 + w), Incarnation: 1, Cred: root}
			for i := 0; i < 100000 && !stop.Load(); i++ {
				// Names whose inode stays in the directory's partition:
				// a create there is one commit on the closing node.
				name := fmt.Sprintf("w%d-%d", w, i)
				if cluster.PartitionForName(d.Ino, name, uint32(len(m.Partitions))) != dirPart {
					continue
				}
				h.Seq++
				req := &wire.MakeRequest{Parent: d.Ino, Name: name, Mode: wire.ModeRegular | 0o644}
				resp := svc.Handle(bg, uint16(wire.OpCreate), h.Seq, wire.EncodeRequest(wire.OpCreate, &h, req))
				var r wire.MakeReply
				rh, err := wire.DecodeReply(resp, &r)
				if err != nil {
					t.Errorf("reply: %v", err)
					return
				}
				mu.Lock()
				statuses[rh.Status]++
				mu.Unlock()
			}
		})
	}
	time.Sleep(50 * time.Millisecond)
	svc.Close()
	time.Sleep(20 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	t.Logf("answers: %v", statuses)
	require.Positive(t, statuses[wire.StatusOK], "no create succeeded before the close")
	require.Zero(t, statuses[wire.StatusInternal], "a closing node answered internal error")
}

// TestReleaseAtMostOnce repeats a release with the same sequence, as a
// client does when an attempt's answer is lost: it must end one open, not
// two, or a file removed while open would be freed under its last open.
func TestReleaseAtMostOnce(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	f, err := cl.Create(bg, root, rootIno, "f", 0o644, 0, false, 0)
	require.NoError(t, err)
	h := wire.Header{ClientID: 78, Incarnation: 1, Cred: root}
	part := cluster.PartitionOf(f.Ino)
	for seq := uint64(1); seq <= 2; seq++ {
		h.Seq = seq
		var a wire.AttrReply
		require.Equal(t, wire.StatusOK, send(t, c, part, wire.OpOpen, h, &wire.OpenRequest{Ino: f.Ino, Gen: f.Gen, Flags: wire.OpenReadOnly}, &a).Status)
	}
	require.NoError(t, cl.Unlink(bg, root, rootIno, "f", f.Ino))

	h.Seq = 3
	rel := &wire.ReleaseRequest{Ino: f.Ino, Flags: wire.OpenReadOnly}
	require.Equal(t, wire.StatusOK, send(t, c, part, wire.OpRelease, h, rel, &wire.Empty{}).Status)
	require.Equal(t, wire.StatusOK, send(t, c, part, wire.OpRelease, h, rel, &wire.Empty{}).Status)
	h.Seq = 0
	var a wire.AttrReply
	require.Equal(t, wire.StatusOK, send(t, c, part, wire.OpGetAttr, h, &wire.GetAttrRequest{Ino: f.Ino, Gen: f.Gen}, &a).Status,
		"one open of the removed file remains after a repeated release")
	require.Zero(t, a.Attr.Nlink)

	h.Seq = 4
	require.Equal(t, wire.StatusOK, send(t, c, part, wire.OpRelease, h, rel, &wire.Empty{}).Status)
	require.Eventually(t, func() bool {
		h.Seq = 0
		return send(t, c, part, wire.OpGetAttr, h, &wire.GetAttrRequest{Ino: f.Ino, Gen: f.Gen}, &a).Status != wire.StatusOK
	}, 10*time.Second, 10*time.Millisecond, "the last release frees the removed file")
}
