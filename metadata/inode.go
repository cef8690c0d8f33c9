package metadata

import (
	"slices"
	"sort"

	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// inode is one inode in DRAM: its record (the durable state, exactly as
// the last InodeRecord says), plus what other records build: a
// directory's entries and the xattrs.
type inode struct {
	rec    wire.InodeRecord
	dir    *dir              // directories only
	xattrs map[string][]byte // nil when none
	xbytes int               // sum of names and values, for the MaxXattrTotal rule

	// busy: a coordinator protocol of this partition (create, link,
	// unlink, rmdir, truncate, free) is working on the inode; others
	// wait. In memory only: after a restart, replayed intents set it again.
	busy bool
	// opens counts the registered opens of all sessions.
	opens int

	// usage is, while usageKnown, the bytes of the blocks a regular file
	// holds as the chunk owners last counted them (blocks.go); otherwise
	// st_blocks is estimated from the size. usageGen counts the changes
	// of the file's data, so that a count that crossed one is dropped.
	// In memory only: after a restart the estimate stands until the
	// file's data next changes.
	usage      uint64
	usageKnown bool
	usageGen   uint64

	// placed is the end of the O_APPEND writes placed by OpAppend, which
	// their writers commit later; 0 once the size shrinks. In memory
	// only (docs/metadata.md, "Appends").
	placed uint64
}

// accessACL is the inode's access ACL, nil when it has none.
func (n *inode) accessACL() acl.ACL { return decodeACL(n.xattrs[acl.XattrAccess]) }

// defaultACL is a directory's default ACL, nil when it has none.
func (n *inode) defaultACL() acl.ACL { return decodeACL(n.xattrs[acl.XattrDefault]) }

// decodeACL is the ACL of an xattr value, nil when empty or malformed:
// a stored one was validated when it was set, and one a peer sent was
// validated by the peer, so a value that does not decode is damage, and
// counts as no ACL (the mode bits rule).
func decodeACL(v []byte) acl.ACL {
	if len(v) == 0 {
		return nil
	}
	a, err := acl.Decode(v)
	if err != nil {
		return nil
	}
	return a
}

func (n *inode) isDir() bool     { return n.rec.Mode&wire.ModeType == wire.ModeDir }
func (n *inode) isRegular() bool { return n.rec.Mode&wire.ModeType == wire.ModeRegular }
func (n *inode) isSymlink() bool { return n.rec.Mode&wire.ModeType == wire.ModeSymlink }
func (n *inode) pending() bool   { return n.rec.Flags&wire.InodePending != 0 }
func (n *inode) dead() bool      { return n.rec.Flags&wire.InodeDead != 0 }

// linkable reports whether link may give the inode its first name (an
// O_TMPFILE file, still open).
func (n *inode) linkable() bool {
	return n.rec.Flags&(wire.InodeLinkable|wire.InodeFreeing) == wire.InodeLinkable
}

// gone reports whether the inode has no links left (an orphan or being
// freed): it cannot be reached by name.
func (n *inode) gone() bool {
	return n.rec.Flags&(wire.InodeOrphan|wire.InodeFreeing) != 0
}

// attr is the inode's stat(2) view.
func (n *inode) attr() wire.Attr {
	a := attrOf(&n.rec)
	if n.usageKnown && n.isRegular() {
		a.Blocks = (n.usage + 511) / 512
	}
	return a
}

// attrOf is the stat(2) view of an inode record.
func attrOf(r *wire.InodeRecord) wire.Attr {
	a := wire.Attr{Ino: r.Ino, Gen: r.Gen, Mode: r.Mode, Nlink: r.Nlink, UID: r.UID, GID: r.GID,
		Rdev: r.Rdev, Size: r.Size, Blksize: 4096, Atime: r.Atime, Mtime: r.Mtime, Ctime: r.Ctime, Btime: r.Btime}
	switch r.Mode & wire.ModeType {
	case wire.ModeDir:
		a.Size = 4096
		a.Blocks = 8
	case wire.ModeSymlink:
		a.Size = uint64(len(r.Target))
	case wire.ModeRegular:
		// An estimate, until the chunk owners' count is known
		// (inode.usage): as if every block below the size were
		// allocated.
		a.Blocks = blockBytes(r.Size) / 512
	}
	return a
}

// blockBytes is size rounded up to whole 4 KiB blocks.
func blockBytes(size uint64) uint64 { return (size + 4095) / 4096 * 4096 }

// dentry is a directory entry.
type dentry struct {
	name    string
	ino     uint64
	typ     uint32
	cookie  uint64
	removed bool
}

// dir is a directory's entries: a hash map for lookup and a slice in
// cookie order for readdir. Cookies only grow, so an insert appends;
// removal marks the entry and the slice is compacted once half of it is
// removed entries: both amortised O(1). Readdir binary-searches the
// cookie to resume.
type dir struct {
	byName  map[string]*dentry
	order   []*dentry
	removed int
}

func newDir() *dir { return &dir{byName: map[string]*dentry{}} }

func (d *dir) len() int { return len(d.byName) }

func (d *dir) get(name string) *dentry { return d.byName[name] }

// put adds or replaces name with the given cookie.
func (d *dir) put(name string, ino uint64, typ uint32, cookie uint64) {
	if old := d.byName[name]; old != nil {
		old.removed = true
		d.removed++
	}
	e := &dentry{name: name, ino: ino, typ: typ, cookie: cookie}
	d.byName[name] = e
	if n := len(d.order); n == 0 || d.order[n-1].cookie < cookie {
		d.order = append(d.order, e)
	} else {
		// Only a replay of records written out of cookie order gets here.
		i := sort.Search(n, func(i int) bool { return d.order[i].cookie >= cookie })
		d.order = slices.Insert(d.order, i, e)
	}
	d.compact()
}

func (d *dir) remove(name string) bool {
	e := d.byName[name]
	if e == nil {
		return false
	}
	delete(d.byName, name)
	e.removed = true
	d.removed++
	d.compact()
	return true
}

func (d *dir) compact() {
	if d.removed < 32 || d.removed*2 < len(d.order) {
		return
	}
	out := d.order[:0]
	for _, e := range d.order {
		if !e.removed {
			out = append(out, e)
		}
	}
	clear(d.order[len(out):])
	d.order = out
	d.removed = 0
}

// after calls fn for each live entry with a cookie above cookie, in
// cookie order, until fn returns false.
func (d *dir) after(cookie uint64, fn func(e *dentry) bool) {
	i := sort.Search(len(d.order), func(i int) bool { return d.order[i].cookie > cookie })
	for ; i < len(d.order); i++ {
		if e := d.order[i]; !e.removed && !fn(e) {
			return
		}
	}
}

// firstCookie is the cookie of the first entry of a directory.
const firstCookie = 3
