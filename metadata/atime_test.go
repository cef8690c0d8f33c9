package metadata_test

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata"
	"github.com/octofs/octofs/metadata/metatest"
	"github.com/octofs/octofs/metadata/wire"
)

// TestRelatime: reads (OpTouchAtime) and listings (OpReadDir) update
// atime by Linux's relatime rule, applied by the owner with its own
// clock: only when atime is not after mtime or ctime, or a day old; any
// reader may ask, the owner rule of utimensat does not apply, and ctime
// never moves.
func TestRelatime(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_700_000_000, 500)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) wire.Timespec {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(d)
		return wire.TimespecOf(now)
	}
	c := metatest.Start(t, metatest.Config{Service: func(i int, cfg *metadata.Config) { cfg.Clock = clock }})
	cl := c.Client()
	f := &fixture{t: t, cl: cl}
	d := f.mkdir(rootIno, "d", 0o755, alice)
	file := f.file(d.Ino, "f", 0o644, alice)
	secret := f.file(d.Ino, "secret", 0o600, alice)

	// A fresh file: atime = mtime = ctime, so the first read is due.
	t1 := advance(time.Second)
	a, err := cl.TouchAtime(bg, bob, file.Ino, file.Gen)
	require.NoError(t, err, "a reader that does not own the file")
	require.Equal(t, t1, a.Atime, "due: atime was not after mtime")
	require.Equal(t, file.Ctime, a.Ctime, "ctime unchanged")
	require.Equal(t, file.Mtime, a.Mtime)

	// Not due again: a client cannot move atime at will.
	advance(time.Hour)
	a, err = cl.TouchAtime(bg, bob, file.Ino, 0)
	require.NoError(t, err)
	require.Equal(t, t1, a.Atime, "atime is after mtime and ctime and younger than a day")

	// A day later it is due again.
	t3 := advance(24 * time.Hour)
	a, err = cl.TouchAtime(bg, bob, file.Ino, 0)
	require.NoError(t, err)
	require.Equal(t, t3, a.Atime, "a day old")

	// A write makes it due.
	advance(time.Second)
	_, err = cl.WriteCommit(bg, alice, file.Ino, 3, wire.Timespec{})
	require.NoError(t, err)
	t5 := advance(time.Second)
	a, err = cl.TouchAtime(bg, bob, file.Ino, 0)
	require.NoError(t, err)
	require.Equal(t, t5, a.Atime, "atime before mtime")

	// An explicit atime in the future is kept (not due).
	future := wire.Timespec{Sec: t5.Sec + 1000}
	_, err = cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetAtime, Atime: future})
	require.NoError(t, err)
	advance(time.Second)
	a, err = cl.TouchAtime(bg, bob, file.Ino, 0)
	require.NoError(t, err)
	require.Equal(t, future, a.Atime)

	// Permission: read access, or an open held by the caller's client.
	_, err = cl.TouchAtime(bg, bob, secret.Ino, 0)
	require.Equal(t, syscall.EACCES, errnoOf(t, err), "bob may not read the file")
	before := f.attr(secret.Ino)
	_, err = cl.Open(bg, alice, secret.Ino, 0, wire.OpenReadOnly, false)
	require.NoError(t, err)
	_, err = cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: secret.Ino, Valid: wire.SetMode, Mode: 0})
	require.NoError(t, err)
	t6 := advance(time.Second)
	a, err = cl.TouchAtime(bg, alice, secret.Ino, 0)
	require.NoError(t, err, "the owner's open outlives the chmod, as a descriptor does")
	require.Equal(t, t6, a.Atime)
	require.NotEqual(t, before.Ctime, a.Ctime, "(the chmod moved ctime)")
	other := c.Client()
	_, err = other.TouchAtime(bg, alice, secret.Ino, 0)
	require.Equal(t, syscall.EACCES, errnoOf(t, err), "another client holds no open and mode 0 forbids reading")
	_, err = cl.TouchAtime(bg, alice, secret.Ino, secret.Gen+1)
	require.Equal(t, syscall.ESTALE, errnoOf(t, err))

	// Listings: the first is due (the creations moved mtime), the next
	// is not, O_NOATIME's never is.
	t7 := advance(time.Second)
	_, _, err = cl.ReadDir(bg, bob, d.Ino, 0, 0, 0)
	require.NoError(t, err)
	da := f.attr(d.Ino)
	require.Equal(t, t7, da.Atime, "readdir updated atime")
	require.Equal(t, d.Ctime.Sec <= da.Ctime.Sec, true)
	ctime := da.Ctime
	advance(time.Second)
	_, _, err = cl.ReadDir(bg, bob, d.Ino, 0, 0, 0)
	require.NoError(t, err)
	require.Equal(t, t7, f.attr(d.Ino).Atime, "not due")
	_, err = cl.Create(bg, alice, d.Ino, "g", 0o644, 0, false, 0)
	require.NoError(t, err)
	advance(time.Second)
	_, _, err = cl.ReadDirFlags(bg, bob, d.Ino, 0, 0, 0, wire.ReadDirNoAtime)
	require.NoError(t, err)
	require.Equal(t, t7, f.attr(d.Ino).Atime, "O_NOATIME")
	t8 := advance(time.Second)
	_, _, err = cl.ReadDir(bg, bob, d.Ino, 0, 0, 0)
	require.NoError(t, err)
	da = f.attr(d.Ino)
	require.Equal(t, t8, da.Atime, "due after a creation")
	require.NotEqual(t, ctime, da.Ctime, "(the creation moved ctime)")
	require.True(t, da.Ctime.Before(t8), "the listing did not")
}

// TestOpenDir: opendir in one request registers the open (a removed
// directory then stays, with link count 0, until its release), answers
// the first page and the attributes, and leaves atime alone.
func TestOpenDir(t *testing.T) {
	f := newFixture(t)
	cl := f.cl
	d := f.mkdir(rootIno, "d", 0o755, alice)
	for _, name := range []string{"a", "b", "c"} {
		f.file(d.Ino, name, 0o644, alice)
	}
	before := f.attr(d.Ino)
	a, ents, eof, err := cl.OpenDir(bg, bob, d.Ino, d.Gen, 0, 0, 2)
	require.NoError(t, err)
	require.Equal(t, d.Ino, a.Ino)
	require.Len(t, ents, 2)
	require.False(t, eof)
	require.Equal(t, before.Atime, f.attr(d.Ino).Atime, "opening a directory does not update atime")

	file := f.lookup(d.Ino, "a")
	for name, tc := range map[string]struct {
		cred  wire.Cred
		ino   uint64
		flags uint32
		want  syscall.Errno
	}{
		"not a directory":           {alice, file.Ino, 0, syscall.ENOTDIR},
		"O_NOATIME by a non-owner":  {bob, d.Ino, wire.OpenNoAtime, syscall.EPERM},
		"O_NOATIME by the owner":    {alice, d.Ino, wire.OpenNoAtime, 0},
		"no read permission (0311)": {bob, f.mkdir(rootIno, "x", 0o311, alice).Ino, 0, syscall.EACCES},
		"a stale generation":        {bob, rootIno, 0, 0},
	} {
		_, _, _, err := cl.OpenDir(bg, tc.cred, tc.ino, 0, tc.flags, 0, 0)
		require.Equal(t, tc.want, errnoOf(t, err), name)
	}

	// Removed while open: answerable with link count 0, then freed at
	// the last release.
	for _, name := range []string{"a", "b", "c"} {
		require.NoError(t, cl.Unlink(bg, alice, d.Ino, name, 0))
	}
	require.NoError(t, cl.Rmdir(bg, root, rootIno, "d", 0))
	got, err := cl.GetAttr(bg, root, d.Ino, d.Gen)
	require.NoError(t, err, "an open directory survives its removal")
	require.Equal(t, uint32(0), got.Nlink)
	require.True(t, got.IsDir())
	require.NoError(t, cl.Release(bg, d.Ino, wire.OpenReadOnly|wire.OpenDirectory))
	require.NoError(t, cl.Release(bg, d.Ino, wire.OpenReadOnly|wire.OpenDirectory), "the owner's O_NOATIME open")
	_, err = cl.GetAttr(bg, root, d.Ino, d.Gen)
	require.Equal(t, syscall.ESTALE, errnoOf(t, err), "freed at the last release")
}
