package client

import (
	"context"
	"strings"
	"syscall"

	"github.com/octofs/octofs/cluster"
)

// Path resolution for the native API. The client resolves a path itself,
// component by component, one Lookup each, so that the owner of every
// directory checks search permission with the caller's credentials. ".."
// pops the directory stack of the walk (the inode walked before a
// directory is its parent, since directories have one name), and symbolic
// links are expanded in place, so "a/link/.." means the parent of the
// link's target as the kernel has it.

// maxSymlinks bounds the symlinks one resolution follows (Linux's 40);
// more is ELOOP.
const maxSymlinks = 40

// maxPathLen is PATH_MAX.
const maxPathLen = 4096

// rootAttr stands for the root directory in a walk until its real
// attributes are needed: walking through it needs only its number.
var rootAttr = Attr{Ino: cluster.RootInode, Mode: syscall.S_IFDIR}

// splitPath cuts a path into its components, dropping empty ones and "."
// (a leading "/" and a relative path both start at the root). dirOnly
// reports a trailing slash, which requires the result to be a directory.
func splitPath(name string) (comps []string, dirOnly bool, err error) {
	if len(name) >= maxPathLen {
		return nil, false, syscall.ENAMETOOLONG
	}
	if name == "" {
		return nil, false, syscall.ENOENT
	}
	dirOnly = strings.HasSuffix(name, "/")
	for c := range strings.SplitSeq(name, "/") {
		switch {
		case c == "" || c == ".":
		case len(c) > MaxNameLen:
			return nil, false, syscall.ENAMETOOLONG
		case strings.IndexByte(c, 0) >= 0:
			return nil, false, syscall.EINVAL
		default:
			comps = append(comps, c)
		}
	}
	return comps, dirOnly, nil
}

// walker resolves paths for one operation.
type walker struct {
	c     *Client
	ctx   context.Context
	cred  Cred
	links int
}

// walk resolves comps from the directories in stack (stack[0] is the
// root) and returns the stack with the result on top. followLast says
// whether a symlink in the last component is followed.
func (w *walker) walk(stack []Attr, comps []string, followLast bool) ([]Attr, error) {
	for i := 0; i < len(comps); i++ {
		comp := comps[i]
		top := stack[len(stack)-1]
		if !top.IsDir() {
			return nil, syscall.ENOTDIR
		}
		if comp == "." {
			continue
		}
		if comp == ".." {
			if len(stack) > 1 {
				stack = stack[:len(stack)-1]
			}
			continue
		}
		a, err := w.c.Lookup(w.ctx, w.cred, top.Ino, comp)
		if err != nil {
			return nil, err
		}
		last := i == len(comps)-1
		if !a.IsSymlink() || (last && !followLast) {
			stack = append(stack, a)
			continue
		}
		if w.links++; w.links > maxSymlinks {
			return nil, syscall.ELOOP
		}
		target, err := w.c.Readlink(w.ctx, w.cred, a.Ino)
		if err != nil {
			return nil, err
		}
		tcomps, dirOnly, err := splitPath(target)
		if err != nil {
			return nil, err
		}
		if dirOnly {
			tcomps = append(tcomps, ".")
		}
		if strings.HasPrefix(target, "/") {
			stack = stack[:1]
		}
		comps = append(tcomps, comps[i+1:]...)
		i = -1
	}
	return stack, nil
}

// resolve returns the attributes of the inode name leads to. A trailing
// slash requires a directory and follows a final symlink.
func (w *walker) resolve(name string, follow bool) (Attr, error) {
	comps, dirOnly, err := splitPath(name)
	if err != nil {
		return Attr{}, err
	}
	stack, err := w.walk([]Attr{rootAttr}, comps, follow || dirOnly)
	if err != nil {
		return Attr{}, err
	}
	a := stack[len(stack)-1]
	if len(stack) == 1 {
		// The root's real attributes.
		if a, err = w.c.GetAttr(w.ctx, w.cred, cluster.RootInode); err != nil {
			return Attr{}, err
		}
	}
	if dirOnly && !a.IsDir() {
		return Attr{}, syscall.ENOTDIR
	}
	return a, nil
}

// resolveParent resolves every component of name but the last, and returns
// the directory it leads to with the last component. base is "" for the
// root itself, and may be "..", which callers refuse as their system calls
// do.
func (w *walker) resolveParent(name string) (dir uint64, base string, err error) {
	comps, _, err := splitPath(name)
	if err != nil {
		return 0, "", err
	}
	if len(comps) == 0 {
		return cluster.RootInode, "", nil
	}
	stack, err := w.walk([]Attr{rootAttr}, comps[:len(comps)-1], true)
	if err != nil {
		return 0, "", err
	}
	top := stack[len(stack)-1]
	if !top.IsDir() {
		return 0, "", syscall.ENOTDIR
	}
	return top.Ino, comps[len(comps)-1], nil
}
