package acl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The xattrs that hold a POSIX ACL, in Linux's binary format.
const (
	XattrAccess  = "system.posix_acl_access"
	XattrDefault = "system.posix_acl_default"
)

// Tags of ACL entries (linux/posix_acl.h).
const (
	TagUserObj  uint16 = 0x01
	TagUser     uint16 = 0x02
	TagGroupObj uint16 = 0x04
	TagGroup    uint16 = 0x08
	TagMask     uint16 = 0x10
	TagOther    uint16 = 0x20
)

// Permission bits of an entry.
const (
	Read  uint16 = 4
	Write uint16 = 2
	Exec  uint16 = 1
)

const (
	version     = 2
	headerLen   = 4
	entryLen    = 8
	undefinedID = ^uint32(0)
	// MaxEntries bounds an ACL: the kernel sends at most a page to a
	// FUSE file system ((4096-4)/8 entries).
	MaxEntries = (4096 - headerLen) / entryLen
)

// Errors of Decode. ErrInvalid is EINVAL (a malformed or misordered
// ACL), ErrVersion EOPNOTSUPP (another format), as Linux answers them.
var (
	ErrInvalid = errors.New("acl: invalid ACL")
	ErrVersion = errors.New("acl: unsupported ACL version")
)

// Entry is one entry of an ACL. ID is a uid or gid for TagUser and
// TagGroup, unused otherwise.
type Entry struct {
	Tag  uint16
	Perm uint16
	ID   uint32
}

// ACL is a valid POSIX ACL: entries in the order Linux requires (owner,
// named users, owning group, named groups, mask, other). A nil ACL is
// "none".
type ACL []Entry

// Decode parses and validates the xattr form of an ACL. A value with no
// entries is the empty ACL (nil, nil): setting it removes the ACL.
func Decode(b []byte) (ACL, error) {
	if len(b) < headerLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrInvalid, len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != version {
		return nil, fmt.Errorf("%w: %d", ErrVersion, v)
	}
	b = b[headerLen:]
	if len(b)%entryLen != 0 || len(b)/entryLen > MaxEntries {
		return nil, fmt.Errorf("%w: %d bytes of entries", ErrInvalid, len(b))
	}
	if len(b) == 0 {
		return nil, nil
	}
	a := make(ACL, len(b)/entryLen)
	for i := range a {
		e := b[i*entryLen:]
		a[i] = Entry{Tag: binary.LittleEndian.Uint16(e), Perm: binary.LittleEndian.Uint16(e[2:]),
			ID: binary.LittleEndian.Uint32(e[4:])}
		if a[i].Tag != TagUser && a[i].Tag != TagGroup {
			a[i].ID = undefinedID
		}
	}
	if err := a.valid(); err != nil {
		return nil, err
	}
	return a, nil
}

// valid is Linux's posix_acl_valid: the tags in order, each base entry
// once, a mask when there are named entries, named ids that map (not
// -1), permissions within rwx.
func (a ACL) valid() error {
	const (
		wantUser = iota
		inUsers
		inGroups
		wantOther
		done
	)
	state := wantUser
	needsMask := false
	for i, e := range a {
		if e.Perm&^(Read|Write|Exec) != 0 {
			return fmt.Errorf("%w: entry %d permissions %#o", ErrInvalid, i, e.Perm)
		}
		ok := false
		switch e.Tag {
		case TagUserObj:
			ok, state = state == wantUser, inUsers
		case TagUser:
			ok, needsMask = state == inUsers && e.ID != undefinedID, true
		case TagGroupObj:
			ok, state = state == inUsers, inGroups
		case TagGroup:
			ok, needsMask = state == inGroups && e.ID != undefinedID, true
		case TagMask:
			ok, state = state == inGroups, wantOther
		case TagOther:
			ok = state == wantOther || (state == inGroups && !needsMask)
			state = done
		}
		if !ok {
			return fmt.Errorf("%w: entry %d (tag %#x) out of place", ErrInvalid, i, e.Tag)
		}
	}
	if state != done {
		return fmt.Errorf("%w: incomplete", ErrInvalid)
	}
	return nil
}

// Encode is the xattr form of a.
func (a ACL) Encode() []byte {
	b := make([]byte, headerLen+entryLen*len(a))
	binary.LittleEndian.PutUint32(b, version)
	for i, e := range a {
		p := b[headerLen+i*entryLen:]
		binary.LittleEndian.PutUint16(p, e.Tag)
		binary.LittleEndian.PutUint16(p[2:], e.Perm)
		binary.LittleEndian.PutUint32(p[4:], e.ID)
	}
	return b
}

// EquivMode is posix_acl_equiv_mode: the permission bits (0777) a
// says, and whether a says no more than those (no named entries, no
// mask), in which case the mode alone can stand for it.
func (a ACL) EquivMode() (perm uint32, equiv bool) {
	equiv = true
	for _, e := range a {
		p := uint32(e.Perm & 7)
		switch e.Tag {
		case TagUserObj:
			perm |= p << 6
		case TagGroupObj:
			perm |= p << 3
		case TagOther:
			perm |= p
		case TagMask:
			perm = perm&^0o070 | p<<3
			equiv = false
		default:
			equiv = false
		}
	}
	return perm, equiv
}

// Chmod is posix_acl_chmod: a copy of a whose owner, group class (the
// mask, else the owning group) and other entries say mode's bits.
func (a ACL) Chmod(mode uint32) ACL {
	b := append(ACL(nil), a...)
	group := -1
	for i := range b {
		switch b[i].Tag {
		case TagUserObj:
			b[i].Perm = uint16(mode >> 6 & 7)
		case TagGroupObj:
			if group < 0 {
				group = i
			}
		case TagMask:
			group = i
		case TagOther:
			b[i].Perm = uint16(mode & 7)
		}
	}
	if group >= 0 {
		b[group].Perm = uint16(mode >> 3 & 7)
	}
	return b
}

// Inherit is posix_acl_create for a new inode whose directory has the
// default ACL def (non-nil) and whose creator asked for permission bits
// perm (0777, no umask applied): the new bits, the new inode's access
// ACL (nil when the bits say it all) and, for a directory, its default
// ACL (def itself).
func (def ACL) Inherit(perm uint32, isDir bool) (newPerm uint32, access, dflt ACL) {
	acc := append(ACL(nil), def...)
	mode := perm & 0o777
	notEquiv := false
	group := -1
	for i := range acc {
		e := &acc[i]
		switch e.Tag {
		case TagUserObj:
			e.Perm &= uint16(mode >> 6 & 7)
			mode &= uint32(e.Perm)<<6 | ^uint32(0o700)
		case TagUser, TagGroup:
			notEquiv = true
		case TagGroupObj:
			if group < 0 {
				group = i
			}
		case TagOther:
			e.Perm &= uint16(mode & 7)
			mode &= uint32(e.Perm) | ^uint32(0o007)
		case TagMask:
			group = i
			notEquiv = true
		}
	}
	if group >= 0 {
		e := &acc[group]
		e.Perm &= uint16(mode >> 3 & 7)
		mode &= uint32(e.Perm)<<3 | ^uint32(0o070)
	}
	newPerm = perm&^0o777 | mode&0o777
	if notEquiv {
		access = acc
	}
	if isDir {
		dflt = def
	}
	return newPerm, access, dflt
}

// Permits is the ACL half of Linux's generic_permission for a caller
// that does not own the file (the owner goes by the mode's owner bits):
// posix_acl_permission. inGroup says whether the caller is in a group;
// fileGID is the file's group; want is Read|Write|Exec bits.
func (a ACL) Permits(uid uint32, inGroup func(gid uint32) bool, fileGID uint32, want uint16) bool {
	want &= Read | Write | Exec
	found := false
	masked := func(i int) bool {
		for _, m := range a[i+1:] {
			if m.Tag == TagMask {
				return a[i].Perm&m.Perm&want == want
			}
		}
		return a[i].Perm&want == want
	}
	for i, e := range a {
		switch e.Tag {
		case TagUser:
			if e.ID == uid {
				return masked(i)
			}
		case TagGroupObj:
			if inGroup(fileGID) {
				found = true
				if e.Perm&want == want {
					return masked(i)
				}
			}
		case TagGroup:
			if inGroup(e.ID) {
				found = true
				if e.Perm&want == want {
					return masked(i)
				}
			}
		case TagOther:
			return !found && e.Perm&want == want
		}
	}
	return false
}
