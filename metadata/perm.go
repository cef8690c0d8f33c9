package metadata

import (
	"strings"
	"syscall"

	"github.com/octofs/octofs/metadata/wire"
)

// Permission checks, as Linux's generic_permission and the VFS do them.
// The caller's credentials come with every request; root (uid 0) has
// CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_CHOWN and CAP_FSETID.

// permits reports whether cred may access n with mask (wire.AccessRead,
// AccessWrite, AccessExec bits).
func permits(r *wire.InodeRecord, c *wire.Cred, mask uint32) bool {
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
	var bits uint32
	switch {
	case c.UID == r.UID:
		bits = r.Mode >> 6 & 7
	case c.InGroup(r.GID):
		bits = r.Mode >> 3 & 7
	default:
		bits = r.Mode & 7
	}
	return bits&mask == mask
}

// ownerOrRoot is inode_owner_or_capable.
func ownerOrRoot(r *wire.InodeRecord, c *wire.Cred) bool { return c.IsRoot() || c.UID == r.UID }

// stickyBlocks reports whether the sticky bit of dir forbids cred to
// remove or rename an entry naming an inode owned by victimUID.
func stickyBlocks(dir *wire.InodeRecord, victimUID uint32, c *wire.Cred) bool {
	return dir.Mode&wire.ModeSticky != 0 && !c.IsRoot() && c.UID != dir.UID && c.UID != victimUID
}

// killPrivs clears setuid, and setgid when group execute is set, as a
// write or chown by cred does (unless cred has CAP_FSETID, for writes).
func killPrivs(mode uint32) uint32 {
	mode &^= wire.ModeSetuid
	if mode&0o010 != 0 {
		mode &^= wire.ModeSetgid
	}
	return mode
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
