package pmem

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileMedium is a region backed by a mapped file or device.
type FileMedium struct {
	f       *os.File
	buf     []byte
	info    MediumInfo
	private bool

	// errMu guards flushErr, the first msync error since the last Fence.
	errMu    sync.Mutex
	flushErr error
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
	if opts.Create {
		flags |= os.O_CREATE
	}
	if opts.Private {
		flags = os.O_RDONLY
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pmem: open region: %w", err)
	}
	// One writer at a time: two processes recovering or allocating in the
	// same region would corrupt it. A private (fsck) open shares the lock
	// with other inspectors but not with a writer.
	how := unix.LOCK_EX
	if opts.Private {
		how = unix.LOCK_SH
	}
	if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is open in another process: stop the node using it first", ErrBusy, path)
		}
		return nil, fmt.Errorf("pmem: lock %s: %w", path, err)
	}
	m, err := mapFile(f, path, opts, sysfs)
	if err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
}

func mapFile(f *os.File, path string, opts FileOptions, sysfs string) (*FileMedium, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("pmem: stat %s: %w", path, err)
	}
	p := probe{path: path}
	var size int64
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
		if opts.Create && size < opts.Size {
			if err := f.Truncate(opts.Size); err != nil {
				return nil, fmt.Errorf("pmem: size region file %s: %w", path, err)
			}
			size = opts.Size
		}
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
			return nil, fmt.Errorf("pmem: statfs %s: %w", path, err)
		}
		p.volatileFS = sfs.Type == unix.TMPFS_MAGIC || sfs.Type == unix.RAMFS_MAGIC
	}
	if !p.charDevice && !p.regular {
		_, err := decideMode(p, opts.Require)
		return nil, err
	}
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("%w: %s has size %d: create the region first (octofs format)", ErrGeometry, path, size)
	}

	fd := int(f.Fd())
	prot := unix.PROT_READ | unix.PROT_WRITE
	var buf []byte
	var err error
	switch {
	case opts.Private:
		buf, err = unix.Mmap(fd, 0, int(size), prot, unix.MAP_PRIVATE)
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
	mode, err := decideMode(p, opts.Require)
	if err != nil {
		unix.Munmap(buf)
		return nil, err
	}
	dom, instr := mediumPersistence(mode, BestInstruction(), platformEADR(sysfs))
	if opts.Private {
		// Copy-on-write: nothing we store reaches the file.
		dom, instr = DomainNone, InstrNone
	}
	return &FileMedium{
		f:       f,
		buf:     buf,
		private: opts.Private,
		info:    MediumInfo{Mode: mode, Domain: dom, Instruction: instr, Path: path, CopyOnWrite: opts.Private},
	}, nil
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

// Bytes implements Medium.
func (m *FileMedium) Bytes() []byte { return m.buf }

// Info implements Medium.
func (m *FileMedium) Info() MediumInfo { return m.info }

// Flush implements Medium. CPU flushes are issued right away; msync is
// synchronous, so its durability point is the msync call itself and Fence
// only reports its error.
func (m *FileMedium) Flush(off, n int) {
	if n <= 0 || off < 0 || off+n > len(m.buf) {
		return
	}
	switch i := m.info.Instruction; {
	case i.IsCacheFlush():
		flushRange(i, unsafe.Pointer(&m.buf[off]), uintptr(n))
	case i == InstrMsync:
		page := os.Getpagesize()
		start := off &^ (page - 1)
		if err := unix.Msync(m.buf[start:off+n], unix.MS_SYNC); err != nil {
			m.errMu.Lock()
			if m.flushErr == nil {
				m.flushErr = fmt.Errorf("%w: msync %s: %v; check the storage device, then run octoctl fsck", ErrPersist, m.info.Path, err)
			}
			m.errMu.Unlock()
		}
	}
}

// Fence implements Medium.
func (m *FileMedium) Fence() error {
	fence(m.info.Instruction)
	if m.info.Instruction != InstrMsync {
		return nil
	}
	m.errMu.Lock()
	defer m.errMu.Unlock()
	err := m.flushErr
	m.flushErr = nil
	return err
}

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

// NewAnonMedium maps size bytes of anonymous memory: page-aligned and
// outside the Go heap, like a real region, but volatile.
func NewAnonMedium(size int) (*FileMedium, error) {
	buf, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("pmem: map %d anonymous bytes: %w", size, err)
	}
	return &FileMedium{buf: buf, info: MediumInfo{Mode: ModeVolatile, Domain: DomainNone, Instruction: InstrNone}}, nil
}
