package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/dataplane/dpclient"
	"github.com/octofs/octofs/metadata/mdclient"
)

var (
	alice = Cred{UID: 1000, GID: 1000}
	bob   = Cred{UID: 1001, GID: 1001}
)

func TestCheckName(t *testing.T) {
	for name, tc := range map[string]struct {
		name     string
		creating bool
		want     error
	}{
		"plain":           {"a", false, nil},
		"empty":           {"", false, syscall.ENOENT},
		"max length":      {strings.Repeat("x", MaxNameLen), true, nil},
		"too long":        {strings.Repeat("x", MaxNameLen+1), false, syscall.ENAMETOOLONG},
		"slash":           {"a/b", false, syscall.EINVAL},
		"nul":             {"a\x00b", true, syscall.EINVAL},
		"dot lookup":      {".", false, nil},
		"dot create":      {".", true, syscall.EEXIST},
		"dot dot create":  {"..", true, syscall.EEXIST},
		"dot dot lookups": {"..", false, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if got := checkName(tc.name, tc.creating); got != tc.want {
				t.Fatalf("checkName(%q, %v) = %v, want %v", tc.name, tc.creating, got, tc.want)
			}
		})
	}
}

func TestErrno(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for name, tc := range map[string]struct {
		ctx  context.Context
		err  error
		want error
	}{
		"nil":               {context.Background(), nil, nil},
		"server errno":      {context.Background(), syscall.ENOTEMPTY, syscall.ENOTEMPTY},
		"wrapped errno":     {context.Background(), fmt.Errorf("dial: %w", syscall.ECONNREFUSED), syscall.EIO},
		"namespace timeout": {context.Background(), fmt.Errorf("%w: lookup", mdclient.ErrTimeout), syscall.ETIMEDOUT},
		"no space":          {context.Background(), fmt.Errorf("%w: chunk 3", dpclient.ErrNoSpace), syscall.ENOSPC},
		"deadline":          {context.Background(), context.DeadlineExceeded, syscall.ETIMEDOUT},
		"caller cancelled":  {cancelled, context.Canceled, syscall.EINTR},
		"internal cancel":   {context.Background(), context.Canceled, syscall.EIO},
		"transport failure": {context.Background(), errors.New("rpc: connection reset"), syscall.EIO},
		"closed client":     {context.Background(), ErrClosed, syscall.EIO},
	} {
		t.Run(name, func(t *testing.T) {
			got := errno(tc.ctx, log, "op", tc.err)
			if got != tc.want {
				t.Fatalf("errno(%v) = %v, want %v", tc.err, got, tc.want)
			}
			if got != nil {
				if _, ok := got.(syscall.Errno); !ok {
					t.Fatalf("errno returned %T, want syscall.Errno", got)
				}
			}
		})
	}
}

func TestConfigNeedsAddressAndToken(t *testing.T) {
	for name, cfg := range map[string]Config{
		"no admin": {Token: "t"},
		"no token": {Admin: []string{"127.0.0.1:7400"}},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(context.Background(), cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}

func TestNewFailsWhenNoMemberAnswers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// Port 1 on loopback refuses connections.
	_, err := New(ctx, Config{Admin: []string{"127.0.0.1:1"}, Token: "t"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New = %v, want ErrUnavailable", err)
	}
}

// create makes a file as cred in the root and returns its File.
func create(t *testing.T, c *Client, cred Cred, name string, flags int) (Attr, *File) {
	t.Helper()
	a, f, err := c.Create(context.Background(), cred, cluster.RootInode, name, 0o644, flags)
	if err != nil {
		t.Fatalf("create %s: %v", name, err)
	}
	return a, f
}

func TestLowLevelErrorsAreErrnos(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	root := cluster.RootInode
	d, err := c.Mkdir(ctx, alice, root, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mkdir(ctx, alice, root, "d", 0o755); err != syscall.EEXIST {
		t.Fatalf("mkdir twice: %v, want EEXIST", err)
	}
	if _, err := c.Lookup(ctx, alice, root, "nope"); err != syscall.ENOENT {
		t.Fatalf("lookup missing: %v", err)
	}
	if _, _, err := c.Create(ctx, bob, d.Ino, "x", 0o644, syscall.O_RDWR); err != syscall.EACCES {
		t.Fatalf("bob creates in alice's 0755 directory: %v, want EACCES", err)
	}
	if _, err := c.Mkdir(ctx, alice, root, strings.Repeat("n", 256), 0o755); err != syscall.ENAMETOOLONG {
		t.Fatalf("long name: %v", err)
	}
	if err := c.Rename(ctx, alice, root, "d", root, "e", RenameExchange|RenameNoReplace); err != syscall.EINVAL {
		t.Fatalf("rename with both flags: %v", err)
	}
	if err := c.Rmdir(ctx, alice, root, "."); err != syscall.EINVAL {
		t.Fatalf("rmdir .: %v", err)
	}
	if _, err := c.Mknod(ctx, alice, root, "weird", 0o30000|0o644, 0); err != syscall.EINVAL {
		t.Fatalf("mknod of an unknown type: %v", err)
	}
}

func TestWritesVisibleInClientBeforeFlushAndToOthersAfter(t *testing.T) {
	fc := newFakeCluster()
	c1, c2 := fc.client(t), fc.client(t)
	ctx := context.Background()
	a, w := create(t, c1, alice, "f", syscall.O_RDWR)
	msg := []byte("hello, octofs")
	if n, err := w.WriteAt(ctx, msg, 0); err != nil || n != len(msg) {
		t.Fatalf("write: %d, %v", n, err)
	}
	// A second descriptor in the same client reads the write, and GetAttr
	// shows its size, before any flush.
	r, err := c1.Open(ctx, alice, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := r.ReadAt(ctx, buf, 0)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("read in the writing client: %q, %v", buf[:n], err)
	}
	if got, _ := c1.GetAttr(ctx, alice, a.Ino); got.Size != uint64(len(msg)) {
		t.Fatalf("size in the writing client before flush: %d", got.Size)
	}
	// Another client does not see it yet: nothing is committed.
	if got, _ := c2.GetAttr(ctx, alice, a.Ino); got.Size != 0 {
		t.Fatalf("size seen by another client before flush: %d", got.Size)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := fc.log.take(); ev != "persist,commit" {
		t.Fatalf("close did %q, want persist then commit", ev)
	}
	// Close-to-open: an open after the close sees all of it.
	r2, err := c2.Open(ctx, alice, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	n, err = r2.ReadAt(ctx, buf, 0)
	if err != nil || !bytes.Equal(buf[:n], msg) {
		t.Fatalf("read after close-to-open: %q, %v", buf[:n], err)
	}
	if n, err := r2.ReadAt(ctx, buf, int64(len(msg))); n != 0 || err != nil {
		t.Fatalf("read at EOF: %d, %v", n, err)
	}
	_, persisted := fc.data.bytes(a.Ino)
	if !bytes.Equal(persisted, msg) {
		t.Fatalf("persisted %q", persisted)
	}
	r.Close(ctx)
	r2.Close(ctx)
}

func TestFlushCommitsOnlyAfterPersist(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	_, f := create(t, c, alice, "f", syscall.O_WRONLY)
	fc.log.take()
	// A flush with nothing written does nothing.
	if err := f.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := fc.log.take(); ev != "" {
		t.Fatalf("empty flush did %q", ev)
	}
	f.WriteAt(ctx, []byte("x"), 0)
	// A failed persist must not be followed by a commit, and the write
	// stays pending for the next flush.
	fc.data.hook = func(ctx context.Context, op string) error {
		if op == "persist" {
			return errors.New("dataplane: owner unreachable")
		}
		return nil
	}
	if err := f.Sync(ctx); err != syscall.EIO {
		t.Fatalf("sync with a failing persist: %v, want EIO", err)
	}
	if ev := fc.log.take(); ev != "" {
		t.Fatalf("failed persist was followed by %q", ev)
	}
	fc.data.hook = nil
	if err := f.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := fc.log.take(); ev != "persist,commit" {
		t.Fatalf("sync did %q", ev)
	}
	f.Close(ctx)
}

func TestAppendWritesAtTheServersSize(t *testing.T) {
	fc := newFakeCluster()
	c1, c2 := fc.client(t), fc.client(t)
	ctx := context.Background()
	a, f1 := create(t, c1, alice, "log", syscall.O_WRONLY|syscall.O_APPEND)
	f1.WriteAt(ctx, []byte("one\n"), 0)
	// A second appender in the same client appends after the first one's
	// unflushed write; the offset passed is ignored.
	f1b, err := c1.Open(ctx, alice, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	f1b.WriteAt(ctx, []byte("two\n"), 0)
	f1.Close(ctx)
	f1b.Close(ctx)
	// Another client appends after what the server knows.
	f2, err := c2.Open(ctx, alice, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	f2.WriteAt(ctx, []byte("three\n"), 3)
	f2.Close(ctx)
	got, _ := fc.data.bytes(a.Ino)
	if string(got) != "one\ntwo\nthree\n" {
		t.Fatalf("file holds %q", got)
	}
	if at, _ := c2.GetAttr(ctx, alice, a.Ino); at.Size != uint64(len(got)) {
		t.Fatalf("size %d, want %d", at.Size, len(got))
	}
}

// TestAppendsOfTwoClientsInterleave: appends of two clients that hold the
// file open at once each get their own range, as appends of two
// processes do on a local file system (they overwrote each other when
// each appended at the size the owner had committed).
func TestAppendsOfTwoClientsInterleave(t *testing.T) {
	fc := newFakeCluster()
	c1, c2 := fc.client(t), fc.client(t)
	ctx := context.Background()
	a, f1 := create(t, c1, alice, "log", syscall.O_WRONLY|syscall.O_APPEND)
	f2, err := c2.Open(ctx, alice, a.Ino, syscall.O_WRONLY|syscall.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		f   *File
		rec string
	}{{f1, "a1\n"}, {f2, "b1\n"}, {f1, "a2\n"}, {f2, "b2\n"}} {
		if n, err := w.f.WriteAt(ctx, []byte(w.rec), 0); err != nil || n != len(w.rec) {
			t.Fatalf("append %q: %d, %v", w.rec, n, err)
		}
	}
	f2.Close(ctx)
	f1.Close(ctx)
	got, _ := fc.data.bytes(a.Ino)
	if string(got) != "a1\nb1\na2\nb2\n" {
		t.Fatalf("file holds %q", got)
	}
	if at, _ := c2.GetAttr(ctx, alice, a.Ino); at.Size != uint64(len(got)) {
		t.Fatalf("size %d, want %d", at.Size, len(got))
	}
	// A truncate puts the next append at the new end.
	f1, err = c1.Open(ctx, alice, a.Ino, syscall.O_WRONLY|syscall.O_APPEND|syscall.O_TRUNC)
	if err != nil {
		t.Fatal(err)
	}
	f1.WriteAt(ctx, []byte("c\n"), 0)
	f1.Close(ctx)
	if got, _ := fc.data.bytes(a.Ino); string(got) != "c\n" {
		t.Fatalf("after O_TRUNC the file holds %q", got)
	}
}

func TestAccessModesOfFiles(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	_, w := create(t, c, alice, "f", syscall.O_WRONLY)
	if _, err := w.ReadAt(ctx, make([]byte, 1), 0); err != syscall.EBADF {
		t.Fatalf("read of a write-only file: %v", err)
	}
	w.Close(ctx)
	if _, err := w.WriteAt(ctx, []byte("x"), 0); err != syscall.EBADF {
		t.Fatalf("write after close: %v", err)
	}
	if err := w.Close(ctx); err != syscall.EBADF {
		t.Fatalf("second close: %v", err)
	}
	a, _ := c.Lookup(ctx, alice, cluster.RootInode, "f")
	if _, err := c.Open(ctx, bob, a.Ino, syscall.O_WRONLY); err != syscall.EACCES {
		t.Fatalf("bob opens alice's 0644 file for writing: %v", err)
	}
	r, err := c.Open(ctx, bob, a.Ino, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.WriteAt(ctx, []byte("x"), 0); err != syscall.EBADF {
		t.Fatalf("write of a read-only file: %v", err)
	}
	r.Close(ctx)
}

func TestCreatorWritesFileWhoseModeForbidsIt(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	_, f, err := c.Create(ctx, alice, cluster.RootInode, "ro", 0o444, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(ctx, []byte("x"), 0); err != nil {
		t.Fatalf("write to a new 0444 file through its creating descriptor: %v", err)
	}
	if err := f.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if fc.ns.count("open") != 0 {
		t.Fatalf("create took a separate open: the creator's open must be part of the create")
	}
}

func TestTruncateFlushesPendingWritesFirst(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	a, f := create(t, c, alice, "f", syscall.O_RDWR)
	f.WriteAt(ctx, make([]byte, 100), 0)
	fc.log.take()
	if err := f.Truncate(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if ev := fc.log.take(); ev != "persist,commit,truncate" {
		t.Fatalf("truncate did %q", ev)
	}
	if got, _ := c.GetAttr(ctx, alice, a.Ino); got.Size != 10 {
		t.Fatalf("size %d after truncate", got.Size)
	}
	if f.Size() != 10 {
		t.Fatalf("open file's size %d", f.Size())
	}
	f.Close(ctx)
}

func TestAllocateModes(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	_, f := create(t, c, alice, "f", syscall.O_RDWR)
	defer f.Close(ctx)
	for name, tc := range map[string]struct {
		mode     uint32
		off, len uint64
		want     error
		size     uint64
	}{
		"grow":               {0, 0, 4096, nil, 4096},
		"keep size":          {FallocKeepSize, 0, 1 << 20, nil, 4096},
		"punch":              {FallocPunchHole | FallocKeepSize, 0, 10, nil, 4096},
		"punch without keep": {FallocPunchHole, 0, 10, syscall.EOPNOTSUPP, 4096},
		"zero range grows":   {FallocZeroRange, 4096, 4096, nil, 8192},
		"unknown mode":       {0x40, 0, 1, syscall.EOPNOTSUPP, 8192},
		"zero length":        {0, 0, 0, syscall.EINVAL, 8192},
		"overflow":           {0, 1 << 62, 1 << 62, syscall.EFBIG, 8192},
	} {
		t.Run(name, func(t *testing.T) {
			if err := f.Allocate(ctx, tc.mode, tc.off, tc.len); err != tc.want {
				t.Fatalf("Allocate = %v, want %v", err, tc.want)
			}
		})
	}
	// Map order is random: check the size rule directly.
	if f.Size() != 8192 {
		t.Fatalf("size %d after the allocations, want 8192", f.Size())
	}
}

func TestBlockingLockWaitsForRelease(t *testing.T) {
	fc := newFakeCluster()
	c1, c2 := fc.client(t), fc.client(t)
	ctx := context.Background()
	a, f1 := create(t, c1, alice, "f", syscall.O_RDWR)
	f2, err := c2.Open(ctx, alice, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	whole := Lock{Kind: LockPOSIX, Type: LockWrite, Owner: 1, End: LockEOF}
	if err := f1.SetLk(ctx, whole, false); err != nil {
		t.Fatal(err)
	}
	other := whole
	other.Owner = 2
	if err := f2.SetLk(ctx, other, false); err != syscall.EAGAIN {
		t.Fatalf("conflicting non-blocking lock: %v, want EAGAIN", err)
	}
	if got, err := f2.GetLk(ctx, other); err != nil || got.Owner != 1 || got.Type != LockWrite {
		t.Fatalf("GetLk = %+v, %v", got, err)
	}
	// The blocking request polls; release the lock once it has polled
	// at least twice, and it must then get it.
	done := make(chan error, 1)
	before := fc.ns.count("setlk")
	go func() { done <- f2.SetLk(ctx, other, true) }()
	waitCalls(t, fc.ns, "setlk", before+2)
	unlock := whole
	unlock.Type = LockUnlock
	if err := f1.SetLk(ctx, unlock, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("blocking lock: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("blocking lock not granted within 10s of the release")
	}
	// A blocking request ends with its context: EINTR.
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- f1.SetLk(cctx, whole, true) }()
	before = fc.ns.count("setlk")
	waitCalls(t, fc.ns, "setlk", before+1)
	cancel()
	if err := <-done; err != syscall.EINTR {
		t.Fatalf("cancelled blocking lock: %v, want EINTR", err)
	}
	f1.Close(ctx)
	f2.Close(ctx)
}

func TestCloseReleasesLocksOfTheFilesOwner(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	a, f1 := create(t, c, alice, "f", syscall.O_RDWR)
	if err := f1.SetLk(ctx, Lock{Kind: LockFlock, Type: LockWrite}, false); err != nil {
		t.Fatal(err)
	}
	f2, _ := c.Open(ctx, alice, a.Ino, syscall.O_RDWR)
	if err := f2.SetLk(ctx, Lock{Kind: LockFlock, Type: LockWrite}, false); err != syscall.EAGAIN {
		t.Fatalf("second flock through another open file: %v, want EAGAIN", err)
	}
	f1.Close(ctx)
	if err := f2.SetLk(ctx, Lock{Kind: LockFlock, Type: LockWrite}, false); err != nil {
		t.Fatalf("flock after the holder closed: %v", err)
	}
	f2.Close(ctx)
}

func TestOpensRegisteredOncePerFileAndReleased(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	a, f := create(t, c, alice, "f", syscall.O_RDWR)
	g, _ := c.Open(ctx, alice, a.Ino, syscall.O_RDONLY)
	// Unlinked while open: the inode lives until the last release.
	if err := c.Unlink(ctx, alice, cluster.RootInode, "f"); err != nil {
		t.Fatal(err)
	}
	f.WriteAt(ctx, []byte("still here"), 0)
	f.Close(ctx)
	buf := make([]byte, 10)
	if n, err := g.ReadAt(ctx, buf, 0); err != nil || string(buf[:n]) != "still here" {
		t.Fatalf("read of an unlinked open file: %q, %v", buf[:n], err)
	}
	g.Close(ctx)
	if fc.ns.count("release") != 2 {
		t.Fatalf("%d releases for two opens, want 2", fc.ns.count("release"))
	}
	if _, err := c.GetAttr(ctx, alice, a.Ino); err != syscall.ESTALE {
		t.Fatalf("inode after the last close of an unlinked file: %v, want ESTALE", err)
	}
	if fc.data.forgets[a.Ino] != 1 {
		t.Fatalf("extent cache dropped %d times for one first open", fc.data.forgets[a.Ino])
	}
}

func TestOperationsEndWithinOpTimeout(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t, func(cfg *Config) { cfg.OpTimeout = 100 * time.Millisecond })
	ctx := context.Background()
	_, f := create(t, c, alice, "f", syscall.O_RDWR)
	// A cluster that stops answering: every call blocks until its context
	// ends, as a call to a dead node does.
	hang := func(ctx context.Context, op string) error {
		<-ctx.Done()
		return ctx.Err()
	}
	fc.ns.hook, fc.data.hook = hang, hang
	start := time.Now()
	if _, err := c.GetAttr(ctx, alice, cluster.RootInode); err != syscall.ETIMEDOUT {
		t.Fatalf("getattr: %v, want ETIMEDOUT", err)
	}
	if _, err := f.WriteAt(ctx, []byte("x"), 0); err != syscall.ETIMEDOUT {
		t.Fatalf("write: %v, want ETIMEDOUT", err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("two timed-out calls took %v", el)
	}
	// The caller's own cancellation is EINTR.
	cctx, cancel := context.WithCancel(ctx)
	go cancel()
	if _, err := c.Lookup(cctx, alice, cluster.RootInode, "f"); err != syscall.EINTR {
		t.Fatalf("cancelled lookup: %v, want EINTR", err)
	}
	fc.ns.hook, fc.data.hook = nil, nil
	f.Close(ctx)
}

func TestClosedClientFailsWithEIO(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	c.Close()
	if _, err := c.GetAttr(context.Background(), alice, cluster.RootInode); err != syscall.EIO {
		t.Fatalf("getattr on a closed client: %v", err)
	}
	if fc.ns.count("getattr") != 0 {
		t.Fatal("a closed client sent a request")
	}
}

func TestCachesOffByDefault(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	c.Mkdir(ctx, alice, cluster.RootInode, "d", 0o755)
	for range 3 {
		if _, err := c.Lookup(ctx, alice, cluster.RootInode, "d"); err != nil {
			t.Fatal(err)
		}
	}
	if n := fc.ns.count("lookup"); n != 3 {
		t.Fatalf("%d lookups reached the server for 3 calls with caches off", n)
	}
}

func TestEntryAndAttrCache(t *testing.T) {
	fc := newFakeCluster()
	ttl := func(cfg *Config) { cfg.Cache = CacheConfig{EntryTTL: time.Second, AttrTTL: time.Second} }
	c, other := fc.client(t, ttl), fc.client(t)
	ctx := context.Background()
	root := cluster.RootInode
	if _, err := c.Mkdir(ctx, alice, root, "d", 0o755); err != nil {
		t.Fatal(err)
	}
	lookups := func() int { return fc.ns.count("lookup") }
	n0 := lookups()
	a, err := c.Lookup(ctx, alice, root, "d")
	if err != nil || lookups() != n0 {
		t.Fatalf("lookup right after mkdir: %v, %d server lookups (want the cached entry)", err, lookups()-n0)
	}
	// Another client's change is not seen until the TTL passes.
	if err := other.Rmdir(ctx, alice, root, "d"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, alice, root, "d"); err != nil {
		t.Fatalf("cached lookup within the TTL: %v", err)
	}
	fc.advance(time.Second)
	if _, err := c.Lookup(ctx, alice, root, "d"); err != syscall.ENOENT {
		t.Fatalf("lookup after the TTL: %v, want ENOENT", err)
	}
	// The client's own removal invalidates at once.
	c.Mkdir(ctx, alice, root, "e", 0o755)
	c.Lookup(ctx, alice, root, "e")
	if err := c.Rmdir(ctx, alice, root, "e"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lookup(ctx, alice, root, "e"); err != syscall.ENOENT {
		t.Fatalf("lookup after own rmdir: %v", err)
	}
	// SetAttr refreshes the cached attributes.
	c.Mkdir(ctx, alice, root, "f", 0o755)
	fa, _ := c.Lookup(ctx, alice, root, "f")
	if _, err := c.SetAttr(ctx, alice, fa.Ino, SetAttrIn{Valid: SetMode, Mode: 0o700}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.GetAttr(ctx, alice, fa.Ino); got.Mode&0o777 != 0o700 {
		t.Fatalf("mode after own chmod: %o", got.Mode)
	}
	_ = a
}

// TestAttrCacheKnownInode: with the attribute cache on and the entry
// cache off (so the client cannot tell which inode a name named), a
// removal that names its inode (UnlinkKnown: what the FUSE mount sends)
// drops that inode's cached attributes, whose link count changed.
// (RenameKnown drops them too, for the ctime, which client.Memory does
// not keep.)
func TestAttrCacheKnownInode(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t, func(cfg *Config) { cfg.Cache = CacheConfig{AttrTTL: time.Minute} })
	ctx := context.Background()
	root := cluster.RootInode
	f, file, err := c.Create(ctx, alice, root, "f", 0o644, syscall.O_WRONLY)
	if err != nil {
		t.Fatal(err)
	}
	file.Close(ctx)
	if _, err := c.Link(ctx, alice, f.Ino, root, "g"); err != nil {
		t.Fatal(err)
	}
	nlink := func() uint32 {
		t.Helper()
		a, err := c.GetAttr(ctx, alice, f.Ino)
		if err != nil {
			t.Fatal(err)
		}
		return a.Nlink
	}
	if n := nlink(); n != 2 {
		t.Fatalf("nlink %d after link, want 2", n)
	}
	if err := c.UnlinkKnown(ctx, alice, root, "g", f.Ino); err != nil {
		t.Fatal(err)
	}
	if n := nlink(); n != 1 {
		t.Fatalf("nlink %d after this client unlinked one of two names, want 1", n)
	}
}

func TestTTLCacheBounded(t *testing.T) {
	now := time.Unix(0, 0)
	c := newTTLCache[uint64](time.Minute, 8, func() time.Time { return now })
	for i := range uint64(100) {
		c.put(i, Attr{Ino: i})
		if c.len() > 8 {
			t.Fatalf("cache holds %d entries, bound 8", c.len())
		}
	}
	if _, ok := c.get(99); !ok {
		t.Fatal("the newest entry was evicted")
	}
	now = now.Add(time.Minute)
	if _, ok := c.get(99); ok {
		t.Fatal("entry served after its TTL")
	}
	var nilCache *ttlCache[uint64]
	nilCache.put(1, Attr{})
	if _, ok := nilCache.get(1); ok {
		t.Fatal("a disabled cache returned an entry")
	}
}

func TestStatFSAndXattrs(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	ctx := context.Background()
	s, err := c.StatFS(ctx)
	if err != nil || s.Blocks == 0 || s.NameLen != MaxNameLen {
		t.Fatalf("statfs = %+v, %v", s, err)
	}
	a, f := create(t, c, alice, "x", syscall.O_RDWR)
	f.Close(ctx)
	if err := c.SetXattr(ctx, alice, a.Ino, "user.k", []byte("v"), XattrReplace); err != syscall.ENODATA {
		t.Fatalf("replace of a missing xattr: %v", err)
	}
	if err := c.SetXattr(ctx, alice, a.Ino, "user.k", []byte("v"), XattrCreate); err != nil {
		t.Fatal(err)
	}
	if v, err := c.GetXattr(ctx, alice, a.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Fatalf("getxattr = %q, %v", v, err)
	}
	if l, err := c.ListXattr(ctx, alice, a.Ino); err != nil || len(l) != 1 || l[0] != "user.k" {
		t.Fatalf("listxattr = %v, %v", l, err)
	}
	if err := c.RemoveXattr(ctx, alice, a.Ino, "user.k"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetXattr(ctx, alice, a.Ino, "user.k"); err != syscall.ENODATA {
		t.Fatalf("getxattr after remove: %v", err)
	}
}

// waitCalls waits until the fake namespace has served at least n calls
// of op, failing the test after 10s.
func waitCalls(t *testing.T, ns *memNS, op string, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		ns.mu.Lock()
		got, changed := ns.calls[op], ns.changed
		ns.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-changed:
		case <-timeout:
			t.Fatalf("%d %s calls within 10s, want %d", got, op, n)
		}
	}
}

func TestLockRangesSplitAndSessionEndReleases(t *testing.T) {
	fc := newFakeCluster()
	c1, c2 := fc.client(t), fc.client(t)
	ctx := context.Background()
	a, f1 := create(t, c1, alice, "f", syscall.O_RDWR)
	f2, err := c2.Open(ctx, alice, a.Ino, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	// The same owner number in two clients is two owners.
	lk := func(typ int16, start, end uint64) Lock {
		return Lock{Kind: LockPOSIX, Type: typ, Owner: 7, Start: start, End: end}
	}
	if err := f1.SetLk(ctx, lk(LockWrite, 0, 99), false); err != nil {
		t.Fatal(err)
	}
	if err := f1.SetLk(ctx, lk(LockUnlock, 10, 19), false); err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		start, end uint64
		want       error
	}{
		"the hole":        {10, 19, nil},
		"left piece":      {0, 9, syscall.EAGAIN},
		"right piece":     {20, 20, syscall.EAGAIN},
		"beyond the lock": {100, LockEOF, nil},
	} {
		t.Run(name, func(t *testing.T) {
			err := f2.SetLk(ctx, lk(LockRead, tc.start, tc.end), false)
			if err != tc.want {
				t.Fatalf("SetLk [%d, %d] = %v, want %v", tc.start, tc.end, err, tc.want)
			}
		})
	}
	// Reads share.
	if err := f2.SetLk(ctx, Lock{Kind: LockPOSIX, Type: LockRead, Owner: 8, Start: 10, End: 19}, false); err != nil {
		t.Fatalf("second read lock on a read-locked range: %v", err)
	}
	// When c1's session ends, its locks go with it.
	c1.Close()
	if err := f2.SetLk(ctx, lk(LockWrite, 0, 9), false); err != nil {
		t.Fatalf("lock after the holder's client closed: %v", err)
	}
	f2.Close(ctx)
	_ = f1
}

// TestDirAfterCreate: with KeepDirsAfterCreate, the GetAttr of a
// directory that follows a creation in it (as the FUSE kernel sends) is
// answered from the creation's reply, once, within the time given; a
// change of the directory that overtakes the reply, or the time running
// out, sends the request.
func TestDirAfterCreate(t *testing.T) {
	fc := newFakeCluster()
	c := fc.client(t)
	c.KeepDirsAfterCreate(time.Second)
	ctx := context.Background()
	getattrs := func() int {
		fc.ns.mu.Lock()
		defer fc.ns.mu.Unlock()
		return fc.ns.calls["getattr"]
	}
	d, err := c.Mkdir(ctx, alice, cluster.RootInode, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	fc.advance(time.Millisecond)
	if _, err := c.Mkdir(ctx, alice, d.Ino, "sub", 0o755); err != nil {
		t.Fatal(err)
	}
	n := getattrs()
	got, err := c.GetAttr(ctx, alice, d.Ino)
	if err != nil || getattrs() != n {
		t.Fatalf("getattr after mkdir: %v, %d requests, want none", err, getattrs()-n)
	}
	want, err := c.GetAttr(ctx, alice, d.Ino)
	if err != nil || getattrs() != n+1 {
		t.Fatalf("second getattr: %v, %d requests, want 1", err, getattrs()-n)
	}
	if got != want || got.Nlink != 3 || !got.Mtime.After(d.Mtime) {
		t.Fatalf("kept %+v, the directory is %+v (nlink 3, mtime after %v)", got, want, d.Mtime)
	}

	// Overtaken: a change of the directory lands between the request
	// and the keeping of its reply.
	gen := c.fresh.gen(d.Ino)
	c.dropAttrs(d.Ino)
	c.fresh.put(d.Ino, got, gen)
	n = getattrs()
	if _, err := c.GetAttr(ctx, alice, d.Ino); err != nil || getattrs() != n+1 {
		t.Fatalf("getattr after an overtaken reply: %v, %d requests, want 1", err, getattrs()-n)
	}

	// Expired.
	if _, f, err := c.Create(ctx, alice, d.Ino, "f", 0o644, syscall.O_RDWR); err != nil {
		t.Fatal(err)
	} else {
		defer f.Close(ctx)
	}
	fc.advance(2 * time.Second)
	n = getattrs()
	if _, err := c.GetAttr(ctx, alice, d.Ino); err != nil || getattrs() != n+1 {
		t.Fatalf("getattr after the time ran out: %v, %d requests, want 1", err, getattrs()-n)
	}

	// Off by default.
	c2 := fc.client(t)
	if _, err := c2.Mkdir(ctx, alice, d.Ino, "sub2", 0o755); err != nil {
		t.Fatal(err)
	}
	n = getattrs()
	if _, err := c2.GetAttr(ctx, alice, d.Ino); err != nil || getattrs() != n+1 {
		t.Fatalf("getattr without KeepDirsAfterCreate: %v, %d requests, want 1", err, getattrs()-n)
	}
}
