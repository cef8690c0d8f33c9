package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node/nodetest"
)

// newClusterClient starts a nodetest cluster and connects a client to it.
func newClusterClient(t *testing.T, o nodetest.Options) (*nodetest.Cluster, *client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	tc := nodetest.Start(t, o)
	return tc, connectClient(t, tc, t.Name())
}

// connectClient connects another client (another host) named name to tc,
// closed when the test ends.
func connectClient(t *testing.T, tc *nodetest.Cluster, name string) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New(ctx, client.Config{Admin: tc.AdminAddrs(), Token: tc.Token, Name: name, OpTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClusterDataPath(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	// The data path alone, below any namespace: bytes written to an inode
	// number's chunks at their owners come back.
	data := bytes.Repeat([]byte("octofs"), 3<<20/6)
	const ino = 0x0003_0000_0000_0042
	if err := client.TestingWriteData(c, ctx, ino, data, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := client.TestingReadData(c, ctx, ino, got, 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data read back differs")
	}
	st := c.Stats()
	if st.Data.RDMAWrites == 0 || st.Data.RDMAReads == 0 || st.TotalRPCs() == 0 {
		t.Fatalf("stats after I/O: %+v", st)
	}
}

func TestClusterRegisteredBufferIsZeroCopy(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	buf, err := c.AllocBuffer(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	for i := range buf.Bytes() {
		buf.Bytes()[i] = byte(i * 7)
	}
	const ino = 0x0005_0000_0000_0077
	before := c.Stats().Data.BytesCopied
	if err := client.TestingWriteData(c, ctx, ino, buf.Bytes(), 0); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 1<<20)
	if err := client.TestingReadData(c, ctx, ino, back, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, buf.Bytes()) {
		t.Fatal("read back differs")
	}
	// The write from the registered buffer copied nothing; the read into
	// plain memory copied its 1 MiB through a bounce buffer.
	if copied := c.Stats().Data.BytesCopied - before; copied != 1<<20 {
		t.Fatalf("%d bytes copied, want exactly the plain-memory read's %d", copied, 1<<20)
	}
}

// TestClusterOpenFileSurvivesOwnerRestart: a file unlinked while open
// lives on at its owner as an orphan; when the owner restarts, the client
// registers the open again (a reclaim) and the file stays readable.
func TestClusterOpenFileSurvivesOwnerRestart(t *testing.T) {
	tc, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	fsys := c.FS(client.RootCred)
	data := bytes.Repeat([]byte("survivor"), 1<<17)
	if err := fsys.WriteFile("/orphan", data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := fsys.Open("/orphan")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ino := f.Handle().Ino()
	if err := fsys.Remove("/orphan"); err != nil {
		t.Fatal(err)
	}
	owner, err := c.Map().OwnerOfInode(ino)
	if err != nil {
		t.Fatal(err)
	}
	var idx int
	for i, n := range tc.Nodes {
		if n.ID == owner.ID {
			idx = i
		}
	}
	opens := c.Stats().RPCs["open"]
	tc.Crash(idx)
	tc.Restart(idx)
	tc.WaitUp()
	// The keep-alive meets the new incarnation and the client reclaims
	// the open: one more open request.
	deadline := time.Now().Add(30 * time.Second)
	for c.Stats().RPCs["open"] == opens {
		if time.Now().After(deadline) {
			t.Fatal("no reclaim of the open file within 30s of its owner's restart")
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := make([]byte, len(data))
	if _, err := f.ReadAt(got, 0); err != nil {
		t.Fatalf("read of the unlinked open file after its owner restarted: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the unlinked open file's data differs after its owner restarted")
	}
	if a, err := c.GetAttr(ctx, client.RootCred, ino); err != nil || a.Nlink != 0 {
		t.Fatalf("the orphan after restart: nlink %d, %v", a.Nlink, err)
	}
}

// TestClusterDownNodeTimesOut: a call to a node that is gone fails with
// ETIMEDOUT within the operation timeout, reads and writes included.
func TestClusterDownNodeTimesOut(t *testing.T) {
	tc, setup := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	// The setup runs with the generous timeout of newClusterClient; the
	// client under test has 2 s.
	a, sf, err := setup.Create(ctx, client.RootCred, 1, "f", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sf.WriteAt(ctx, []byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	if err := sf.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(ctx, client.Config{Admin: tc.AdminAddrs(), Token: tc.Token, OpTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.Open(ctx, client.RootCred, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	owner, _ := c.Map().OwnerOfInode(a.Ino)
	for i, n := range tc.Nodes {
		if n.ID == owner.ID {
			tc.Crash(i)
		}
	}
	for name, call := range map[string]func() error{
		"getattr": func() error { _, err := c.GetAttr(ctx, client.RootCred, a.Ino); return err },
		"setattr": func() error {
			_, err := c.SetAttr(ctx, client.RootCred, a.Ino, client.SetAttrIn{Valid: client.SetMode, Mode: 0o600})
			return err
		},
		"flush after a write": func() error {
			if _, err := f.WriteAt(ctx, []byte("y"), 0); err != nil {
				return err
			}
			return f.Flush(ctx)
		},
	} {
		start := time.Now()
		err := call()
		el := time.Since(start)
		if err != syscall.ETIMEDOUT && err != syscall.EIO {
			t.Errorf("%s at a crashed owner: %v, want ETIMEDOUT or EIO", name, err)
		}
		// One operation timeout, plus a write's and a flush's own.
		if el > 3*2*time.Second+2*time.Second {
			t.Errorf("%s at a crashed owner took %v with a 2s operation timeout", name, el)
		}
		t.Logf("%s: %v after %v", name, err, el.Round(time.Millisecond))
	}
}
func TestClusterKnownInodeRouting(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	cred := client.RootCred
	dir, err := c.Mkdir(ctx, cred, cluster.RootInode, "routing", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) uint64 {
		t.Helper()
		a, f, err := c.Create(ctx, cred, dir.Ino, name, 0o644, syscall.O_WRONLY)
		if err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
		f.Close(ctx)
		return a.Ino
	}
	exists := func(name string) bool {
		_, err := c.Lookup(ctx, cred, dir.Ino, name)
		return err == nil
	}
	// Right beliefs: one unlink or rename RPC each, wherever the inodes
	// live (without the inode about two in three would be redirected).
	const n = 12
	inos := make([]uint64, n)
	for i := range n {
		inos[i] = create(fmt.Sprintf("f%d", i))
	}
	before := c.Stats().RPCs
	for i := range n {
		if err := c.RenameKnown(ctx, cred, dir.Ino, fmt.Sprintf("f%d", i), inos[i], dir.Ino, fmt.Sprintf("g%d", i), 0, 0); err != nil {
			t.Fatalf("rename f%d: %v", i, err)
		}
	}
	for i := range n {
		if err := c.UnlinkKnown(ctx, cred, dir.Ino, fmt.Sprintf("g%d", i), inos[i]); err != nil {
			t.Fatalf("unlink g%d: %v", i, err)
		}
	}
	after := c.Stats().RPCs
	if got := after["rename"] - before["rename"]; got != n {
		t.Errorf("%d renames with the inode known took %d rename RPCs, want %d", n, got, n)
	}
	if got := after["unlink"] - before["unlink"]; got != n {
		t.Errorf("%d unlinks with the inode known took %d unlink RPCs, want %d", n, got, n)
	}

	// Wrong beliefs.
	gone := create("gone")
	if err := c.Unlink(ctx, cred, dir.Ino, "gone"); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		op func(ino uint64) error
		// want: names that exist afterwards; absent: names that do not.
		want, absent []string
	}{
		"unlink, inode gone": {
			op:   func(ino uint64) error { return c.UnlinkKnown(ctx, cred, dir.Ino, "a", gone) },
			want: []string{"b"}, absent: []string{"a"},
		},
		"unlink, another live inode": {
			op:   func(ino uint64) error { return c.UnlinkKnown(ctx, cred, dir.Ino, "a", ino) },
			want: []string{"b"}, absent: []string{"a"},
		},
		"rename, inode gone": {
			op:   func(ino uint64) error { return c.RenameKnown(ctx, cred, dir.Ino, "a", gone, dir.Ino, "c", 0, 0) },
			want: []string{"b", "c"}, absent: []string{"a"},
		},
		"rename, another live inode": {
			op:   func(ino uint64) error { return c.RenameKnown(ctx, cred, dir.Ino, "a", ino, dir.Ino, "c", 0, 0) },
			want: []string{"b", "c"}, absent: []string{"a"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			for _, n := range []string{"a", "b", "c"} {
				c.Unlink(ctx, cred, dir.Ino, n)
			}
			create("a")
			b := create("b")
			if err := tc.op(b); err != nil {
				t.Fatalf("%v", err)
			}
			for _, n := range tc.want {
				if !exists(n) {
					t.Errorf("%s is gone", n)
				}
			}
			for _, n := range tc.absent {
				if exists(n) {
					t.Errorf("%s is still there", n)
				}
			}
		})
	}
	if err := c.UnlinkKnown(ctx, cred, dir.Ino, "nothing", gone); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("unlink of a name that does not exist, with a gone inode: %v, want ENOENT", err)
	}
}

// TestClusterFullFileSystem fills a small cluster with file data: the
// write that does not fit answers ENOSPC, statfs has no available space
// left on the node that refused it, what was written reads back, and the
// full file system still takes removals.
func TestClusterFullFileSystem(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{RegionSize: 16 << 20})
	ctx := context.Background()
	root := client.Cred{}
	before, err := c.StatFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("full"), 256<<10)
	var names []string
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		name := fmt.Sprintf("f%03d", i)
		a, f, err := c.Create(ctx, root, cluster.RootInode, name, 0o644, syscall.O_WRONLY)
		if err != nil {
			full = err
			break
		}
		names = append(names, name)
		if _, err := f.WriteAt(ctx, chunk, 0); err != nil {
			full = err
		} else if err := f.Sync(ctx); err != nil {
			full = err
		}
		_ = f.Close(ctx)
		_ = a
	}
	if !errors.Is(full, syscall.ENOSPC) {
		t.Fatalf("after %d files of 1 MiB: %v, want ENOSPC", len(names), full)
	}
	after, err := c.StatFS(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ENOSPC after %d files; statfs before %+v, when full %+v", len(names), before, after)
	// Available is what a writer can still fill: when the first node is
	// full, little, although the others' free blocks still count as
	// free (before, available was free: 35% of the start here).
	if after.Bavail > before.Bavail/10 || after.Bfree < after.Bavail {
		t.Fatalf("statfs when full: %d of %d blocks available (%d free), want at most a tenth", after.Bavail, before.Bavail, after.Bfree)
	}
	// Every complete file reads back.
	got := make([]byte, len(chunk))
	for _, name := range names[:len(names)-1] {
		a, err := c.Lookup(ctx, root, cluster.RootInode, name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.Open(ctx, root, a.Ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := f.ReadAt(ctx, got, 0); err != nil || n != len(chunk) || !bytes.Equal(got, chunk) {
			t.Fatalf("%s: read %d bytes, %v; equal %v", name, n, err, bytes.Equal(got, chunk))
		}
		_ = f.Close(ctx)
	}
	// The full file system takes removals, and the space they free takes
	// writes at once (an allocation waits for the blocks' quarantine).
	for _, name := range names {
		if err := c.Unlink(ctx, root, cluster.RootInode, name); err != nil {
			t.Fatalf("unlink %s on a full file system: %v", name, err)
		}
	}
	start := time.Now()
	for i := range len(names) / 2 {
		_, f, err := c.Create(ctx, root, cluster.RootInode, fmt.Sprintf("again%03d", i), 0o644, syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(ctx, chunk, 0); err != nil {
			t.Fatalf("write %d of %d MiB after removing %d MiB: %v", i, len(names)/2, len(names), err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("rewrote half the files in %v", time.Since(start))
}

// TestClusterCloseFreesBlocksAhead: a writer's allocations ahead of its
// writes (which make a sequential writer ask for blocks once per chunk)
// are freed when the file's last open closes, so small files do not take
// twice their size; what was written stays.
func TestClusterCloseFreesBlocksAhead(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	root := client.Cred{}
	used := dataUsed(t, c)
	before := used()
	const files, piece = 20, 100_000
	want := make([][]byte, files)
	var keep *client.File
	for i := range files {
		a, f, err := c.Create(ctx, root, cluster.RootInode, fmt.Sprintf("s%02d", i), 0o644, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// A second open of the first file outlives the first close:
			// nothing is freed until it closes too.
			if keep, err = c.Open(ctx, root, a.Ino, syscall.O_RDONLY); err != nil {
				t.Fatal(err)
			}
		}
		for j := range 3 {
			p := bytes.Repeat([]byte{byte('a' + i), byte('0' + j)}, piece/2)
			want[i] = append(want[i], p...)
			if _, err := f.WriteAt(ctx, p, int64(j*piece)); err != nil {
				t.Fatal(err)
			}
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	data := uint64(files * 3 * piece)
	// In blocks of 4 KiB: a little over the data.
	limit := data + data/8
	deadline := time.Now().Add(20 * time.Second)
	for used()-before > limit {
		if time.Now().After(deadline) {
			t.Fatalf("%d files of %d bytes take %d bytes", files, 3*piece, used()-before)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d bytes written take %d bytes", data, used()-before)
	if err := keep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3*piece)
	for i := range files {
		a, err := c.Lookup(ctx, root, cluster.RootInode, fmt.Sprintf("s%02d", i))
		if err != nil {
			t.Fatal(err)
		}
		f, err := c.Open(ctx, root, a.Ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := f.ReadAt(ctx, got, 0); err != nil || n != len(got) || !bytes.Equal(got, want[i]) {
			t.Fatalf("s%02d: read %d bytes, %v; equal %v", i, n, err, bytes.Equal(got, want[i]))
		}
		_ = f.Close(ctx)
	}
}

// TestClusterDirAfterChange: the directory attributes the replies to
// creations and removals carry (through the mount: the kernel's next
// GETATTR of the directory) answer the next GetAttr without a request,
// and equal what the directory's owner then reports; removals across
// nodes included.
func TestClusterDirAfterChange(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	c.KeepDirsAfterCreate(time.Second)
	ctx := context.Background()
	root := client.Cred{}
	d, err := c.Mkdir(ctx, root, cluster.RootInode, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		n := c.Stats().TotalRPCs()
		kept, err := c.GetAttr(ctx, root, d.Ino)
		if err != nil || c.Stats().TotalRPCs() != n {
			t.Fatalf("%s: getattr: %v, %d requests, want none", what, err, c.Stats().TotalRPCs()-n)
		}
		asked, err := c.GetAttr(ctx, root, d.Ino)
		if err != nil || c.Stats().TotalRPCs() == n {
			t.Fatalf("%s: second getattr: %v, no request", what, err)
		}
		if kept != asked {
			t.Fatalf("%s: kept %+v, the owner has %+v", what, kept, asked)
		}
	}
	var files []client.Attr
	for i := range 6 { // several names: their inodes land on every node
		a, f, err := c.Create(ctx, root, d.Ino, fmt.Sprintf("f%d", i), 0o644, syscall.O_WRONLY)
		if err != nil {
			t.Fatal(err)
		}
		_ = f.Close(ctx)
		files = append(files, a)
		check(fmt.Sprintf("create f%d", i))
	}
	sub, err := c.Mkdir(ctx, root, d.Ino, "sub", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	check("mkdir")
	if err := c.RmdirKnown(ctx, root, d.Ino, "sub", sub.Ino); err != nil {
		t.Fatal(err)
	}
	check("rmdir")
	for i, a := range files {
		if err := c.UnlinkKnown(ctx, root, d.Ino, fmt.Sprintf("f%d", i), a.Ino); err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("unlink f%d", i))
	}
}

// TestClusterPreallocatedBlocksAreFreed: blocks a file holds past its
// size (fallocate with FALLOC_FL_KEEP_SIZE, or a fallocate that failed
// part way) stay after the close, and are freed by a truncate to the
// file's size and by its removal. A file of size 0 had them leak.
func TestClusterPreallocatedBlocksAreFreed(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	root := client.Cred{}
	used := dataUsed(t, c)
	waitUsed := func(what string, ok func(uint64) bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for u := used(); !ok(u); u = used() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d bytes used", what, u)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	before := used()
	const prealloc = 12 << 20 // three chunks
	preallocate := func(name string) uint64 {
		t.Helper()
		a, f, err := c.Create(ctx, root, cluster.RootInode, name, 0o644, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Allocate(ctx, client.FallocKeepSize, 0, prealloc); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return a.Ino
	}
	ino := preallocate("removed")
	waitUsed("preallocated, closed", func(u uint64) bool { return u >= before+prealloc })
	if a, err := c.GetAttr(ctx, root, ino); err != nil || a.Size != 0 {
		t.Fatalf("size after a KEEP_SIZE fallocate: %d, %v", a.Size, err)
	}
	if err := c.Unlink(ctx, root, cluster.RootInode, "removed"); err != nil {
		t.Fatal(err)
	}
	waitUsed("removed", func(u uint64) bool { return u < before+prealloc/8 })

	ino = preallocate("truncated")
	waitUsed("preallocated again", func(u uint64) bool { return u >= before+prealloc })
	if _, err := c.SetAttr(ctx, root, ino, client.SetAttrIn{Valid: client.SetSize, Size: 0}); err != nil {
		t.Fatal(err)
	}
	waitUsed("truncated to its size", func(u uint64) bool { return u < before+prealloc/8 })
}

// TestClusterWriteBehindMeetsENOSPC: with write-behind, the write that
// does not fit fails with ENOSPC itself, and every write acknowledged
// before it reads back (a kept write used to meet ENOSPC only when sent,
// after its caller was told it succeeded).
func TestClusterWriteBehindMeetsENOSPC(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{RegionSize: 16 << 20})
	c.SetWriteBehind(1 << 20)
	ctx := context.Background()
	root := client.Cred{}
	a, f, err := c.Create(ctx, root, cluster.RootInode, "fill", 0o644, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	const piece = 64 << 10
	block := func(i int) []byte { return bytes.Repeat([]byte{byte(i), byte(i >> 8), 0xa5, 0x5a}, piece/4) }
	n := 0
	for ; n < 4096; n++ {
		if _, err = f.WriteAt(ctx, block(n), int64(n*piece)); err != nil {
			break
		}
	}
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("after %d writes of 64 KiB: %v, want ENOSPC", n, err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatalf("close after ENOSPC: %v", err)
	}
	r, err := c.Open(ctx, root, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	got := make([]byte, piece)
	for i := range n {
		if m, err := r.ReadAt(ctx, got, int64(i*piece)); err != nil || m != piece || !bytes.Equal(got, block(i)) {
			t.Fatalf("acknowledged write %d of %d: read %d bytes, %v, equal %v", i, n, m, err, bytes.Equal(got, block(i)))
		}
	}
	t.Logf("ENOSPC after %d writes of 64 KiB; all of them read back", n)
}

// dataUsed returns a function that reports the bytes of data c's cluster
// holds.
func dataUsed(t *testing.T, c *client.Client) func() uint64 {
	return func() uint64 {
		u, err := client.TestingDataUsed(c, context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
}

// A new cluster keeps files (regular, symlink, device) in their
// directory's partition, so that their create and unlink are one node's
// commit, and spreads directories over the partitions.
func TestClusterFilesStayWithTheirDirectory(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	root := client.Cred{}
	dirParts := map[uint32]bool{}
	for i := range 12 {
		d, err := c.Mkdir(ctx, root, cluster.RootInode, fmt.Sprintf("d%d", i), 0o755)
		if err != nil {
			t.Fatal(err)
		}
		dp := cluster.PartitionOf(d.Ino)
		dirParts[dp] = true
		var inos []uint64
		for j := range 5 {
			a, f, err := c.Create(ctx, root, d.Ino, fmt.Sprintf("f%d", j), 0o644, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.Close(ctx); err != nil {
				t.Fatal(err)
			}
			inos = append(inos, a.Ino)
		}
		s, err := c.Symlink(ctx, root, d.Ino, "s", "f0")
		if err != nil {
			t.Fatal(err)
		}
		n, err := c.Mknod(ctx, root, d.Ino, "p", syscall.S_IFIFO|0o644, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ino := range append(inos, s.Ino, n.Ino) {
			if p := cluster.PartitionOf(ino); p != dp {
				t.Fatalf("inode %#x in directory %#x is in partition %d, not its directory's %d", ino, d.Ino, p, dp)
			}
		}
	}
	if len(dirParts) < 6 {
		t.Fatalf("12 directories in %d partitions: directories do not spread", len(dirParts))
	}
}

// TestClusterTruncateDropsCachedExtents: a truncation frees the file's
// blocks past the new size at their owners, so the extents this client
// cached for them must go with it. Before, a read through the same open
// after ftruncate(5000) and ftruncate(10000) showed the freed block's old
// bytes from 8192 on, a write after ftruncate(0) went into a freed block
// and was lost at the next open, and a write through an open after
// another open's O_TRUNC brought the truncated bytes back (and a write
// kept behind before that O_TRUNC landed after it).
func TestClusterTruncateDropsCachedExtents(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	ctx := context.Background()
	root := client.Cred{}
	c.SetWriteBehind(1 << 20)
	old := bytes.Repeat([]byte{'q'}, 10000)
	// reopen reads the whole file through a new open (after the last
	// close: close-to-open from scratch).
	reopen := func(t *testing.T, ino uint64) []byte {
		t.Helper()
		f, err := c.Open(ctx, root, ino, syscall.O_RDONLY)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close(ctx)
		got := make([]byte, 64<<10)
		n, err := f.ReadAt(ctx, got, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return got[:n]
	}
	create := func(t *testing.T, name string) (uint64, *client.File) {
		t.Helper()
		a, f, err := c.Create(ctx, root, cluster.RootInode, name, 0o644, syscall.O_RDWR)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(ctx, old, 0); err != nil {
			t.Fatal(err)
		}
		return a.Ino, f
	}
	// want is the file after [5000, 10000) of old was cut and rewritten
	// with zeros, or cut to nothing and "r" written at 8192.
	zeroTail := append(bytes.Repeat([]byte{'q'}, 5000), make([]byte, 5000)...)
	rAt8192 := append(make([]byte, 8192), bytes.Repeat([]byte{'r'}, 4000)...)

	// writeRAt8192 writes rAt8192's "r"s at 8192 through f, closes it and
	// checks the file through a new open.
	writeRAt8192 := func(t *testing.T, ino uint64, f *client.File) {
		t.Helper()
		if _, err := f.WriteAt(ctx, rAt8192[8192:], 8192); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := reopen(t, ino); !bytes.Equal(got, rAt8192) {
			t.Fatalf("after reopen: %d bytes, first difference at %d", len(got), firstDiff(got, rAt8192))
		}
	}

	t.Run("shrink-extend-read", func(t *testing.T) {
		ino, f := create(t, "shrink")
		for _, size := range []uint64{5000, 10000} {
			if err := f.Truncate(ctx, size); err != nil {
				t.Fatal(err)
			}
		}
		got := make([]byte, 10000)
		if n, err := f.ReadAt(ctx, got, 0); n != len(got) {
			t.Fatalf("read %d bytes: %v", n, err)
		}
		if i := bytes.IndexByte(got[5000:], 'q'); i >= 0 {
			t.Fatalf("byte %d after the truncation to 5000 reads the old 'q'", 5000+i)
		}
		if err := f.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if got := reopen(t, ino); !bytes.Equal(got, zeroTail) {
			t.Fatalf("after reopen: %d bytes, equal %v", len(got), bytes.Equal(got, zeroTail))
		}
	})
	t.Run("truncate-then-write", func(t *testing.T) {
		ino, f := create(t, "rewrite")
		if err := f.Truncate(ctx, 0); err != nil {
			t.Fatal(err)
		}
		writeRAt8192(t, ino, f)
	})
	t.Run("otrunc-open-then-write", func(t *testing.T) {
		ino, f := create(t, "otrunc")
		g, err := c.Open(ctx, root, ino, syscall.O_RDWR|syscall.O_TRUNC)
		if err != nil {
			t.Fatal(err)
		}
		if got := f.Size(); got != 0 {
			t.Errorf("size through the first open after the other's O_TRUNC: %d", got)
		}
		if err := g.Close(ctx); err != nil {
			t.Fatal(err)
		}
		writeRAt8192(t, ino, f)
	})
}

// firstDiff returns the first offset where a and b differ (the shorter
// length if one is a prefix of the other, -1 if equal).
func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) == len(b) {
		return -1
	}
	return min(len(a), len(b))
}

// TestClusterStatAfterAnotherOpenCommits: the attributes an open answers
// (kept for the kernel's getattr after it) must not outlive a commit of
// this client's writes. Write through one open, open the file again
// (its owner still has size 0), close that open (which commits the
// writes): a stat shows the written size, not the second open's 0.
func TestClusterStatAfterAnotherOpenCommits(t *testing.T) {
	_, c := newClusterClient(t, nodetest.Options{})
	c.KeepDirsAfterCreate(time.Minute)
	ctx := context.Background()
	root := client.Cred{}
	a, f, err := c.Create(ctx, root, cluster.RootInode, "f", 0o644, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close(ctx)
	if _, err := f.WriteAt(ctx, make([]byte, 5000), 0); err != nil {
		t.Fatal(err)
	}
	g, err := c.Open(ctx, root, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetAttr(ctx, root, a.Ino)
	if err != nil || got.Size != 5000 {
		t.Fatalf("stat after the second open's close: size %d, %v; want 5000", got.Size, err)
	}
}

// TestClusterConcurrentAppends: two clients (two hosts), four appenders
// each, append fixed-size records to one file at once; every record is
// in the file exactly once and whole, as with appends on a local file
// system. Before the owner placed appends (OpAppend), each landed at the
// size its client last learnt and most were overwritten.
func TestClusterConcurrentAppends(t *testing.T) {
	tc, c1 := newClusterClient(t, nodetest.Options{})
	c2 := connectClient(t, tc, t.Name()+"-2")
	ctx := context.Background()
	root := client.Cred{}
	a, f, err := c1.Create(ctx, root, cluster.RootInode, "log", 0o644, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	const perWriter, recLen = 50, 32
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		c := c1
		if w%2 == 1 {
			c = c2
		}
		wg.Go(func() {
			f, err := c.Open(ctx, root, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close(ctx)
			for i := range perWriter {
				rec := fmt.Sprintf("%d %04d", w, i)
				rec += strings.Repeat(".", recLen-1-len(rec)) + "\n"
				if _, err := f.WriteAt(ctx, []byte(rec), 0); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	r, err := c1.Open(ctx, root, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	buf := make([]byte, 2*8*perWriter*recLen)
	n, err := r.ReadAt(ctx, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n != 8*perWriter*recLen {
		t.Fatalf("the file holds %d bytes, want %d", n, 8*perWriter*recLen)
	}
	seen := map[string]int{}
	for rec := range strings.SplitSeq(string(buf[:n]), "\n") {
		if rec == "" {
			continue
		}
		if len(rec) != recLen-1 {
			t.Fatalf("a torn record: %q", rec)
		}
		seen[strings.TrimRight(rec, ".")]++
	}
	if len(seen) != 8*perWriter {
		t.Fatalf("%d distinct records, want %d", len(seen), 8*perWriter)
	}
}
