package client

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FSFile is a file or directory opened through FS: an *os.File lookalike
// with a position (Read, Write, Seek), positional I/O (ReadAt, WriteAt),
// Sync, Stat and Close, and ReadDir for directories. It implements
// io.Reader, io.Writer, io.ReaderAt, io.WriterAt, io.Seeker, io.Closer,
// io.ReaderFrom and io.WriterTo (so io.Copy moves large blocks), and
// fs.File and fs.ReadDirFile.
type FSFile struct {
	fsys *FS
	name string
	// f is the open file; nil for a directory.
	f    *File
	attr Attr

	mu  sync.Mutex
	off int64
	// A directory's listing position.
	cookie  uint64
	dirDone bool
}

var (
	_ io.ReadWriteSeeker = (*FSFile)(nil)
	_ io.ReaderAt        = (*FSFile)(nil)
	_ io.WriterAt        = (*FSFile)(nil)
	_ io.ReaderFrom      = (*FSFile)(nil)
	_ io.WriterTo        = (*FSFile)(nil)
	_ fs.ReadDirFile     = (*FSFile)(nil)
)

// copyBlock is the transfer size of ReadFrom and WriteTo: large enough for
// the data path's bandwidth (one RDMA operation per chunk piece).
const copyBlock = 1 << 20

// Name is the name the file was opened with.
func (f *FSFile) Name() string { return f.name }

// Handle returns the low-level File (nil for a directory): advisory locks,
// fallocate, Flush.
func (f *FSFile) Handle() *File { return f.f }

func (f *FSFile) err(op string, err error) error { return pathErr(op, f.name, err) }

// regular returns the open file, or EISDIR for a directory.
func (f *FSFile) regular() (*File, error) {
	if f.f == nil {
		return nil, syscall.EISDIR
	}
	return f.f, nil
}

// Read reads from the current position; io.EOF at the end.
func (f *FSFile) Read(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, err := f.readAt(p, f.off)
	f.off += int64(n)
	return n, err
}

// ReadAt reads at off; fewer than len(p) bytes come with io.EOF.
func (f *FSFile) ReadAt(p []byte, off int64) (int, error) {
	return f.readAt(p, off)
}

func (f *FSFile) readAt(p []byte, off int64) (int, error) {
	h, err := f.regular()
	if err != nil {
		return 0, f.err("read", err)
	}
	if len(p) == 0 {
		return 0, nil
	}
	total := 0
	for total < len(p) {
		n, err := h.ReadAt(f.fsys.ctx, p[total:], off+int64(total))
		if err != nil {
			return total, f.err("read", err)
		}
		if n == 0 {
			return total, io.EOF
		}
		total += n
	}
	return total, nil
}

// Write writes at the current position (at the end with O_APPEND).
func (f *FSFile) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	h, err := f.regular()
	if err != nil {
		return 0, f.err("write", err)
	}
	n, err := h.WriteAt(f.fsys.ctx, p, f.off)
	if err != nil {
		return n, f.err("write", err)
	}
	if h.flags&syscall.O_APPEND != 0 {
		f.off = int64(h.Size())
	} else {
		f.off += int64(n)
	}
	return n, nil
}

// WriteAt writes at off. Like os.File, it refuses a file opened with
// O_APPEND.
func (f *FSFile) WriteAt(p []byte, off int64) (int, error) {
	h, err := f.regular()
	if err != nil {
		return 0, f.err("write", err)
	}
	if h.flags&syscall.O_APPEND != 0 {
		return 0, errors.New("client: invalid use of WriteAt on file opened with O_APPEND")
	}
	n, err := h.WriteAt(f.fsys.ctx, p, off)
	return n, f.err("write", err)
}

// ReadV reads every vector at once (File.ReadV): n[i] bytes into
// vector i, fewer where the file ends.
func (f *FSFile) ReadV(iov []IOVec) (n []int, err error) {
	h, err := f.regular()
	if err != nil {
		return nil, f.err("read", err)
	}
	n, err = h.ReadV(f.fsys.ctx, iov)
	return n, f.err("read", err)
}

// WriteV writes every vector at once (File.WriteV). Like WriteAt, it
// refuses a file opened with O_APPEND.
func (f *FSFile) WriteV(iov []IOVec) error {
	h, err := f.regular()
	if err != nil {
		return f.err("write", err)
	}
	if h.flags&syscall.O_APPEND != 0 {
		return errors.New("client: invalid use of WriteV on file opened with O_APPEND")
	}
	return f.err("write", h.WriteV(f.fsys.ctx, iov))
}

// WriteString writes s.
func (f *FSFile) WriteString(s string) (int, error) { return f.Write([]byte(s)) }

// SeekData and SeekHole are Seek's whence values for lseek's SEEK_DATA
// and SEEK_HOLE (File.SeekData, File.SeekHole).
const (
	SeekData = unix.SEEK_DATA
	SeekHole = unix.SEEK_HOLE
)

// Seek sets the position for the next Read or Write (io.SeekEnd counts
// from the size this client knows; SeekData and SeekHole from the file's
// holes).
func (f *FSFile) Seek(offset int64, whence int) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f == nil {
		// Seeking a directory to 0 restarts its listing.
		if offset == 0 && whence == io.SeekStart {
			f.cookie, f.dirDone = 0, false
			return 0, nil
		}
		return 0, f.err("seek", syscall.EINVAL)
	}
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.off
	case io.SeekEnd:
		base = int64(f.f.Size())
	case SeekData, SeekHole:
		if offset < 0 {
			return 0, f.err("seek", syscall.ENXIO)
		}
		at, err := f.f.seek(f.fsys.ctx, uint64(offset), whence == SeekHole)
		if err != nil {
			return 0, f.err("seek", err)
		}
		f.off = int64(at)
		return f.off, nil
	default:
		return 0, f.err("seek", syscall.EINVAL)
	}
	if base+offset < 0 {
		return 0, f.err("seek", syscall.EINVAL)
	}
	f.off = base + offset
	return f.off, nil
}

// ReadFrom copies r into the file at the current position in large
// blocks, for io.Copy.
func (f *FSFile) ReadFrom(r io.Reader) (int64, error) {
	buf := make([]byte, copyBlock)
	var total int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			w, err := f.Write(buf[:n])
			total += int64(w)
			if err != nil {
				return total, err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// WriteTo copies the file from the current position to w in large
// blocks, for io.Copy.
func (f *FSFile) WriteTo(w io.Writer) (int64, error) {
	buf := make([]byte, copyBlock)
	var total int64
	for {
		n, rerr := f.Read(buf)
		if n > 0 {
			m, err := w.Write(buf[:n])
			total += int64(m)
			if err != nil {
				return total, err
			}
		}
		if rerr == io.EOF {
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

// Sync makes what was written durable and visible to other clients.
func (f *FSFile) Sync() error {
	h, err := f.regular()
	if err == nil {
		err = h.Sync(f.fsys.ctx)
	}
	return f.err("sync", err)
}

// Truncate changes the file's size.
func (f *FSFile) Truncate(size int64) error {
	h, err := f.regular()
	if err == nil && size < 0 {
		err = syscall.EINVAL
	}
	if err == nil {
		err = h.Truncate(f.fsys.ctx, uint64(size))
	}
	return f.err("truncate", err)
}

// Stat returns the file's attributes (with this client's writes).
func (f *FSFile) Stat() (fs.FileInfo, error) {
	var a Attr
	var err error
	if f.f != nil {
		a, err = f.f.Attr(f.fsys.ctx)
	} else {
		a, err = f.fsys.c.GetAttr(f.fsys.ctx, f.fsys.cred, f.attr.Ino)
	}
	if err != nil {
		return nil, f.err("stat", err)
	}
	return newFileInfo(baseName(f.name), a), nil
}

// ReadDir reads the directory's next n entries in the server's cookie
// order (all remaining ones if n <= 0), as os.File.ReadDir.
func (f *FSFile) ReadDir(n int) ([]fs.DirEntry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.f != nil {
		return nil, f.err("readdirent", syscall.ENOTDIR)
	}
	var out []fs.DirEntry
	for !f.dirDone && (n <= 0 || len(out) < n) {
		want := defaultReadDirBatch
		if n > 0 {
			want = min(want, n-len(out))
		}
		ents, eof, err := f.fsys.c.ReadDirPage(f.fsys.ctx, f.fsys.cred, f.attr.Ino, f.cookie, want)
		if err != nil {
			return out, f.err("readdirent", err)
		}
		for _, e := range ents {
			out = append(out, &dirEntry{fsys: f.fsys, e: e})
		}
		if len(ents) > 0 {
			f.cookie = ents[len(ents)-1].Cookie
		}
		if eof || len(ents) == 0 {
			f.dirDone = true
		}
	}
	if n > 0 && len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

// Readdirnames returns the names of the directory's next n entries.
func (f *FSFile) Readdirnames(n int) ([]string, error) {
	ents, err := f.ReadDir(n)
	names := make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	return names, err
}

// Close flushes and closes the file: when it returns without error, what
// was written is durable and other clients that open the file see it.
func (f *FSFile) Close() error {
	if f.f == nil {
		return nil
	}
	return f.err("close", f.f.Close(f.fsys.ctx))
}

// fileInfo is an fs.FileInfo of an octofs inode; Sys returns *Attr.
type fileInfo struct {
	name string
	attr Attr
}

func newFileInfo(name string, a Attr) *fileInfo { return &fileInfo{name: name, attr: a} }

func (i *fileInfo) Name() string       { return i.name }
func (i *fileInfo) Size() int64        { return int64(i.attr.Size) }
func (i *fileInfo) Mode() fs.FileMode  { return goMode(i.attr.Mode) }
func (i *fileInfo) ModTime() time.Time { return i.attr.Mtime }
func (i *fileInfo) IsDir() bool        { return i.attr.IsDir() }
func (i *fileInfo) Sys() any           { return &i.attr }

// dirEntry is an fs.DirEntry of a listing; Info costs one GetAttr.
type dirEntry struct {
	fsys *FS
	e    DirEntry
}

func (d *dirEntry) Name() string      { return d.e.Name }
func (d *dirEntry) IsDir() bool       { return d.e.Type == syscall.S_IFDIR }
func (d *dirEntry) Type() fs.FileMode { return goMode(d.e.Type) & fs.ModeType }
func (d *dirEntry) String() string    { return fs.FormatDirEntry(d) }
func (d *dirEntry) Info() (fs.FileInfo, error) {
	a, err := d.fsys.c.GetAttr(d.fsys.ctx, d.fsys.cred, d.e.Ino)
	if err != nil {
		return nil, pathErr("stat", d.e.Name, err)
	}
	return newFileInfo(d.e.Name, a), nil
}

// goMode converts a Linux mode to an fs.FileMode, as package os does.
func goMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & modeType {
	case syscall.S_IFDIR:
		mode |= fs.ModeDir
	case syscall.S_IFLNK:
		mode |= fs.ModeSymlink
	case syscall.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		mode |= fs.ModeSocket
	case syscall.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		mode |= fs.ModeDevice
	}
	if m&syscall.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

// unixMode converts an fs.FileMode's permission bits to Linux's.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= syscall.S_ISUID
	}
	if m&fs.ModeSetgid != 0 {
		u |= syscall.S_ISGID
	}
	if m&fs.ModeSticky != 0 {
		u |= syscall.S_ISVTX
	}
	return u
}

// IOFS returns fsys as an io/fs file system (fs.FS, fs.StatFS,
// fs.ReadDirFS, fs.ReadFileFS) with io/fs's unrooted, slash-separated
// names, for code written against io/fs (fs.WalkDir, fstest.TestFS).
func (fsys *FS) IOFS() fs.FS { return ioFS{fsys} }

type ioFS struct{ fsys *FS }

var (
	_ fs.StatFS     = ioFS{}
	_ fs.ReadDirFS  = ioFS{}
	_ fs.ReadFileFS = ioFS{}
)

func (i ioFS) check(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	return nil
}

// rename puts the io/fs name back into an error from fsys.
func rename(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}

func (i ioFS) Open(name string) (fs.File, error) {
	if err := i.check("open", name); err != nil {
		return nil, err
	}
	f, err := i.fsys.Open("/" + name)
	if err != nil {
		return nil, rename(err, name)
	}
	f.name = name
	return f, nil
}

func (i ioFS) Stat(name string) (fs.FileInfo, error) {
	if err := i.check("stat", name); err != nil {
		return nil, err
	}
	fi, err := i.fsys.Stat("/" + name)
	if err != nil {
		return nil, rename(err, name)
	}
	if name == "." {
		fi.(*fileInfo).name = "."
	}
	return fi, nil
}

func (i ioFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := i.check("readdir", name); err != nil {
		return nil, err
	}
	ents, err := i.fsys.ReadDir("/" + name)
	return ents, rename(err, name)
}

func (i ioFS) ReadFile(name string) ([]byte, error) {
	if err := i.check("readfile", name); err != nil {
		return nil, err
	}
	b, err := i.fsys.ReadFile("/" + name)
	return b, rename(err, name)
}

// osFlags documents that FS takes package os's flags, which on Linux are
// the system call's.
var _ = [1]int{}[os.O_RDWR^syscall.O_RDWR]
