package metadata_test

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/wire"
)

var (
	alice = wire.Cred{UID: 1000, GID: 1000}
	bob   = wire.Cred{UID: 1001, GID: 1001}
	// carol is in alice's group through a supplementary group.
	carol = wire.Cred{UID: 1002, GID: 1002, Groups: []uint32{1000}}
)

// fixture is a cluster with a client and helpers that fail the test on
// unexpected errors.
type fixture struct {
	t  *testing.T
	cl *mdclient.Client
}

func newFixture(t *testing.T) *fixture {
	_, cl := newCluster(t)
	return &fixture{t: t, cl: cl}
}

var bg = context.Background()

func (f *fixture) mkdir(parent uint64, name string, mode uint32, owner wire.Cred) wire.Attr {
	f.t.Helper()
	a, err := f.cl.Mkdir(bg, root, parent, name, mode)
	require.NoError(f.t, err)
	return f.chown(a.Ino, owner, mode)
}

func (f *fixture) file(parent uint64, name string, mode uint32, owner wire.Cred) wire.Attr {
	f.t.Helper()
	a, err := f.cl.Create(bg, root, parent, name, mode, 0, false, 0)
	require.NoError(f.t, err)
	return f.chown(a.Ino, owner, mode)
}

// chown gives ino to owner and sets mode (chown clears setuid/setgid, so
// the mode goes after).
func (f *fixture) chown(ino uint64, owner wire.Cred, mode uint32) wire.Attr {
	f.t.Helper()
	_, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: ino, Valid: wire.SetUID | wire.SetGID, UID: owner.UID, GID: owner.GID})
	require.NoError(f.t, err)
	a, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: ino, Valid: wire.SetMode, Mode: mode})
	require.NoError(f.t, err)
	return a
}

func (f *fixture) attr(ino uint64) wire.Attr {
	f.t.Helper()
	a, err := f.cl.GetAttr(bg, root, ino, 0)
	require.NoError(f.t, err)
	return a
}

func (f *fixture) lookup(parent uint64, name string) wire.Attr {
	f.t.Helper()
	a, err := f.cl.Lookup(bg, root, parent, name)
	require.NoError(f.t, err)
	return a
}

// errnoOf turns nil into 0 and keeps errnos, failing on other errors.
func errnoOf(t *testing.T, err error) syscall.Errno {
	t.Helper()
	if err == nil {
		return 0
	}
	e, ok := err.(syscall.Errno)
	require.True(t, ok, "not an errno: %v", err)
	return e
}

func TestNames(t *testing.T) {
	f := newFixture(t)
	d := f.mkdir(rootIno, "d", 0o777, root)
	long := strings.Repeat("x", 256)
	max := strings.Repeat("y", 255)
	tests := map[string]struct {
		op   func() error
		want syscall.Errno
	}{
		"create empty name":    {func() error { _, err := f.cl.Create(bg, root, d.Ino, "", 0o644, 0, false, 0); return err }, syscall.ENOENT},
		"create 256 bytes":     {func() error { _, err := f.cl.Create(bg, root, d.Ino, long, 0o644, 0, false, 0); return err }, syscall.ENAMETOOLONG},
		"create 255 bytes":     {func() error { _, err := f.cl.Create(bg, root, d.Ino, max, 0o644, 0, false, 0); return err }, 0},
		"create dot":           {func() error { _, err := f.cl.Create(bg, root, d.Ino, ".", 0o644, 0, false, 0); return err }, syscall.EEXIST},
		"mkdir dotdot":         {func() error { _, err := f.cl.Mkdir(bg, root, d.Ino, "..", 0o755); return err }, syscall.EEXIST},
		"create with slash":    {func() error { _, err := f.cl.Create(bg, root, d.Ino, "a/b", 0o644, 0, false, 0); return err }, syscall.EINVAL},
		"lookup 256 bytes":     {func() error { _, err := f.cl.Lookup(bg, root, d.Ino, long); return err }, syscall.ENAMETOOLONG},
		"lookup missing":       {func() error { _, err := f.cl.Lookup(bg, root, d.Ino, "nope"); return err }, syscall.ENOENT},
		"unlink dot":           {func() error { return f.cl.Unlink(bg, root, d.Ino, ".", 0) }, syscall.EISDIR},
		"rmdir dot":            {func() error { return f.cl.Rmdir(bg, root, d.Ino, ".", 0) }, syscall.EINVAL},
		"rmdir dotdot":         {func() error { return f.cl.Rmdir(bg, root, d.Ino, "..", 0) }, syscall.ENOTEMPTY},
		"symlink empty target": {func() error { _, err := f.cl.Symlink(bg, root, d.Ino, "l0", ""); return err }, syscall.ENOENT},
		"symlink long target":  {func() error { _, err := f.cl.Symlink(bg, root, d.Ino, "l1", strings.Repeat("t", 4096)); return err }, syscall.ENAMETOOLONG},
		"rename dot": {func() error {
			return f.cl.Rename(bg, root, wire.RenameRequest{SrcParent: d.Ino, SrcName: ".", DstParent: d.Ino, DstName: "x"})
		}, syscall.EBUSY},
		"rename bad flags": {func() error {
			return f.cl.Rename(bg, root, wire.RenameRequest{SrcParent: d.Ino, SrcName: "a", DstParent: d.Ino, DstName: "x", Flags: 3})
		}, syscall.EINVAL},
		"rename missing source": {func() error {
			return f.cl.Rename(bg, root, wire.RenameRequest{SrcParent: d.Ino, SrcName: "zz", DstParent: d.Ino, DstName: "x"})
		}, syscall.ENOENT},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, errnoOf(t, tc.op()))
		})
	}
	dot := f.lookup(d.Ino, ".")
	require.Equal(t, d.Ino, dot.Ino)
	dotdot := f.lookup(d.Ino, "..")
	require.Equal(t, rootIno, dotdot.Ino)
	file := f.file(d.Ino, "file", 0o644, root)
	_, err := f.cl.Lookup(bg, root, file.Ino, "x")
	require.Equal(t, syscall.ENOTDIR, err)
}

func TestCreateTypes(t *testing.T) {
	f := newFixture(t)
	d := f.mkdir(rootIno, "d", 0o777, root)
	tests := map[string]struct {
		cred wire.Cred
		mode uint32
		rdev uint64
		want syscall.Errno
	}{
		"regular":             {alice, 0o640, 0, 0},
		"no type is regular":  {alice, 0o600 &^ wire.ModeType, 0, 0},
		"fifo":                {alice, wire.ModeFIFO | 0o644, 0, 0},
		"socket":              {alice, wire.ModeSocket | 0o644, 0, 0},
		"char device by root": {root, wire.ModeChar | 0o600, 0x0501, 0},
		"block device":        {root, wire.ModeBlock | 0o600, 0x0802, 0},
		"char device by user": {alice, wire.ModeChar | 0o600, 0x0501, syscall.EPERM},
		"directory type":      {alice, wire.ModeDir | 0o755, 0, syscall.EINVAL},
		"symlink type":        {alice, wire.ModeSymlink | 0o777, 0, syscall.EINVAL},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a, err := f.cl.Create(bg, tc.cred, d.Ino, name, tc.mode, tc.rdev, false, 0)
			require.Equal(t, tc.want, errnoOf(t, err))
			if tc.want != 0 {
				return
			}
			wantType := tc.mode & wire.ModeType
			if wantType == 0 {
				wantType = wire.ModeRegular
			}
			require.Equal(t, wantType|tc.mode&wire.ModePerm, a.Mode)
			require.Equal(t, tc.rdev, a.Rdev)
			require.Equal(t, tc.cred.UID, a.UID)
			require.Equal(t, tc.cred.GID, a.GID)
			require.Equal(t, a, f.lookup(d.Ino, name))
		})
	}
	l, err := f.cl.Symlink(bg, alice, d.Ino, "link", "../some/where")
	require.NoError(t, err)
	require.Equal(t, uint32(wire.ModeSymlink|0o777), l.Mode)
	require.Equal(t, uint64(len("../some/where")), l.Size)
	target, err := f.cl.Readlink(bg, alice, l.Ino)
	require.NoError(t, err)
	require.Equal(t, "../some/where", target)
	_, err = f.cl.Readlink(bg, alice, d.Ino)
	require.Equal(t, syscall.EINVAL, err)
	sub, err := f.cl.Mkdir(bg, alice, d.Ino, "sub", 0o750)
	require.NoError(t, err)
	require.Equal(t, uint32(wire.ModeDir|0o750), sub.Mode)
	require.Equal(t, uint32(2), sub.Nlink)
	require.Equal(t, uint32(3), f.attr(d.Ino).Nlink)
	_, err = f.cl.Open(bg, alice, l.Ino, 0, wire.OpenReadOnly, false)
	require.Equal(t, syscall.ELOOP, err)
}
