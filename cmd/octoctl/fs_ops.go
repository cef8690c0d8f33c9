package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/octofs/octofs/client"
	"github.com/octofs/octofs/cluster"
)

// The work of `octoctl fs`, on a *client.FS: fs_cmd.go wires flags and a
// connection to these functions; fs_test.go runs them on client.Memory.

// fsList prints directories' entries (sorted by name) or files, as ls.
func fsList(w io.Writer, fsys *client.FS, paths []string, long bool) error {
	for i, p := range paths {
		fi, err := fsys.Stat(p)
		if err != nil {
			// A dangling symlink still lists.
			if fi, err = fsys.Lstat(p); err != nil {
				return err
			}
		}
		if !fi.IsDir() {
			if err := printEntry(w, fsys, p, fi, long); err != nil {
				return err
			}
			continue
		}
		if len(paths) > 1 {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s:\n", p)
		}
		ents, err := fsys.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			if !long {
				fmt.Fprintln(w, e.Name())
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the listing
			}
			if err != nil {
				return err
			}
			if err := printEntry(w, fsys, path.Join(p, e.Name()), info, true); err != nil {
				return err
			}
		}
	}
	return nil
}

func printEntry(w io.Writer, fsys *client.FS, name string, fi fs.FileInfo, long bool) error {
	if !long {
		_, err := fmt.Fprintln(w, name)
		return err
	}
	a := fi.Sys().(*client.Attr)
	shown := fi.Name()
	if a.IsSymlink() {
		if t, err := fsys.Readlink(name); err == nil {
			shown += " -> " + t
		}
	}
	_, err := fmt.Fprintf(w, "%s %3d %5d %5d %12d %s %s\n", modeString(a.Mode), a.Nlink, a.UID, a.GID, a.Size, formatTime(a.Mtime), shown)
	return err
}

// modeString formats a Linux mode as ls -l does: "drwxr-sr-t".
func modeString(m uint32) string {
	var b [10]byte
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		b[0] = 'd'
	case syscall.S_IFLNK:
		b[0] = 'l'
	case syscall.S_IFIFO:
		b[0] = 'p'
	case syscall.S_IFSOCK:
		b[0] = 's'
	case syscall.S_IFCHR:
		b[0] = 'c'
	case syscall.S_IFBLK:
		b[0] = 'b'
	default:
		b[0] = '-'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<(8-i)) != 0 {
			b[1+i] = rwx[i]
		} else {
			b[1+i] = '-'
		}
	}
	special := func(pos int, bit uint32, set, unset byte) {
		if m&bit != 0 {
			if b[pos] == '-' {
				b[pos] = unset
			} else {
				b[pos] = set
			}
		}
	}
	special(3, syscall.S_ISUID, 's', 'S')
	special(6, syscall.S_ISGID, 's', 'S')
	special(9, syscall.S_ISVTX, 't', 'T')
	return string(b[:])
}

// statJSON is `fs stat --json`'s object.
type statJSON struct {
	Path      string    `json:"path"`
	Ino       uint64    `json:"ino"`
	Partition uint32    `json:"partition"`
	Gen       uint64    `json:"gen"`
	Type      string    `json:"type"`
	Mode      string    `json:"mode"`
	Nlink     uint32    `json:"nlink"`
	UID       uint32    `json:"uid"`
	GID       uint32    `json:"gid"`
	Rdev      uint64    `json:"rdev,omitempty"`
	Size      uint64    `json:"size"`
	Blocks    uint64    `json:"blocks"`
	Atime     time.Time `json:"atime"`
	Mtime     time.Time `json:"mtime"`
	Ctime     time.Time `json:"ctime"`
	Btime     time.Time `json:"btime"`
	Target    string    `json:"target,omitempty"`
}

func typeName(m uint32) string {
	switch m & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFLNK:
		return "symbolic link"
	case syscall.S_IFIFO:
		return "fifo"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFCHR:
		return "character device"
	case syscall.S_IFBLK:
		return "block device"
	}
	return "regular file"
}

// fsStat prints every attribute of each path (not following a final
// symlink, as stat(1)).
func fsStat(w io.Writer, fsys *client.FS, paths []string, asJSON bool) error {
	for _, p := range paths {
		fi, err := fsys.Lstat(p)
		if err != nil {
			return err
		}
		a := fi.Sys().(*client.Attr)
		s := statJSON{Path: p, Ino: a.Ino, Partition: cluster.PartitionOf(a.Ino), Gen: a.Gen, Type: typeName(a.Mode),
			Mode: fmt.Sprintf("%04o", a.Mode&0o7777), Nlink: a.Nlink, UID: a.UID, GID: a.GID, Rdev: a.Rdev,
			Size: a.Size, Blocks: a.Blocks, Atime: a.Atime, Mtime: a.Mtime, Ctime: a.Ctime, Btime: a.Btime}
		if a.IsSymlink() {
			s.Target, _ = fsys.Readlink(p)
		}
		if asJSON {
			if err := printJSON(w, s); err != nil {
				return err
			}
			continue
		}
		t := newTable(w, "Path", p)
		t.row("Inode", fmt.Sprintf("%d (partition %d, local %d), generation %d", a.Ino, s.Partition, cluster.LocalOf(a.Ino), a.Gen))
		t.row("Type", s.Type)
		if s.Target != "" {
			t.row("Target", s.Target)
		}
		t.row("Mode", fmt.Sprintf("%s (%s)", s.Mode, modeString(a.Mode)))
		t.row("Links", strconv.FormatUint(uint64(a.Nlink), 10))
		t.row("Owner", fmt.Sprintf("uid %d, gid %d", a.UID, a.GID))
		t.row("Size", fmt.Sprintf("%d bytes, %d blocks of 512", a.Size, a.Blocks))
		if a.Rdev != 0 {
			t.row("Device", fmt.Sprintf("%d:%d", devMajor(a.Rdev), devMinor(a.Rdev)))
		}
		t.row("Access", formatTime(a.Atime))
		t.row("Modify", formatTime(a.Mtime))
		t.row("Change", formatTime(a.Ctime))
		t.row("Birth", formatTime(a.Btime))
		if err := t.flush(); err != nil {
			return err
		}
	}
	return nil
}

// devMajor and devMinor split a Linux dev_t.
func devMajor(dev uint64) uint64 { return (dev >> 8 & 0xfff) | (dev >> 32 & ^uint64(0xfff)) }
func devMinor(dev uint64) uint64 { return (dev & 0xff) | (dev >> 12 & ^uint64(0xff)) }

// copyStats counts what a put or get moved.
type copyStats struct {
	files, dirs, links int
	bytes              int64
	start              time.Time
}

func (s *copyStats) String() string {
	el := time.Since(s.start)
	rate := float64(s.bytes) / (1 << 20) / max(el.Seconds(), 1e-9)
	return fmt.Sprintf("%d files, %d directories, %d symlinks, %d bytes in %v (%.1f MiB/s)",
		s.files, s.dirs, s.links, s.bytes, el.Round(time.Millisecond), rate)
}

// fsPut copies local (a file, a tree with recursive, or "-" for stdin)
// to remote. If remote is an existing directory the copy goes inside it
// under local's base name, as cp does.
func fsPut(fsys *client.FS, stdin io.Reader, local, remote string, recursive bool) (*copyStats, error) {
	st := &copyStats{start: time.Now()}
	if local == "-" {
		return st, putFile(fsys, st, stdin, remote, 0o644)
	}
	li, err := os.Lstat(local)
	if err != nil {
		return nil, err
	}
	if li.IsDir() && !recursive {
		return nil, fmt.Errorf("%s is a directory: give -r to copy it with everything under it", local)
	}
	if ri, err := fsys.Stat(remote); err == nil && ri.IsDir() {
		remote = path.Join(remote, filepath.Base(local))
	}
	err = filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return err
		}
		dst := path.Join(remote, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			if err := fsys.Mkdir(dst, info.Mode().Perm()|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			st.dirs++
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := fsys.Symlink(target, dst); err != nil {
				return err
			}
			st.links++
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			err = putFile(fsys, st, f, dst, info.Mode().Perm())
			f.Close()
			return err
		default:
			return fmt.Errorf("%s: %v files are not copied (only files, directories and symlinks)", p, d.Type())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Directories were made writable for the copy; give them their modes.
	err = filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		return fsys.Chmod(path.Join(remote, filepath.ToSlash(rel)), info.Mode().Perm())
	})
	return st, err
}

func putFile(fsys *client.FS, st *copyStats, r io.Reader, dst string, perm fs.FileMode) error {
	f, err := fsys.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	st.bytes += n
	st.files++
	return err
}

// fsGet copies remote (a file, or a tree with recursive) to local ("-":
// the file to stdout). If local is an existing directory the copy goes
// inside it under remote's base name.
func fsGet(fsys *client.FS, stdout io.Writer, remote, local string, recursive bool) (*copyStats, error) {
	st := &copyStats{start: time.Now()}
	ri, err := fsys.Stat(remote)
	if err != nil {
		return nil, err
	}
	if local == "-" {
		if ri.IsDir() {
			return nil, fmt.Errorf("%s is a directory: it cannot go to standard output", remote)
		}
		return st, getFile(fsys, st, remote, stdout)
	}
	if ri.IsDir() && !recursive {
		return nil, fmt.Errorf("%s is a directory: give -r to copy it with everything under it", remote)
	}
	if li, err := os.Stat(local); err == nil && li.IsDir() {
		local = filepath.Join(local, path.Base(path.Clean("/"+remote)))
	}
	root := strings.TrimPrefix(path.Clean("/"+remote), "/")
	if root == "" {
		root = "."
	}
	iofs := fsys.IOFS()
	err = fs.WalkDir(iofs, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		dst := filepath.Join(local, rel)
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(dst, info.Mode().Perm()|0o700); err != nil {
				return err
			}
			st.dirs++
		case d.Type()&fs.ModeSymlink != 0:
			target, err := fsys.Readlink("/" + p)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, dst); err != nil {
				return err
			}
			st.links++
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
			if err != nil {
				return err
			}
			err = getFile(fsys, st, "/"+p, f)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		default:
			return fmt.Errorf("%s: %v files are not copied (only files, directories and symlinks)", p, d.Type())
		}
		return nil
	})
	return st, err
}

func getFile(fsys *client.FS, st *copyStats, src string, w io.Writer) error {
	f, err := fsys.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, f)
	st.bytes += n
	st.files++
	return err
}

// fsRemove removes paths: files and empty directories, trees with
// recursive; force ignores paths that do not exist.
func fsRemove(fsys *client.FS, paths []string, recursive, force bool) error {
	for _, p := range paths {
		var err error
		if recursive {
			if _, err = fsys.Lstat(p); err == nil {
				err = fsys.RemoveAll(p)
			}
		} else {
			err = fsys.Remove(p)
		}
		if err != nil && !(force && errors.Is(err, fs.ErrNotExist)) {
			return err
		}
	}
	return nil
}

// fsDf prints the cluster's capacity as df does.
func fsDf(w io.Writer, s client.StatFS) error {
	bs := uint64(s.Bsize)
	size, free, avail := s.Blocks*bs, s.Bfree*bs, s.Bavail*bs
	used := size - free
	pct := "-"
	if used+avail > 0 {
		pct = fmt.Sprintf("%.0f%%", 100*float64(used)/float64(used+avail))
	}
	t := newTable(w, "SIZE", "USED", "AVAIL", "USE%", "INODES", "IUSED", "IFREE")
	t.row(humanSize(size), humanSize(used), humanSize(avail), pct,
		strconv.FormatUint(s.Files, 10), strconv.FormatUint(s.Files-s.Ffree, 10), strconv.FormatUint(s.Ffree, 10))
	return t.flush()
}

// humanSize formats a byte count with a binary unit: 1.5G, 512M, 4.0K.
func humanSize(n uint64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%dB", n)
	}
	v := float64(n)
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f%c", v, units[i])
}
