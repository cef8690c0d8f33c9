package client

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/node/nodetest"
)

// touches is how many atime updates c has asked for.
func touches(c *Client) uint64 { return c.Stats().RPCs["touch-atime"] }

// TestRelatimeReads: reads update atime by relatime's rule at the cost
// of at most one RPC per modification of the file (or per day), never one
// per read; O_NOATIME reads send none; a reader needs no ownership.
func TestRelatimeReads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node cluster; skipped with -short")
	}
	// On the real stack, where Stats counts the RPCs. (Memory's reads
	// are TestRelatimeClock's.)
	tc := nodetest.Start(t, nodetest.Options{})
	newClient := func() *Client { return clusterClient(t, tc) }
	ctx := context.Background()
	c := newClient()
	a, f, err := c.Create(ctx, Cred{}, cluster.RootInode, "f", 0o666, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ino := a.Ino
	buf := make([]byte, 3)
	readN := func(f *File, n int) {
		t.Helper()
		for range n {
			if _, err := f.ReadAt(ctx, buf, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func(c *Client, cred Cred, flags int) *File {
		t.Helper()
		f, err := c.Open(ctx, cred, ino, flags)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}

	// 100 reads by bob, who does not own the file: one update.
	before := touches(c)
	f = open(c, bob, syscall.O_RDONLY)
	readN(f, 100)
	if got := touches(c) - before; got != 1 {
		t.Fatalf("%d atime updates for 100 reads after a write, want 1", got)
	}
	st, err := c.GetAttr(ctx, alice, ino)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Atime.After(st.Mtime) {
		t.Fatalf("atime %v not after mtime %v after a read", st.Atime, st.Mtime)
	}
	if st.Ctime != a.Ctime && !st.Ctime.Before(st.Atime) {
		t.Fatalf("the atime update moved ctime to %v", st.Ctime)
	}
	f.Close(ctx)

	// Steady state: reopening and reading sends nothing.
	before = touches(c)
	f = open(c, bob, syscall.O_RDONLY)
	readN(f, 50)
	f.Close(ctx)
	if got := touches(c) - before; got != 0 {
		t.Fatalf("%d atime updates for reads of an unchanged file, want 0", got)
	}

	// Writes and reads through one descriptor: nothing until the
	// writes are committed, then one.
	before = touches(c)
	f = open(c, alice, syscall.O_RDWR)
	for range 20 {
		if _, err := f.WriteAt(ctx, []byte("xyz"), 0); err != nil {
			t.Fatal(err)
		}
		readN(f, 1)
	}
	if got := touches(c) - before; got != 0 {
		t.Fatalf("%d atime updates for reads between uncommitted writes, want 0", got)
	}
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	readN(f, 20)
	if got := touches(c) - before; got != 1 {
		t.Fatalf("%d atime updates for reads after a commit, want 1", got)
	}
	f.Close(ctx)

	// O_NOATIME: none, even when due.
	f = open(c, alice, syscall.O_WRONLY)
	if _, err := f.WriteAt(ctx, []byte("abc"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close(ctx)
	before = touches(c)
	f = open(c, Cred{}, syscall.O_RDONLY|syscall.O_NOATIME) // the owner's privilege
	readN(f, 10)
	f.Close(ctx)
	if got := touches(c) - before; got != 0 {
		t.Fatalf("%d atime updates through O_NOATIME, want 0", got)
	}

	// Another client's reads are its own: one update, then none.
	c2 := newClient()
	before = touches(c2)
	f = open(c2, bob, syscall.O_RDONLY)
	readN(f, 10)
	f.Close(ctx)
	f = open(c2, bob, syscall.O_RDONLY)
	readN(f, 10)
	f.Close(ctx)
	if got := touches(c2) - before; got != 1 {
		t.Fatalf("%d atime updates by a second client, want 1", got)
	}
}

// TestRelatimeClock: with the clock in the test's hands, a read sets
// atime to the owner's now, once; a day later the next read sets it
// again; listings do the same for directories, and O_NOATIME opens of a
// directory do not.
func TestRelatimeClock(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	a, f, err := c.Create(ctx, alice, cluster.RootInode, "f", 0o644, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt(ctx, []byte("abc"), 0)
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	atime := func(ino uint64) time.Time {
		t.Helper()
		st, err := c.GetAttr(ctx, alice, ino)
		if err != nil {
			t.Fatal(err)
		}
		return st.Atime
	}
	fc.advance(time.Second)
	f, err = c.Open(ctx, bob, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	f.ReadAt(ctx, buf, 0)
	if got, want := atime(a.Ino), fc.clock(); !got.Equal(want) {
		t.Fatalf("atime %v after a read, want %v", got, want)
	}
	first := fc.clock()
	fc.advance(time.Hour)
	f.ReadAt(ctx, buf, 0)
	if got := atime(a.Ino); !got.Equal(first) {
		t.Fatalf("atime %v an hour later, want %v (not due)", got, first)
	}
	fc.advance(24 * time.Hour)
	before := touches(c)
	for range 10 {
		f.ReadAt(ctx, buf, 0)
	}
	if got, want := atime(a.Ino), fc.clock(); !got.Equal(want) {
		t.Fatalf("atime %v a day later, want %v", got, want)
	}
	if got := touches(c) - before; got != 1 {
		t.Fatalf("%d atime updates for 10 reads a day later, want 1", got)
	}
	f.Close(ctx)

	// Directories: a listing through an open directory.
	d, err := c.Mkdir(ctx, alice, cluster.RootInode, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	fc.advance(time.Second)
	dir, err := c.Open(ctx, bob, d.Ino, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if err != nil {
		t.Fatal(err)
	}
	if got := atime(d.Ino); !got.Equal(d.Atime) {
		t.Fatalf("opening a directory moved its atime to %v", got)
	}
	if _, _, err := dir.ReadDirPage(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	dir.Close(ctx)
	if got, want := atime(d.Ino), fc.clock(); !got.Equal(want) {
		t.Fatalf("directory atime %v after a listing, want %v", got, want)
	}
	listed := fc.clock()
	fc.advance(25 * time.Hour)
	dir, err = c.Open(ctx, alice, d.Ino, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOATIME)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dir.ReadDirPage(ctx, 0, 0); err != nil {
		t.Fatal(err)
	}
	dir.Close(ctx)
	if got := atime(d.Ino); !got.Equal(listed) {
		t.Fatalf("an O_NOATIME listing moved atime to %v", got)
	}

	// OpenDir: the open and the first page in one request; atime moves
	// when the page is read, not at the open.
	if _, err := c.Mkdir(ctx, alice, d.Ino, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	fc.advance(time.Second)
	calls := fc.ns.count("opendir") + fc.ns.count("readdir")
	dir, err = c.OpenDir(ctx, bob, d.Ino, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := atime(d.Ino); !got.Equal(listed) {
		t.Fatalf("OpenDir moved atime to %v", got)
	}
	ents, eof, err := dir.ReadDirPage(ctx, 0, 0)
	if err != nil || len(ents) != 1 || ents[0].Name != "sub" || !eof {
		t.Fatalf("first page: %v %v %v", ents, eof, err)
	}
	if got := fc.ns.count("opendir") + fc.ns.count("readdir") - calls; got != 1 {
		t.Fatalf("open and first page took %d requests, want 1", got)
	}
	if got, want := atime(d.Ino), fc.clock(); !got.Equal(want) {
		t.Fatalf("directory atime %v after reading OpenDir's page, want %v", got, want)
	}
	dir.Close(ctx)
	if _, err := c.OpenDir(ctx, bob, a.Ino, 0); err != syscall.ENOTDIR {
		t.Fatalf("OpenDir of a file: %v, want ENOTDIR", err)
	}
}
