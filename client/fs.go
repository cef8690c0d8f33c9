package client

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// FS is the native API: path-based calls that feel like package os, for
// programs that use octofs without FUSE (as DAOS's libdfs). Every call runs
// with the FS's credentials and context. Paths are absolute from the
// file system's root; a relative path is taken from the root too.
//
// Errors are *fs.PathError (or *os.LinkError for two-path calls) wrapping a
// syscall.Errno, so errors.Is(err, fs.ErrNotExist) and friends work.
type FS struct {
	c    *Client
	cred Cred
	ctx  context.Context
}

// FS returns the native API acting as cred (ProcessCred() for a program's
// own identity, RootCred for an operator tool).
func (c *Client) FS(cred Cred) *FS {
	return &FS{c: c, cred: cred, ctx: context.Background()}
}

// WithContext returns a copy of fsys whose calls end when ctx does (EINTR),
// besides each call's own Config.OpTimeout.
func (fsys *FS) WithContext(ctx context.Context) *FS {
	c := *fsys
	c.ctx = ctx
	return &c
}

// Client returns the client under fsys, for the low-level calls.
func (fsys *FS) Client() *Client { return fsys.c }

// Cred returns the credentials fsys acts with.
func (fsys *FS) Cred() Cred { return fsys.cred }

func (fsys *FS) walker() *walker { return &walker{c: fsys.c, ctx: fsys.ctx, cred: fsys.cred} }

func pathErr(op, name string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: name, Err: err}
}

func linkErr(op, oldname, newname string, err error) error {
	if err == nil {
		return nil
	}
	return &os.LinkError{Op: op, Old: oldname, New: newname, Err: err}
}

// Stat returns name's attributes, following symlinks.
func (fsys *FS) Stat(name string) (fs.FileInfo, error) {
	a, err := fsys.walker().resolve(name, true)
	if err != nil {
		return nil, pathErr("stat", name, err)
	}
	return newFileInfo(baseName(name), a), nil
}

// Lstat returns name's attributes without following a final symlink.
func (fsys *FS) Lstat(name string) (fs.FileInfo, error) {
	a, err := fsys.walker().resolve(name, false)
	if err != nil {
		return nil, pathErr("lstat", name, err)
	}
	return newFileInfo(baseName(name), a), nil
}

// Open opens name for reading.
func (fsys *FS) Open(name string) (*FSFile, error) {
	return fsys.OpenFile(name, os.O_RDONLY, 0)
}

// Create creates or truncates name for reading and writing (mode 0666
// before the server applies nothing: octofs has no umask; the caller's is
// not known).
func (fsys *FS) Create(name string) (*FSFile, error) {
	return fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o666)
}

// OpenFile opens name with flag (os.O_RDONLY, O_WRONLY or O_RDWR, with
// O_CREATE, O_EXCL, O_TRUNC, O_APPEND; syscall.O_NOFOLLOW) and, for a new
// file, perm. A directory opens for reading only (for ReadDir).
func (fsys *FS) OpenFile(name string, flag int, perm fs.FileMode) (*FSFile, error) {
	f, err := fsys.openFile(name, flag, perm)
	if err != nil {
		return nil, pathErr("open", name, err)
	}
	return f, nil
}

func (fsys *FS) openFile(name string, flag int, perm fs.FileMode) (*FSFile, error) {
	w := fsys.walker()
	c := fsys.c
	var a Attr
	if flag&os.O_CREATE != 0 {
		dir, base, err := w.resolveParent(name)
		if err != nil {
			return nil, err
		}
		if base == "" || base == ".." || strings.HasSuffix(name, "/") {
			return nil, syscall.EISDIR
		}
		// A name that appears or vanishes between the lookup and the
		// create is looked up again; three rounds are plenty unless
		// another client keeps flipping it.
		for range 3 {
			a, err = c.Lookup(fsys.ctx, fsys.cred, dir, base)
			if errors.Is(err, syscall.ENOENT) {
				var f *File
				a, f, err = c.Create(fsys.ctx, fsys.cred, dir, base, unixMode(perm), flag)
				if err == nil {
					return &FSFile{fsys: fsys, name: name, f: f, attr: a}, nil
				}
				if errors.Is(err, syscall.EEXIST) && flag&os.O_EXCL == 0 {
					continue
				}
				return nil, err
			}
			if err != nil {
				return nil, err
			}
			if flag&os.O_EXCL != 0 {
				return nil, syscall.EEXIST
			}
			break
		}
		if err != nil {
			return nil, err
		}
		if a.IsSymlink() {
			if flag&syscall.O_NOFOLLOW != 0 {
				return nil, syscall.ELOOP
			}
			if a, err = w.resolve(name, true); err != nil {
				return nil, err
			}
		}
	} else {
		var err error
		if a, err = w.resolve(name, flag&syscall.O_NOFOLLOW == 0); err != nil {
			return nil, err
		}
	}
	switch {
	case a.IsDir():
		if flag&syscall.O_ACCMODE != syscall.O_RDONLY {
			return nil, syscall.EISDIR
		}
		if err := c.Access(fsys.ctx, fsys.cred, a.Ino, 4 /* R_OK */); err != nil {
			return nil, err
		}
		return &FSFile{fsys: fsys, name: name, attr: a}, nil
	case a.IsSymlink():
		return nil, syscall.ELOOP
	case !a.IsRegular():
		// Devices, fifos and sockets have no data in octofs; their
		// meaning is local to a host and the native API has no host.
		return nil, syscall.ENXIO
	}
	f, err := c.Open(fsys.ctx, fsys.cred, a.Ino, flag&^(os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW))
	if err != nil {
		return nil, err
	}
	return &FSFile{fsys: fsys, name: name, f: f, attr: a}, nil
}

// ReadDir lists directory name, sorted by name like os.ReadDir.
func (fsys *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	a, err := fsys.walker().resolve(name, true)
	if err == nil && !a.IsDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, pathErr("readdirent", name, err)
	}
	var out []fs.DirEntry
	for cookie, eof := uint64(0), false; !eof; {
		var ents []DirEntry
		ents, eof, err = fsys.c.ReadDirPage(fsys.ctx, fsys.cred, a.Ino, cookie, 0)
		if err != nil {
			return out, pathErr("readdirent", name, err)
		}
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			out = append(out, &dirEntry{fsys: fsys, e: e})
		}
		cookie = ents[len(ents)-1].Cookie
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

// Mkdir makes directory name with perm.
func (fsys *FS) Mkdir(name string, perm fs.FileMode) error {
	dir, base, err := fsys.walker().resolveParent(name)
	if err == nil {
		if base == "" || base == ".." {
			err = syscall.EEXIST
		} else {
			_, err = fsys.c.Mkdir(fsys.ctx, fsys.cred, dir, base, unixMode(perm))
		}
	}
	return pathErr("mkdir", name, err)
}

// MkdirAll makes directory name and any missing parents, like
// os.MkdirAll: nil if name is already a directory.
func (fsys *FS) MkdirAll(name string, perm fs.FileMode) error {
	comps, _, err := splitPath(name)
	if err != nil {
		return pathErr("mkdir", name, err)
	}
	w := fsys.walker()
	stack := []Attr{rootAttr}
	for i, comp := range comps {
		next, err := w.walk(stack, []string{comp}, true)
		if errors.Is(err, syscall.ENOENT) && comp != ".." {
			top := stack[len(stack)-1]
			a, merr := fsys.c.Mkdir(fsys.ctx, fsys.cred, top.Ino, comp, unixMode(perm))
			switch {
			case merr == nil:
				next, err = append(stack, a), nil
			case errors.Is(merr, syscall.EEXIST):
				// Made by someone else meanwhile.
				next, err = w.walk(stack, []string{comp}, true)
			default:
				err = merr
			}
		}
		if err != nil {
			return pathErr("mkdir", "/"+strings.Join(comps[:i+1], "/"), err)
		}
		if top := next[len(next)-1]; !top.IsDir() {
			return pathErr("mkdir", "/"+strings.Join(comps[:i+1], "/"), syscall.ENOTDIR)
		}
		stack = next
	}
	return nil
}

// Remove removes the file or empty directory name.
func (fsys *FS) Remove(name string) error {
	dir, base, err := fsys.walker().resolveParent(name)
	if err == nil {
		switch base {
		case "":
			err = syscall.EBUSY
		case "..":
			err = syscall.ENOTEMPTY
		default:
			err = fsys.c.Unlink(fsys.ctx, fsys.cred, dir, base)
			if errors.Is(err, syscall.EISDIR) || errors.Is(err, syscall.EPERM) {
				if rerr := fsys.c.Rmdir(fsys.ctx, fsys.cred, dir, base); !errors.Is(rerr, syscall.ENOTDIR) {
					err = rerr
				}
			}
		}
	}
	return pathErr("remove", name, err)
}

// RemoveAll removes name and everything under it, like os.RemoveAll: a
// name that does not exist is no error.
func (fsys *FS) RemoveAll(name string) error {
	dir, base, err := fsys.walker().resolveParent(name)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err == nil {
		switch base {
		case "", "..":
			err = syscall.EINVAL
		default:
			err = fsys.removeAll(dir, base, 0)
		}
	}
	return pathErr("unlinkat", name, err)
}

// maxRemoveDepth bounds RemoveAll's recursion: deeper trees than this do
// not fit a path anyway.
const maxRemoveDepth = maxPathLen / 2

func (fsys *FS) removeAll(dir uint64, name string, depth int) error {
	if depth > maxRemoveDepth {
		return syscall.ENAMETOOLONG
	}
	c := fsys.c
	a, err := c.Lookup(fsys.ctx, fsys.cred, dir, name)
	if errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	if !a.IsDir() {
		if err := c.Unlink(fsys.ctx, fsys.cred, dir, name); err != nil && !errors.Is(err, syscall.ENOENT) {
			return err
		}
		return nil
	}
	// Every round removes what it listed, so listing from the start again
	// sees only what others added meanwhile; an entry that cannot be
	// removed ends the loop with its error.
	for {
		ents, eof, err := c.ReadDirPage(fsys.ctx, fsys.cred, a.Ino, 0, 0)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := fsys.removeAll(a.Ino, e.Name, depth+1); err != nil {
				return err
			}
		}
		if eof || len(ents) == 0 {
			break
		}
	}
	if err := c.Rmdir(fsys.ctx, fsys.cred, dir, name); err != nil && !errors.Is(err, syscall.ENOENT) {
		return err
	}
	return nil
}

// Rename renames oldname to newname, replacing a file or empty directory
// there (rename(2)).
func (fsys *FS) Rename(oldname, newname string) error {
	return fsys.Rename2(oldname, newname, 0)
}

// Rename2 is renameat2: flags RenameNoReplace or RenameExchange.
func (fsys *FS) Rename2(oldname, newname string, flags uint32) error {
	w := fsys.walker()
	od, ob, err := w.resolveParent(oldname)
	if err != nil {
		return linkErr("rename", oldname, newname, err)
	}
	nd, nb, err := w.resolveParent(newname)
	if err == nil && (ob == "" || nb == "") {
		err = syscall.EBUSY
	}
	if err == nil {
		err = fsys.c.Rename(fsys.ctx, fsys.cred, od, ob, nd, nb, flags)
	}
	return linkErr("rename", oldname, newname, err)
}

// Symlink makes newname a symbolic link to target.
func (fsys *FS) Symlink(target, newname string) error {
	dir, base, err := fsys.walker().resolveParent(newname)
	if err == nil && (base == "" || base == "..") {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fsys.c.Symlink(fsys.ctx, fsys.cred, dir, base, target)
	}
	return linkErr("symlink", target, newname, err)
}

// Link makes newname a hard link to oldname (not following a final
// symlink, as link(2)).
func (fsys *FS) Link(oldname, newname string) error {
	w := fsys.walker()
	a, err := w.resolve(oldname, false)
	if err == nil && a.IsDir() {
		err = syscall.EPERM
	}
	if err != nil {
		return linkErr("link", oldname, newname, err)
	}
	dir, base, err := w.resolveParent(newname)
	if err == nil && (base == "" || base == "..") {
		err = syscall.EEXIST
	}
	if err == nil {
		_, err = fsys.c.Link(fsys.ctx, fsys.cred, a.Ino, dir, base)
	}
	return linkErr("link", oldname, newname, err)
}

// Readlink returns the target of symlink name.
func (fsys *FS) Readlink(name string) (string, error) {
	a, err := fsys.walker().resolve(name, false)
	if err == nil && !a.IsSymlink() {
		err = syscall.EINVAL
	}
	var t string
	if err == nil {
		t, err = fsys.c.Readlink(fsys.ctx, fsys.cred, a.Ino)
	}
	return t, pathErr("readlink", name, err)
}

// setattr resolves name and applies in.
func (fsys *FS) setattr(op, name string, follow bool, in SetAttrIn) error {
	a, err := fsys.walker().resolve(name, follow)
	if err == nil {
		_, err = fsys.c.SetAttr(fsys.ctx, fsys.cred, a.Ino, in)
	}
	return pathErr(op, name, err)
}

// Chmod changes name's mode (permission bits, setuid, setgid, sticky).
func (fsys *FS) Chmod(name string, mode fs.FileMode) error {
	return fsys.setattr("chmod", name, true, SetAttrIn{Valid: SetMode, Mode: unixMode(mode)})
}

// Chown changes name's owner and group; -1 leaves one as it is.
func (fsys *FS) Chown(name string, uid, gid int) error {
	return fsys.setattr("chown", name, true, chownIn(uid, gid))
}

// Lchown is Chown without following a final symlink.
func (fsys *FS) Lchown(name string, uid, gid int) error {
	return fsys.setattr("lchown", name, false, chownIn(uid, gid))
}

func chownIn(uid, gid int) SetAttrIn {
	var in SetAttrIn
	if uid >= 0 {
		in.Valid |= SetUID
		in.UID = uint32(uid)
	}
	if gid >= 0 {
		in.Valid |= SetGID
		in.GID = uint32(gid)
	}
	return in
}

// Chtimes changes name's access and modification times; a zero time
// leaves that time as it is (os.Chtimes).
func (fsys *FS) Chtimes(name string, atime, mtime time.Time) error {
	var in SetAttrIn
	if !atime.IsZero() {
		in.Valid |= SetAtime
		in.Atime = atime
	}
	if !mtime.IsZero() {
		in.Valid |= SetMtime
		in.Mtime = mtime
	}
	return fsys.setattr("chtimes", name, true, in)
}

// Truncate changes name's size.
func (fsys *FS) Truncate(name string, size int64) error {
	if size < 0 {
		return pathErr("truncate", name, syscall.EINVAL)
	}
	return fsys.setattr("truncate", name, true, SetAttrIn{Valid: SetSize, Size: uint64(size)})
}

// ReadFile reads the whole file name.
func (fsys *FS) ReadFile(name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 0, f.f.Size())
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// WriteFile writes data to name, creating it with perm or truncating it.
func (fsys *FS) WriteFile(name string, data []byte, perm fs.FileMode) error {
	f, err := fsys.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err1 := f.Close(); err == nil {
		err = err1
	}
	return err
}

// StatFS returns the cluster's capacity.
func (fsys *FS) StatFS() (StatFS, error) {
	return fsys.c.StatFS(fsys.ctx)
}

// baseName is the last component of name, "/" for the root.
func baseName(name string) string {
	name = strings.TrimRight(name, "/")
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	if name == "" {
		return "/"
	}
	return name
}
