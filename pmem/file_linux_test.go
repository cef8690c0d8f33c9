package pmem

import (
	"errors"
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

// smallTmpfs mounts a tmpfs of size bytes for the test and unmounts it
// afterwards; it skips without the privilege to mount.
func smallTmpfs(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// TestCreateOnAFullFileSystem: the region's blocks are allocated when it
// is created, so a file system without room refuses the creation (and
// leaves nothing behind) instead of killing the node with SIGBUS later.
func TestCreateOnAFullFileSystem(t *testing.T) {
	dir := smallTmpfs(t, "1m")
	path := filepath.Join(dir, "region")
	_, err := Create(path, 4<<20, smallFormat, Options{})
	require.ErrorIs(t, err, ErrNoSpace)
	require.Contains(t, err.Error(), "free space")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a failed creation leaves no half-made region")

	// A sparse region file (copied, or made by hand) is refused too.
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(4<<20))
	require.NoError(t, f.Close())
	_, err = Open(path, Options{})
	require.ErrorIs(t, err, ErrNoSpace)
}

// TestCreateLeavesNoHalfMadeRegion: the region takes its name only when
// it is complete; what a killed creation left is cleaned up.
func TestCreateLeavesNoHalfMadeRegion(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "region")
	require.NoError(t, os.WriteFile(path+".creating", []byte("left by a killed creation"), 0o600))
	_, err := Create(path, 64, smallFormat, Options{})
	require.ErrorIs(t, err, ErrGeometry, "too small to format")
	_, err = os.Stat(path)
	require.ErrorIs(t, err, os.ErrNotExist, "no region under the name")
	r, err := Create(path, 256<<10, smallFormat, Options{})
	require.NoError(t, err)
	require.Equal(t, path, r.Info().Path)
	require.NoError(t, r.Close())
	entries, _ := os.ReadDir(dir)
	require.Len(t, entries, 1, "only the region: %v", entries)
	_, err = Create(path, 256<<10, smallFormat, Options{})
	require.ErrorIs(t, err, os.ErrExist, "Create never overwrites")
	require.Contains(t, err.Error(), "octofs format --pmem")
}

// TestMediaErrorsAreErrors: a page that vanished under the mapping (the
// file was truncated behind the node's back) is an error for the
// operation that touches it, and fails the region if it was a store; the
// process survives.
func TestMediaErrorsAreErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	r, err := Create(path, 1<<20, smallFormat, Options{})
	require.NoError(t, err)
	defer r.Close()
	g := r.Geometry()
	tx, err := r.Begin(t.Context())
	require.NoError(t, err)
	id, err := tx.AllocRecord(1)
	require.NoError(t, err)
	e, err := tx.AllocExtent(id, 2)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	last := Extent{Start: g.NumBlocks - 1, Count: 1}

	// Cut the file to just past the metadata: the data blocks' pages go.
	require.NoError(t, os.Truncate(path, int64(g.DataOff)))

	err = r.Guarded(func() error {
		b, _ := r.ExtentBytes(last)
		if b[0] == 0x55 { // a real load
			return errors.New("unexpected byte")
		}
		return nil
	})
	var me *MediaError
	require.ErrorAs(t, err, &me)
	require.ErrorIs(t, err, ErrMedia)
	require.Equal(t, int64(r.ExtentOffset(last)), me.Offset)

	require.Panics(t, func() { r.Load8(r.ExtentOffset(last)) }, "Load8 has no error result")
	require.ErrorIs(t, Guarded(func() error { r.Load8(r.ExtentOffset(last)); return nil }), ErrMedia)

	rec, err := r.Record(id) // the metadata pages are still there
	require.NoError(t, err)
	require.Equal(t, []Extent{e}, rec.Extents)

	tx, err = r.Begin(t.Context())
	require.NoError(t, err)
	require.NoError(t, tx.Write(r.ExtentOffset(e), []byte("lost")))
	err = tx.Commit()
	require.ErrorIs(t, err, ErrMedia, "the commit's apply step hit the vanished page")
	_, err = r.Begin(t.Context())
	require.ErrorIs(t, err, ErrMedia, "the region failed")
}

// TestReadOnlyMappingWritesNothing: check-only fsck maps the region
// read-only and shared (device DAX refuses private mappings); recovery
// happens in memory and a stray store is a media error, not a write.
func TestReadOnlyMappingWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "region")
	r, err := Create(path, 256<<10, smallFormat, Options{})
	require.NoError(t, err)
	require.NoError(t, r.Close())
	before, err := os.ReadFile(path)
	require.NoError(t, err)
	m, err := OpenFileMedium(path, FileOptions{ReadOnly: true})
	require.NoError(t, err)
	defer m.Close()
	require.True(t, m.Info().ReadOnly)
	require.ErrorIs(t, Guarded(func() error { m.Bytes()[100] = 1; return nil }), ErrMedia)
	ro, err := Attach(m, Options{ReadOnly: true})
	require.NoError(t, err)
	requireClean(t, ro)
	_, err = ro.Begin(t.Context())
	require.ErrorIs(t, err, ErrReadOnly)
	after, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, before, after)
}

func TestFormatFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "region")
	_, err := FormatFile(path, smallFormat, FormatFileOptions{}, Options{})
	require.ErrorIs(t, err, ErrGeometry)
	require.Contains(t, err.Error(), "--size")

	r, err := FormatFile(path, smallFormat, FormatFileOptions{Size: 256 << 10}, Options{})
	require.NoError(t, err)
	first := r.Superblock().RegionUUID
	require.NoError(t, r.Close())

	_, err = FormatFile(path, smallFormat, FormatFileOptions{}, Options{})
	require.ErrorIs(t, err, ErrFormatted)
	require.Contains(t, err.Error(), first.String())
	require.Contains(t, err.Error(), "--force")
	_, err = FormatFile(path, smallFormat, FormatFileOptions{Size: 512 << 10, Force: true}, Options{})
	require.ErrorIs(t, err, ErrGeometry, "a size that disagrees with the file")

	r, err = FormatFile(path, smallFormat, FormatFileOptions{Force: true}, Options{})
	require.NoError(t, err)
	require.NotEqual(t, first, r.Superblock().RegionUUID)
	require.NoError(t, r.Close())

	// A preallocated, zeroed file (what an operator makes with fallocate).
	blank := filepath.Join(dir, "blank")
	require.NoError(t, os.WriteFile(blank, make([]byte, 256<<10), 0o600))
	r, err = FormatFile(blank, smallFormat, FormatFileOptions{}, Options{})
	require.NoError(t, err)
	require.NoError(t, r.Close())

	foreign := filepath.Join(dir, "foreign")
	require.NoError(t, os.WriteFile(foreign, append([]byte("ext4 superblock?"), make([]byte, 256<<10)...), 0o600))
	_, err = FormatFile(foreign, smallFormat, FormatFileOptions{}, Options{})
	require.ErrorIs(t, err, ErrFormatted)
	require.Contains(t, err.Error(), "not an octofs region")
}
