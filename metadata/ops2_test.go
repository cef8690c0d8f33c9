package metadata_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

func TestXattr(t *testing.T) {
	f := newFixture(t)
	file := f.file(rootIno, "f", 0o666, alice)
	sym, err := f.cl.Symlink(bg, root, rootIno, "s", "f")
	require.NoError(t, err)
	ino := file.Ino
	tests := []struct {
		name string
		op   func() error
		want syscall.Errno
	}{
		{"get missing", func() error { _, err := f.cl.GetXattr(bg, alice, ino, "user.a", 0); return err }, syscall.ENODATA},
		{"replace missing", func() error { return f.cl.SetXattr(bg, alice, ino, "user.a", []byte("1"), wire.XattrReplace) }, syscall.ENODATA},
		{"create", func() error { return f.cl.SetXattr(bg, alice, ino, "user.a", []byte("1"), wire.XattrCreate) }, 0},
		{"create existing", func() error { return f.cl.SetXattr(bg, alice, ino, "user.a", []byte("2"), wire.XattrCreate) }, syscall.EEXIST},
		{"replace existing", func() error { return f.cl.SetXattr(bg, alice, ino, "user.a", []byte("22"), wire.XattrReplace) }, 0},
		{"bad flags", func() error { return f.cl.SetXattr(bg, alice, ino, "user.a", nil, 4) }, syscall.EINVAL},
		{"empty value", func() error { return f.cl.SetXattr(bg, alice, ino, "user.empty", nil, 0) }, 0},
		{"empty name", func() error { return f.cl.SetXattr(bg, alice, ino, "", nil, 0) }, syscall.ERANGE},
		{"256-byte name", func() error { return f.cl.SetXattr(bg, alice, ino, "user."+strings.Repeat("n", 251), nil, 0) }, syscall.ERANGE},
		{"255-byte name", func() error { return f.cl.SetXattr(bg, alice, ino, "user."+strings.Repeat("n", 250), nil, 0) }, 0},
		{"value too large", func() error { return f.cl.SetXattr(bg, alice, ino, "user.big", make([]byte, 65537), 0) }, syscall.E2BIG},
		{"largest value", func() error { return f.cl.SetXattr(bg, alice, ino, "user.big", make([]byte, 65536), 0) }, 0},
		{"unknown namespace", func() error { return f.cl.SetXattr(bg, alice, ino, "foo.a", nil, 0) }, syscall.EOPNOTSUPP},
		{"namespace only", func() error { return f.cl.SetXattr(bg, alice, ino, "user.", nil, 0) }, syscall.EINVAL},
		{"trusted namespace only", func() error { return f.cl.SetXattr(bg, root, ino, "trusted.", nil, 0) }, syscall.EINVAL},
		{"get of a namespace only", func() error { _, err := f.cl.GetXattr(bg, alice, ino, "security.", 0); return err }, syscall.EINVAL},
		{"remove of a namespace only", func() error { return f.cl.RemoveXattr(bg, alice, ino, "user.") }, syscall.EINVAL},
		{"system namespace only", func() error { return f.cl.SetXattr(bg, root, ino, "system.", nil, 0) }, syscall.EOPNOTSUPP},
		{"posix acl: an empty value removes it", func() error { return f.cl.SetXattr(bg, alice, ino, "system.posix_acl_access", nil, 0) }, 0},
		{"other system xattrs", func() error { return f.cl.SetXattr(bg, alice, ino, "system.other", []byte("x"), 0) }, syscall.EOPNOTSUPP},
		{"buffer too small", func() error { _, err := f.cl.GetXattr(bg, alice, ino, "user.a", 1); return err }, syscall.ERANGE},
		{"list buffer too small", func() error { _, err := f.cl.ListXattr(bg, alice, ino, 3); return err }, syscall.ERANGE},
		{"user xattr on a symlink", func() error { return f.cl.SetXattr(bg, root, sym.Ino, "user.a", nil, 0) }, syscall.EPERM},
		{"read user xattr of a symlink", func() error { _, err := f.cl.GetXattr(bg, root, sym.Ino, "user.a", 0); return err }, syscall.ENODATA},
		{"trusted by root", func() error { return f.cl.SetXattr(bg, root, ino, "trusted.t", []byte("x"), 0) }, 0},
		{"trusted read by a user", func() error { _, err := f.cl.GetXattr(bg, alice, ino, "trusted.t", 0); return err }, syscall.ENODATA},
		{"remove missing", func() error { return f.cl.RemoveXattr(bg, alice, ino, "user.zz") }, syscall.ENODATA},
		{"remove", func() error { return f.cl.RemoveXattr(bg, alice, ino, "user.empty") }, 0},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, errnoOf(t, tc.op()), tc.name)
	}
	v, err := f.cl.GetXattr(bg, alice, ino, "user.a", 2)
	require.NoError(t, err)
	require.Equal(t, []byte("22"), v)
	names, err := f.cl.ListXattr(bg, alice, ino, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"user.a", "user.big", "user." + strings.Repeat("n", 250)}, names, "trusted.* is hidden from users")
	names, err = f.cl.ListXattr(bg, root, ino, 0)
	require.NoError(t, err)
	require.Contains(t, names, "trusted.t")
	// The per-inode total is bounded.
	var last error
	for i := 0; i < 40 && last == nil; i++ {
		last = f.cl.SetXattr(bg, root, ino, "user.fill"+strings.Repeat("x", i), make([]byte, 65536), 0)
	}
	require.Equal(t, syscall.ENOSPC, last)
}

func TestTimes(t *testing.T) {
	now := time.Unix(1_700_000_000, 500)
	var clockMu = make(chan struct{}, 1)
	clockMu <- struct{}{}
	clock := func() time.Time {
		<-clockMu
		defer func() { clockMu <- struct{}{} }()
		return now
	}
	advance := func(d time.Duration) {
		<-clockMu
		now = now.Add(d)
		clockMu <- struct{}{}
	}
	c := metatest.Start(t, metatest.Config{Service: func(i int, cfg *metadata.Config) { cfg.Clock = clock }})
	cl := c.Client()
	f := &fixture{t: t, cl: cl}
	d := f.mkdir(rootIno, "d", 0o777, root)
	a, err := cl.Create(bg, alice, d.Ino, "f", 0o644, 0, false, 0)
	require.NoError(t, err)
	t0 := wire.TimespecOf(now)
	require.Equal(t, t0, a.Mtime)
	require.Equal(t, t0, a.Btime)
	dir := f.attr(d.Ino)
	require.Equal(t, t0, dir.Mtime, "creating an entry sets the directory's mtime")

	advance(time.Second)
	t1 := wire.TimespecOf(now)
	a, err = cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: a.Ino, Valid: wire.SetAtimeNow})
	require.NoError(t, err)
	require.Equal(t, t1, a.Atime, "UTIME_NOW")
	require.Equal(t, t0, a.Mtime, "UTIME_OMIT leaves mtime")
	require.Equal(t, t1, a.Ctime, "any change sets ctime")

	advance(time.Second)
	a, err = cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: a.Ino, Valid: wire.SetMtime, Mtime: wire.Timespec{Sec: -5, Nsec: 7}})
	require.NoError(t, err)
	require.Equal(t, wire.Timespec{Sec: -5, Nsec: 7}, a.Mtime, "explicit time, before 1970")
	require.Equal(t, wire.TimespecOf(now), a.Ctime)

	advance(time.Second)
	before := a
	a, err = cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: a.Ino})
	require.NoError(t, err)
	require.Equal(t, before, a, "both omitted: nothing changes, not even ctime")

	advance(time.Second)
	_, err = cl.Link(bg, alice, a.Ino, d.Ino, "g")
	require.NoError(t, err)
	a = f.attr(a.Ino)
	require.Equal(t, wire.TimespecOf(now), a.Ctime, "link sets ctime")
	require.Equal(t, uint32(2), a.Nlink)

	advance(time.Second)
	require.Equal(t, syscall.EACCES, cl.Rename(bg, alice, rr(d.Ino, "g", rootIno, "h", 0)), "alice may not write the root")
	require.NoError(t, cl.Rename(bg, alice, rr(d.Ino, "g", d.Ino, "h", 0)))
	require.Equal(t, wire.TimespecOf(now), f.attr(a.Ino).Ctime, "rename sets the inode's ctime")
	require.Equal(t, wire.TimespecOf(now), f.attr(d.Ino).Mtime, "and the directory's mtime")
}

func TestLinkCounts(t *testing.T) {
	f := newFixture(t)
	d := f.mkdir(rootIno, "d", 0o777, root)
	a := f.file(d.Ino, "f", 0o644, root)
	for i := range 5 {
		l, err := f.cl.Link(bg, root, a.Ino, rootIno, fmt.Sprintf("l%d", i))
		require.NoError(t, err)
		require.Equal(t, uint32(2+i), l.Nlink)
	}
	_, err := f.cl.Link(bg, root, a.Ino, rootIno, "l0")
	require.Equal(t, syscall.EEXIST, err)
	_, err = f.cl.Link(bg, root, d.Ino, rootIno, "dirlink")
	require.Equal(t, syscall.EPERM, err)
	_, err = f.cl.Link(bg, root, a.Ino, a.Ino, "x")
	require.Equal(t, syscall.ENOTDIR, err)
	for i := range 5 {
		require.NoError(t, f.cl.Unlink(bg, root, rootIno, fmt.Sprintf("l%d", i), 0))
	}
	require.Equal(t, uint32(1), f.attr(a.Ino).Nlink)
	require.Equal(t, uint32(3), f.attr(rootIno).Nlink)
}

// TestOrphansAndData: an unlinked file stays while open; its data is
// freed when the last open goes (or at once when it is not open); a
// truncation frees the data beyond the size first, and is redone after
// a restart if the data service failed meanwhile.
func TestOrphansAndData(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	f := &fixture{t: t, cl: cl}
	a := f.file(rootIno, "f", 0o644, root)
	_, err := cl.WriteCommit(bg, root, a.Ino, 5000, wire.Timespec{})
	require.NoError(t, err)
	_, err = cl.Open(bg, root, a.Ino, a.Gen, wire.OpenReadWrite, false)
	require.NoError(t, err)
	require.NoError(t, cl.Unlink(bg, root, rootIno, "f", 0))
	o, err := cl.GetAttr(bg, root, a.Ino, a.Gen)
	require.NoError(t, err, "an open orphan still answers getattr")
	require.Equal(t, uint32(0), o.Nlink)
	_, err = cl.WriteCommit(bg, root, a.Ino, 9000, wire.Timespec{})
	require.NoError(t, err, "and takes writes")
	require.Zero(t, c.Data.FreedCount(a.Ino))
	require.NoError(t, cl.Release(bg, a.Ino, wire.OpenReadWrite))
	require.Eventually(t, func() bool { return c.Data.FreedCount(a.Ino) == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		_, err := cl.GetAttr(bg, root, a.Ino, a.Gen)
		return err == syscall.ESTALE
	}, 10*time.Second, time.Millisecond, "a freed inode's handle is stale")

	// Truncation: while the data service fails, the size stays; it is
	// published once the data beyond it is freed, also when the owner
	// restarts in between.
	for _, restart := range []bool{false, true} {
		b := f.file(rootIno, fmt.Sprintf("g%v", restart), 0o644, root)
		_, err = cl.WriteCommit(bg, root, b.Ino, 10000, wire.Timespec{})
		require.NoError(t, err)
		c.Data.SetFail(func(ino uint64) error {
			if ino == b.Ino {
				return errors.New("data service down")
			}
			return nil
		})
		done := make(chan error, 1)
		go func() {
			_, err := cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: b.Ino, Valid: wire.SetSize, Size: 100})
			done <- err
		}()
		require.Eventually(t, func() bool { return c.Data.Attempts(b.Ino) >= 2 }, 10*time.Second, time.Millisecond)
		require.Equal(t, uint64(10000), f.attr(b.Ino).Size, "the size waits for the data")
		owner := ownerIndex(c, b.Ino)
		if restart {
			c.Kill(owner)
		}
		c.Data.SetFail(nil)
		if restart {
			c.Restart(owner, nil)
		}
		require.NoError(t, <-done)
		require.Equal(t, uint64(100), f.attr(b.Ino).Size)
		require.Contains(t, c.Data.TruncatedTo(b.Ino), uint64(100))
	}
}

// ownerIndex is the index of the node owning ino's partition.
func ownerIndex(c *metatest.Cluster, ino uint64) int {
	id := c.Maps.Current().Partitions[cluster.PartitionOf(ino)]
	for i, n := range c.Nodes {
		if n.ID == id {
			return i
		}
	}
	return -1
}

func TestAdvisoryLocks(t *testing.T) {
	c := metatest.Start(t, metatest.Config{Service: func(i int, cfg *metadata.Config) {
		cfg.SessionLease = 200 * time.Millisecond
		cfg.ResolveInterval = 20 * time.Millisecond
	}})
	one, two := c.Client(), c.Client()
	f := &fixture{t: t, cl: one}
	a := f.file(rootIno, "f", 0o666, root)
	lk := func(typ uint8, start, end uint64) wire.Lock {
		return wire.Lock{Kind: wire.LockPOSIX, Type: typ, Owner: 1, Start: start, End: end, PID: 42}
	}
	require.NoError(t, one.SetLk(bg, a.Ino, lk(wire.LockWrite, 0, 99)))
	require.Equal(t, syscall.EAGAIN, two.SetLk(bg, a.Ino, lk(wire.LockRead, 50, 60)))
	got, err := two.GetLk(bg, a.Ino, lk(wire.LockRead, 50, 60))
	require.NoError(t, err)
	require.Equal(t, lk(wire.LockWrite, 0, 99), got)
	require.NoError(t, two.SetLk(bg, a.Ino, lk(wire.LockRead, 100, 200)), "no overlap")
	// Unlocking the middle splits the lock.
	require.NoError(t, one.SetLk(bg, a.Ino, lk(wire.LockUnlock, 40, 59)))
	require.NoError(t, two.SetLk(bg, a.Ino, lk(wire.LockWrite, 45, 55)))
	require.Equal(t, syscall.EAGAIN, two.SetLk(bg, a.Ino, lk(wire.LockWrite, 35, 45)))
	require.Equal(t, syscall.EAGAIN, two.SetLk(bg, a.Ino, lk(wire.LockWrite, 60, 61)))
	// Read locks share.
	require.NoError(t, one.SetLk(bg, a.Ino, lk(wire.LockRead, 150, 160)))
	// flock is a separate space.
	fl := wire.Lock{Kind: wire.LockFlock, Type: wire.LockWrite, Owner: 9, End: wire.LockEOF}
	require.NoError(t, one.SetLk(bg, a.Ino, fl))
	require.Equal(t, syscall.EAGAIN, two.SetLk(bg, a.Ino, fl))
	// A client that stops renewing loses its locks after the lease.
	require.Eventually(t, func() bool { return two.SetLk(bg, a.Ino, fl) == nil }, 10*time.Second, 10*time.Millisecond)
	_, err = one.GetAttr(bg, root, a.Ino, 0)
	require.NoError(t, err)
}

func TestStatFSAndNull(t *testing.T) {
	f := newFixture(t)
	st, err := f.cl.StatFS(bg)
	require.NoError(t, err)
	require.Equal(t, uint32(255), st.NameLen)
	require.Positive(t, st.Blocks)
	require.GreaterOrEqual(t, st.Blocks, st.Bfree)
	require.GreaterOrEqual(t, st.Files, uint64(1))
	require.NoError(t, f.cl.Null(bg, metatest.NodeName(0)))
	lease, err := f.cl.KeepAlive(bg, metatest.NodeName(1))
	require.NoError(t, err)
	require.Positive(t, lease)
	v, err := f.cl.GetXattr(bg, root, rootIno, "user.none", 0)
	require.Equal(t, syscall.ENODATA, err)
	require.True(t, bytes.Equal(nil, v))
}

// TestLinkLimit: past the link limit, link, mkdir and a rename that
// moves a directory to another parent answer EMLINK and change nothing;
// under it they succeed. The limit is lowered to 4 so the test is quick;
// the default is ext4's 65000.
func TestLinkLimit(t *testing.T) {
	const limit = 4
	c := metatest.Start(t, metatest.Config{Service: func(_ int, cfg *metadata.Config) { cfg.MaxLinks = limit }})
	cl := c.Client()
	f := &fixture{t: t, cl: cl}

	file := f.file(rootIno, "f", 0o644, root)
	for i := 2; i <= limit; i++ {
		a, err := cl.Link(bg, root, file.Ino, rootIno, fmt.Sprintf("f%d", i))
		require.NoError(t, err)
		require.Equal(t, uint32(i), a.Nlink)
	}
	_, err := cl.Link(bg, root, file.Ino, rootIno, "one-too-many")
	require.ErrorIs(t, err, syscall.EMLINK)
	require.Equal(t, uint32(limit), f.attr(file.Ino).Nlink)
	_, err = cl.Lookup(bg, root, rootIno, "one-too-many")
	require.ErrorIs(t, err, syscall.ENOENT, "a refused link left an entry")

	// A directory has 2 links plus one per subdirectory.
	d := f.mkdir(rootIno, "d", 0o755, root)
	for i := 0; i < limit-2; i++ {
		_, err := cl.Mkdir(bg, root, d.Ino, fmt.Sprintf("sub%d", i), 0o755)
		require.NoError(t, err)
	}
	require.Equal(t, uint32(limit), f.attr(d.Ino).Nlink)
	_, err = cl.Mkdir(bg, root, d.Ino, "full", 0o755)
	require.ErrorIs(t, err, syscall.EMLINK)

	// Moving a directory into d would add a link; a file would not.
	other := f.mkdir(rootIno, "other", 0o755, root)
	_, err = cl.Mkdir(bg, root, other.Ino, "mover", 0o755)
	require.NoError(t, err)
	err = cl.Rename(bg, root, wire.RenameRequest{SrcParent: other.Ino, SrcName: "mover", DstParent: d.Ino, DstName: "mover"})
	require.ErrorIs(t, err, syscall.EMLINK)
	_, err = cl.Lookup(bg, root, other.Ino, "mover")
	require.NoError(t, err, "a refused rename moved the directory")
	require.NoError(t, cl.Rename(bg, root, wire.RenameRequest{SrcParent: rootIno, SrcName: "f", DstParent: d.Ino, DstName: "f"}))
	require.Equal(t, uint32(limit), f.attr(d.Ino).Nlink)
}

// TestReleaseTrimsAhead: the release of a write open flagged
// ReleaseTrimAhead has the data past the file's size freed once no open
// is left, without touching the file's times; with an open left, or from
// a release that ended no write open of its sender, nothing happens.
func TestReleaseTrimsAhead(t *testing.T) {
	c := metatest.Start(t, metatest.Config{})
	cl := c.Client()
	f := &fixture{t: t, cl: cl}
	a := f.file(rootIno, "f", 0o644, root)
	_, err := cl.WriteCommit(bg, root, a.Ino, 5000, wire.Timespec{Sec: 7})
	require.NoError(t, err)
	_, err = cl.Open(bg, root, a.Ino, a.Gen, wire.OpenReadWrite, false)
	require.NoError(t, err)
	_, err = cl.Open(bg, root, a.Ino, a.Gen, wire.OpenReadOnly, false)
	require.NoError(t, err)
	before := f.attr(a.Ino)
	require.NoError(t, cl.Release(bg, a.Ino, wire.OpenReadOnly|wire.ReleaseTrimAhead))
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, c.Data.TruncatedTo(a.Ino), "an open is left")
	require.NoError(t, cl.Release(bg, a.Ino, wire.OpenReadWrite))
	require.NoError(t, c.Client().Release(bg, a.Ino, wire.OpenReadWrite|wire.ReleaseTrimAhead))
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, c.Data.TruncatedTo(a.Ino), "no open is left, but the flagged release ended no open of its sender")
	_, err = cl.Open(bg, root, a.Ino, a.Gen, wire.OpenReadWrite, false)
	require.NoError(t, err)
	require.NoError(t, cl.Release(bg, a.Ino, wire.OpenReadWrite|wire.ReleaseTrimAhead))
	require.Eventually(t, func() bool { return len(c.Data.TruncatedTo(a.Ino)) == 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, []uint64{5000}, c.Data.TruncatedTo(a.Ino), "trimmed to its own size")
	require.Eventually(t, func() bool {
		after, err := cl.GetAttr(bg, root, a.Ino, 0)
		return err == nil && after == before
	}, 10*time.Second, time.Millisecond, "size and times unchanged")
}

// TestBlocksPastSizeAreFreed: a file of size 0 whose write open ended
// with ReleaseAllocated, or whose writer's session expired, has its data
// freed with it; one whose writers allocated nothing is freed without a
// data request.
func TestBlocksPastSizeAreFreed(t *testing.T) {
	c := metatest.Start(t, metatest.Config{Service: func(i int, cfg *metadata.Config) {
		cfg.SessionLease = 200 * time.Millisecond
		cfg.ResolveInterval = 20 * time.Millisecond
	}})
	one, two := c.Client(), c.Client()
	f := &fixture{t: t, cl: one}
	open := func(cl *mdclient.Client, a wire.Attr) {
		_, err := cl.Open(bg, root, a.Ino, a.Gen, wire.OpenReadWrite, false)
		require.NoError(t, err)
	}
	plain := f.file(rootIno, "plain", 0o644, root)
	open(one, plain)
	require.NoError(t, one.Release(bg, plain.Ino, wire.OpenReadWrite))
	alloc := f.file(rootIno, "allocated", 0o644, root)
	open(one, alloc)
	require.NoError(t, one.Release(bg, alloc.Ino, wire.OpenReadWrite|wire.ReleaseAllocated))
	dead := f.file(rootIno, "dead writer", 0o644, root)
	open(two, dead)
	// two stops renewing: its session expires with the write open, and
	// the owner marks the inode.
	require.Eventually(t, func() bool { return inodeFlags(c, dead.Ino)&wire.InodeHasBlocks != 0 }, 10*time.Second, 10*time.Millisecond)
	require.Zero(t, inodeFlags(c, plain.Ino)&wire.InodeHasBlocks)
	for _, name := range []string{"plain", "allocated", "dead writer"} {
		require.NoError(t, one.Unlink(bg, root, rootIno, name, 0))
	}
	require.Eventually(t, func() bool { return c.Data.FreedCount(alloc.Ino) == 1 }, 10*time.Second, time.Millisecond)
	require.Eventually(t, func() bool { return c.Data.FreedCount(dead.Ino) == 1 }, 10*time.Second, time.Millisecond)
	require.Zero(t, c.Data.FreedCount(plain.Ino), "a file nobody allocated for costs no data request")
}

// inodeFlags returns ino's state flags at its owner.
func inodeFlags(c *metatest.Cluster, ino uint64) uint32 {
	for _, in := range c.Nodes[ownerIndex(c, ino)].Svc.Inodes() {
		if in.Attr.Ino == ino {
			return in.Flags
		}
	}
	return 0
}
