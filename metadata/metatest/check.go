package metatest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/mdclient"
	"github.com/octofs/octofs/metadata/wire"
)

// Entry is one name of a walked namespace.
type Entry struct {
	Path   string
	Parent uint64
	Attr   wire.Attr
	Target string // symlinks
}

// Tree is a namespace as a client sees it, walked from the root.
type Tree struct {
	ByPath map[string]Entry
	// Links counts the entries naming each inode.
	Links map[uint64]int
	// Problems found during the walk (dangling entries, wrong "..", a
	// directory reached twice, type mismatches).
	Problems []string
}

// Walk lists the whole namespace through cl as root.
func Walk(ctx context.Context, cl *mdclient.Client) (*Tree, error) {
	t := &Tree{ByPath: map[string]Entry{}, Links: map[uint64]int{}}
	cred := wire.Cred{}
	seen := map[uint64]string{cluster.RootInode: "/"}
	type dir struct {
		ino  uint64
		path string
	}
	queue := []dir{{cluster.RootInode, ""}}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		cookie := uint64(0)
		for {
			// An observer: the walk must not move the atimes it reports.
			ents, eof, err := cl.ReadDirFlags(ctx, cred, d.ino, cookie, 0, 0, wire.ReadDirNoAtime)
			if err != nil {
				return nil, fmt.Errorf("readdir %q: %w", d.path, err)
			}
			for _, e := range ents {
				cookie = e.Cookie
				p := d.path + "/" + e.Name
				a, err := cl.GetAttr(ctx, cred, e.Ino, 0)
				if err != nil {
					t.Problems = append(t.Problems, fmt.Sprintf("%s: entry names inode %#x: %v", p, e.Ino, err))
					continue
				}
				if a.Mode&wire.ModeType != e.Type {
					t.Problems = append(t.Problems, fmt.Sprintf("%s: entry type %o, inode type %o", p, e.Type, a.Mode&wire.ModeType))
				}
				ent := Entry{Path: p, Parent: d.ino, Attr: a}
				if a.Mode&wire.ModeType == wire.ModeSymlink {
					ent.Target, _ = cl.Readlink(ctx, cred, e.Ino)
				}
				t.ByPath[p] = ent
				t.Links[e.Ino]++
				if a.IsDir() {
					if prev, dup := seen[e.Ino]; dup {
						t.Problems = append(t.Problems, fmt.Sprintf("%s: directory %#x also at %s", p, e.Ino, prev))
						continue
					}
					seen[e.Ino] = p
					dd, err := cl.Lookup(ctx, cred, e.Ino, "..")
					if err != nil || dd.Ino != d.ino {
						t.Problems = append(t.Problems, fmt.Sprintf("%s: \"..\" is %#x (%v), want %#x", p, dd.Ino, err, d.ino))
					}
					queue = append(queue, dir{e.Ino, p})
				}
			}
			if eof {
				break
			}
		}
	}
	return t, nil
}

// Check returns the link-count problems of t and those found walking it:
// a file's link count must equal its entries, a directory's 2 plus its
// subdirectories.
func (t *Tree) Check() []string {
	probs := slices.Clone(t.Problems)
	subdirs := map[uint64]uint32{}
	attrs := map[uint64]wire.Attr{}
	for _, e := range t.ByPath {
		attrs[e.Attr.Ino] = e.Attr
		if e.Attr.IsDir() {
			subdirs[e.Parent]++
		}
	}
	for _, ino := range slices.Sorted(maps.Keys(attrs)) {
		a := attrs[ino]
		want := uint32(t.Links[ino])
		if a.IsDir() {
			want = 2 + subdirs[ino]
		}
		if a.Nlink != want {
			probs = append(probs, fmt.Sprintf("inode %#x (%s): nlink %d, want %d", ino, t.PathOf(ino), a.Nlink, want))
		}
	}
	return probs
}

// PathOf returns a path naming ino.
func (t *Tree) PathOf(ino uint64) string {
	for _, e := range t.ByPath {
		if e.Attr.Ino == ino {
			return e.Path
		}
	}
	return "?"
}

// Paths lists the tree's paths, sorted.
func (t *Tree) Paths() []string {
	out := slices.Collect(maps.Keys(t.ByPath))
	sort.Strings(out)
	return out
}

// Leaks returns the inodes the nodes hold that no entry reaches and that
// are not orphans or being freed.
func (c *Cluster) Leaks(t *Tree) []string {
	reach := map[uint64]bool{cluster.RootInode: true}
	for _, e := range t.ByPath {
		reach[e.Attr.Ino] = true
	}
	var out []string
	for _, n := range c.Nodes {
		for _, in := range n.Svc.Inodes() {
			if reach[in.Attr.Ino] || in.Flags&(wire.InodeOrphan|wire.InodeFreeing) != 0 {
				continue
			}
			out = append(out, fmt.Sprintf("%s: inode %#x mode %o nlink %d flags %#x unreachable", n.ID, in.Attr.Ino, in.Attr.Mode, in.Attr.Nlink, in.Flags))
		}
	}
	return out
}

// Summary is a short description of a tree, for failure messages.
func (t *Tree) Summary() string {
	var b strings.Builder
	for _, p := range t.Paths() {
		e := t.ByPath[p]
		fmt.Fprintf(&b, "%s ino=%#x mode=%o nlink=%d\n", p, e.Attr.Ino, e.Attr.Mode, e.Attr.Nlink)
	}
	return b.String()
}
