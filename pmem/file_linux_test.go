package pmem

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSysfsDetection runs the device-DAX and eADR detection against a fake
// sysfs tree, since this machine has no NVDIMMs.
func TestSysfsDetection(t *testing.T) {
	root := t.TempDir()
	mk := func(p, content string) {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, p), []byte(content), 0o644))
	}
	require.NoError(t, os.MkdirAll(filepath.Join(root, "class/dax"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev/char/252:0"), 0o755))
	require.NoError(t, os.Symlink("../../../class/dax", filepath.Join(root, "dev/char/252:0/subsystem")))
	mk("dev/char/252:0/size", "2147483648\n")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "dev/char/4:1"), 0o755))
	require.NoError(t, os.Symlink("../../../class/tty", filepath.Join(root, "dev/char/4:1/subsystem")))

	require.True(t, isDevDAX(root, "252:0"))
	require.False(t, isDevDAX(root, "4:1"))
	require.False(t, isDevDAX(root, "9:9"))
	size, err := devDAXSize(root, "252:0")
	require.NoError(t, err)
	require.Equal(t, int64(2<<30), size)

	require.False(t, platformEADR(root), "no NVDIMM regions: not eADR")
	mk("bus/nd/devices/region0/persistence_domain", "cpu_cache\n")
	require.True(t, platformEADR(root))
	mk("bus/nd/devices/region1/persistence_domain", "memory_controller\n")
	require.False(t, platformEADR(root), "one ADR-only region makes the platform ADR")
}

func TestFileRegions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "region")
	r, err := Create(path, 256<<10, smallFormat, Options{})
	require.NoError(t, err)
	info := r.Info()
	// /tmp-like directories here are plain file systems; a tmpfs TMPDIR
	// would give volatile.
	var sfs unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &sfs))
	if sfs.Type == unix.TMPFS_MAGIC {
		require.Equal(t, ModeVolatile, info.Mode)
	} else {
		require.Contains(t, []Mode{ModeFile, ModeFSDAX}, info.Mode)
	}
	t.Logf("region on %s: %s", dir, info)
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	id, err := tx.AllocRecord(3)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.NoError(t, r.Close())

	r, err = Open(path, Options{Require: RequireNothing})
	require.NoError(t, err)
	rec, err := r.Record(id)
	require.NoError(t, err)
	require.Equal(t, uint16(3), rec.Kind)
	requireClean(t, r)
	require.NoError(t, r.Close())

	if info.Mode == ModeFile {
		_, err = Open(path, Options{Require: RequirePmem})
		require.ErrorIs(t, err, ErrNotPmem, "a plain file must not pass for pmem")
		require.Contains(t, err.Error(), "MAP_SYNC was refused")
	}
	_, err = Open(filepath.Join(dir, "missing"), Options{})
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = Open(dir, Options{})
	require.Error(t, err, "a directory is not a region")
}

func TestTmpfsIsVolatile(t *testing.T) {
	var sfs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Skip("skipping: /dev/shm is not a tmpfs on this machine")
	}
	dir, err := os.MkdirTemp("/dev/shm", "pmemtest")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "region")
	r, err := Create(path, 128<<10, smallFormat, Options{})
	require.NoError(t, err)
	require.Equal(t, ModeVolatile, r.Info().Mode)
	require.NoError(t, r.Close())
	_, err = Open(path, Options{Require: RequireDurable})
	require.ErrorIs(t, err, ErrNotDurable)
	_, err = Open(path, Options{Require: RequirePmem})
	require.ErrorIs(t, err, ErrNotPmem)
}

func TestOneWriterAtATime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	r, err := Create(path, 128<<10, smallFormat, Options{})
	require.NoError(t, err)
	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrBusy)
	require.Contains(t, err.Error(), "stop the node")
	_, err = CheckFile(t.Context(), path, false, nil)
	require.ErrorIs(t, err, ErrBusy, "fsck refuses a region in use")
	require.NoError(t, r.Close())
	r, err = Open(path, Options{})
	require.NoError(t, err, "the lock goes with the region")
	require.NoError(t, r.Close())
}
