package metadata

import (
	"strings"
	"syscall"

	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

// Permission checks, as Linux's generic_permission and the VFS do them.
// The caller's credentials come with every request; root (uid 0) has
// CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and CAP_FSETID.

// permits reports whether cred may access an inode of record r and
// access ACL xattr accessACL (empty: none) with mask (wire.AccessRead,
// AccessWrite, AccessExec bits): generic_permission. The owner goes by
// the mode's owner bits; anyone else by the ACL when there is one and
// the mode's group class is not empty, else by the group or other bits.
// The ACL is decoded only when it decides (an ACL that does not decode
// counts as none: the bits rule).
func permits(r *wire.InodeRecord, accessACL []byte, c *wire.Cred, mask uint32) bool {
	if mask == 0 {
		return true
	}
	if c.IsRoot() {
		// Read and write always; execute only if some x bit is set, or
		// for a directory (search).
		if mask&wire.AccessExec == 0 {
			return true
		}
		return r.Mode&wire.ModeType == wire.ModeDir || r.Mode&0o111 != 0
	}
	if c.UID == r.UID {
		return r.Mode>>6&7&mask == mask
	}
	if len(accessACL) > 0 && r.Mode&0o070 != 0 {
		if a := decodeACL(accessACL); a != nil {
			return a.Permits(c.UID, c.InGroup, r.GID, uint16(mask))
		}
	}
	bits := r.Mode & 7
	if c.InGroup(r.GID) {
		bits = r.Mode >> 3 & 7
	}
	return bits&mask == mask
}

// permits is permits on n's record and access ACL.
func (n *inode) permits(c *wire.Cred, mask uint32) bool {
	return permits(&n.rec, n.xattrs[acl.XattrAccess], c, mask)
}

// ownerOrRoot is inode_owner_or_capable.
func ownerOrRoot(r *wire.InodeRecord, c *wire.Cred) bool { return c.IsRoot() || c.UID == r.UID }

// stickyBlocks reports whether the sticky bit of dir forbids cred to
// remove or rename an entry naming an inode owned by victimUID.
func stickyBlocks(dir *wire.InodeRecord, victimUID uint32, c *wire.Cred) bool {
	return dir.Mode&wire.ModeSticky != 0 && !c.IsRoot() && c.UID != dir.UID && c.UID != victimUID
}

// killPrivs is mode after a chown, write or truncation by c of an inode
// whose group is gid (before the change), as Linux since 6.2 clears the
// bits (setattr_should_drop_sgid): setuid always; setgid when group
// execute is set (a setgid executable), or when c is neither in the
// group nor root (CAP_FSETID) — without group execute the bit means
// mandatory locking, which only a member may keep.
func killPrivs(mode, gid uint32, c *wire.Cred) uint32 {
	mode &^= wire.ModeSetuid
	if mode&0o010 != 0 || (!c.IsRoot() && !c.InGroup(gid)) {
		mode &^= wire.ModeSetgid
	}
	return mode
}

// writeKillPrivs is the mode of r after a write or truncation by c
// (should_remove_suid): only a regular file loses bits, and only to a
// caller without CAP_FSETID (not root).
func writeKillPrivs(r *wire.InodeRecord, c *wire.Cred) uint32 {
	if c.IsRoot() || r.Mode&wire.ModeType != wire.ModeRegular {
		return r.Mode
	}
	return killPrivs(r.Mode, r.GID, c)
}

// checkName applies Linux's rules for a new or looked-up entry name.
func checkName(name string) syscall.Errno {
	switch {
	case name == "":
		return syscall.ENOENT
	case len(name) > wire.MaxNameLen:
		return syscall.ENAMETOOLONG
	case strings.ContainsAny(name, "/\x00"):
		return syscall.EINVAL
	}
	return 0
}

func isDots(name string) bool { return name == "." || name == ".." }

// status converts an errno.
func status(e syscall.Errno) wire.Status { return wire.Status(e) }
