package fuse

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestNoACL: a --no-acl mount refuses ACLs (EOPNOTSUPP, none read) and
// new inodes still get the umask (the kernel applies it there).
func TestNoACL(t *testing.T) {
	f := memoryFixture(t)
	mnt, _ := f.mount(t, Options{NoACL: true, Logger: testLogger(t)})
	old := syscall.Umask(0o027)
	defer syscall.Umask(old)

	p := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(p, nil, 0o666))
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "d"), 0o777))
	for name, want := range map[string]os.FileMode{"f": 0o640, "d": os.ModeDir | 0o750} {
		fi, err := os.Stat(filepath.Join(mnt, name))
		require.NoError(t, err)
		require.Equal(t, want, fi.Mode(), name)
	}
	acl := []byte{2, 0, 0, 0, 1, 0, 6, 0, 255, 255, 255, 255, 4, 0, 4, 0, 255, 255, 255, 255, 32, 0, 0, 0, 255, 255, 255, 255}
	require.ErrorIs(t, unix.Setxattr(p, "system.posix_acl_access", acl, 0), syscall.EOPNOTSUPP)
	_, err := unix.Getxattr(p, "system.posix_acl_access", make([]byte, 64))
	require.ErrorIs(t, err, syscall.ENODATA)
}
