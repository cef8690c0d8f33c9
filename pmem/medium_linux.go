package pmem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// FileMedium is a region backed by a mapped file or device.
type FileMedium struct {
	mapping
	f *os.File
}

var _ Medium = (*FileMedium)(nil)

// OpenFileMedium opens and maps path: a device-DAX device, a file on a DAX
// file system, a plain file or a file on tmpfs. It reports the mode it got
// in Info and refuses the path when it does not meet opts.Require.
func OpenFileMedium(path string, opts FileOptions) (*FileMedium, error) {
	sysfs := opts.SysfsRoot
	if sysfs == "" {
		sysfs = "/sys"
	}
	flags := os.O_RDWR
	switch {
	case opts.ReadOnly:
		flags = os.O_RDONLY
	case opts.Create:
		flags |= os.O_CREATE | os.O_EXCL
		if opts.Size <= 0 {
			return nil, fmt.Errorf("%w: creating %s needs a size", ErrGeometry, path)
		}
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pmem: open region: %w", err)
	}
	created := opts.Create
	fail := func(err error) (*FileMedium, error) {
		f.Close()
		if created {
			os.Remove(path)
		}
		return nil, err
	}
	// One writer at a time: two processes recovering or allocating in the
	// same region would corrupt it. A read-only (fsck) open shares the
	// lock with other inspectors but not with a writer.
	how := unix.LOCK_EX
	if opts.ReadOnly {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		created = false // someone else's file
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fail(fmt.Errorf("%w: %s is open in another process: stop the node using it first", ErrBusy, path))
		}
		return fail(fmt.Errorf("pmem: lock %s: %w", path, err))
	}
	m, err := mapFile(f, path, opts, sysfs)
	if err != nil {
		return fail(err)
	}
	return m, nil
}

// preallocate gives the file's first size bytes real blocks, so that
// stores through the mapping never need the file system to find space
// (which, on a full file system, is SIGBUS). Where fallocate is not
// supported it writes zeroes into a new file instead.
func preallocate(f *os.File, size int64, isNew bool) error {
	err := unix.Fallocate(int(f.Fd()), 0, 0, size)
	if err == nil {
		return nil
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %s needs %d bytes and its file system has too little space (%v): free space, choose a smaller --size, or put the region elsewhere", ErrNoSpace, f.Name(), size, err)
	}
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("pmem: allocate %d bytes for %s: %w", size, f.Name(), err)
	}
	if !isNew {
		// An existing region was allocated when it was created.
		return nil
	}
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(zeros)) {
		n := min(int64(len(zeros)), size-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return fmt.Errorf("pmem: write %s to allocate it: %w", f.Name(), err)
		}
	}
	return f.Sync()
}

// prefault maps every page of a region file on tmpfs or ramfs into the
// page tables, writable, at once. The file's pages exist (preallocate),
// but each one's first store through the mapping is a page fault, taken
// by whatever writes it first: the data path, where a client's first
// write into fresh blocks made the node fault page by page (a 256 MiB
// region: 677 ms of faults on the development VM, 40 ms populated, then
// 295 ms for its shadow page tables). Only for memory file systems: on a
// disk, a write fault marks each page dirty, and the whole region would
// be written back once. Kernels before 5.14 lack MADV_POPULATE_WRITE;
// the faults are then taken as before.
func prefault(buf []byte) {
	_ = unix.Madvise(buf, unix.MADV_POPULATE_WRITE)
}

func mapFile(f *os.File, path string, opts FileOptions, sysfs string) (*FileMedium, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("pmem: stat %s: %w", path, err)
	}
	p := probe{path: path}
	var size int64
	var fsName string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		p.charDevice = true
		dev := fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		p.devDAX = isDevDAX(sysfs, dev)
		if p.devDAX {
			s, err := devDAXSize(sysfs, dev)
			if err != nil {
				return nil, err
			}
			size = s
		}
	case unix.S_IFREG:
		p.regular = true
		size = st.Size
		if opts.Create {
			size = opts.Size
		}
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
			return nil, fmt.Errorf("pmem: statfs %s: %w", path, err)
		}
		p.volatileFS = sfs.Type == unix.TMPFS_MAGIC || sfs.Type == unix.RAMFS_MAGIC
		fsName = fileSystemName(sfs.Type)
	}
	if !p.charDevice && !p.regular {
		_, err := decideMode(p, opts.Require)
		return nil, err
	}
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("%w: %s has size %d: create the region first (octofs format --pmem %s --size SIZE)", ErrGeometry, path, size, path)
	}
	if p.regular && !opts.ReadOnly {
		if opts.Create {
			if err := f.Truncate(size); err != nil {
				return nil, fmt.Errorf("pmem: size region file %s: %w", path, err)
			}
		}
		// Also for an existing file: a sparse one (copied, or made by hand)
		// would die of SIGBUS when its file system fills up.
		if err := preallocate(f, size, opts.Create); err != nil {
			return nil, err
		}
	}

	fd := int(f.Fd())
	prot := unix.PROT_READ | unix.PROT_WRITE
	var buf []byte
	var err error
	switch {
	case opts.ReadOnly:
		// Shared, not private: Linux refuses MAP_PRIVATE for device DAX.
		// PROT_READ makes sure nothing can be written.
		buf, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	case p.regular && !p.volatileFS:
		// The kernel accepts MAP_SYNC only on DAX files; elsewhere it
		// says EOPNOTSUPP, which is how we tell a plain file from DAX.
		buf, err = unix.Mmap(fd, 0, int(size), prot, unix.MAP_SHARED_VALIDATE|unix.MAP_SYNC)
		if err == nil {
			p.mapSync = true
		} else if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EINVAL) {
			p.mapSyncErr = err
			buf, err = unix.Mmap(fd, 0, int(size), prot, unix.MAP_SHARED)
		}
	default:
		buf, err = unix.Mmap(fd, 0, int(size), prot, unix.MAP_SHARED)
	}
	if err != nil {
		return nil, fmt.Errorf("pmem: map %s (%d bytes): %w", path, size, err)
	}
	if p.volatileFS && !opts.ReadOnly {
		prefault(buf)
	}
	mode, err := decideMode(p, opts.Require)
	if err != nil {
		unix.Munmap(buf)
		return nil, err
	}
	dom, instr, err := mediumPersistence(mode, BestInstruction(), platformEADR(sysfs))
	if err != nil && !opts.ReadOnly {
		unix.Munmap(buf)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if opts.ReadOnly {
		// Nothing is stored, so nothing is flushed.
		dom, instr = DomainNone, InstrNone
	}
	return &FileMedium{
		mapping: mapping{buf: buf, hw: cpu, info: MediumInfo{Mode: mode, Domain: dom, Instruction: instr, Path: path, FileSystem: fsName, ReadOnly: opts.ReadOnly}},
		f:       f,
	}, nil
}

// fileSystemName names a statfs magic number.
func fileSystemName(magic int64) string {
	switch magic {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.RAMFS_MAGIC:
		return "ramfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlayfs"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return fmt.Sprintf("file system %#x", magic)
}

// isDevDAX reports whether character device maj:min belongs to the dax
// subsystem.
func isDevDAX(sysfs, dev string) bool {
	link, err := os.Readlink(filepath.Join(sysfs, "dev/char", dev, "subsystem"))
	return err == nil && filepath.Base(link) == "dax"
}

func devDAXSize(sysfs, dev string) (int64, error) {
	b, err := os.ReadFile(filepath.Join(sysfs, "dev/char", dev, "size"))
	if err != nil {
		return 0, fmt.Errorf("pmem: size of device-DAX %s: %w", dev, err)
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// platformEADR reports whether every NVDIMM region says its persistence
// domain is the CPU cache (eADR). Without NVDIMM regions it is false.
func platformEADR(sysfs string) bool {
	files, _ := filepath.Glob(filepath.Join(sysfs, "bus/nd/devices/region*/persistence_domain"))
	if len(files) == 0 {
		return false
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil || strings.TrimSpace(string(b)) != "cpu_cache" {
			return false
		}
	}
	return true
}

// msyncSys is the msync system call, synchronous.
func msyncSys(b []byte) error { return unix.Msync(b, unix.MS_SYNC) }

// Close implements Medium.
func (m *FileMedium) Close() error {
	var errs []error
	if m.buf != nil {
		errs = append(errs, unix.Munmap(m.buf))
		m.buf = nil
	}
	if m.f != nil {
		errs = append(errs, m.f.Close())
		m.f = nil
	}
	return errors.Join(errs...)
}

// sync makes the file's size and allocation durable (fsync), for a new
// region before it is given its final name.
func (m *FileMedium) sync() error {
	if m.f == nil {
		return nil
	}
	return m.f.Sync()
}

// NewAnonMedium maps size bytes of anonymous memory: page-aligned and
// outside the Go heap, like a real region, but volatile.
func NewAnonMedium(size int) (*FileMedium, error) {
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("pmem: map %d anonymous bytes: %w", size, err)
	}
	return &FileMedium{mapping: mapping{buf: buf, hw: cpu, info: MediumInfo{Mode: ModeVolatile, Domain: DomainNone, Instruction: InstrNone}}}, nil
}

// removeStaleCreate removes what an earlier Create that crashed or was
// killed left at path (it never held a finished region), unless a Create
// in another process is using it now.
func removeStaleCreate(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pmem: %s: %w", path, err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("%w: %s is being created by another process", ErrBusy, path)
	}
	return os.Remove(path)
}

// linkNew gives the finished region file tmp its name path, failing if
// path exists, and makes the name durable.
func linkNew(tmp, path string) error {
	err := os.Link(tmp, path)
	if err != nil && !errors.Is(err, os.ErrExist) {
		// File systems without hard links: rename, still refusing to
		// replace anything.
		err = unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
