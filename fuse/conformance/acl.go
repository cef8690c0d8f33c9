package conformance

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/octofs/octofs/metadata/acl"
)

// aclXattr is the xattr of an ACL kind: "access" or "default".
func aclXattr(kind string) (string, error) {
	switch kind {
	case "access":
		return acl.XattrAccess, nil
	case "default":
		return acl.XattrDefault, nil
	}
	return "", fmt.Errorf("%w: ACL kind %q", ErrScript, kind)
}

var aclTags = map[string][2]uint16{"u": {acl.TagUserObj, acl.TagUser}, "g": {acl.TagGroupObj, acl.TagGroup},
	"m": {acl.TagMask, 0}, "o": {acl.TagOther, 0}}

// parseACL is the xattr value of an ACL written as getfacl's short form:
// comma-separated TAG:ID:PERMS (u::rw-, u:65534:r--, g::r--, g:5:rwx,
// m::r--, o::---), in the order given (the kernel checks it); "-" is an
// ACL with no entries.
func parseACL(text string) ([]byte, error) {
	var a acl.ACL
	if text == "-" {
		return a.Encode(), nil
	}
	for _, ent := range strings.Split(text, ",") {
		f := strings.Split(ent, ":")
		if len(f) != 3 || len(f[2]) != 3 {
			return nil, fmt.Errorf("%w: ACL entry %q", ErrScript, ent)
		}
		tags, ok := aclTags[f[0]]
		if !ok {
			return nil, fmt.Errorf("%w: ACL tag %q", ErrScript, f[0])
		}
		e := acl.Entry{Tag: tags[0], ID: ^uint32(0)}
		if f[1] != "" {
			id, err := strconv.ParseUint(f[1], 10, 32)
			if err != nil || tags[1] == 0 {
				return nil, fmt.Errorf("%w: ACL entry %q", ErrScript, ent)
			}
			e.Tag, e.ID = tags[1], uint32(id)
		}
		for i, bit := range []uint16{acl.Read, acl.Write, acl.Exec} {
			switch f[2][i] {
			case "rwx"[i]:
				e.Perm |= bit
			case '-':
			default:
				return nil, fmt.Errorf("%w: ACL permissions %q", ErrScript, f[2])
			}
		}
		a = append(a, e)
	}
	return a.Encode(), nil
}

// formatACL writes an ACL xattr value as parseACL reads it.
func formatACL(v []byte) (string, error) {
	a, err := acl.Decode(v)
	if err != nil {
		return "", fmt.Errorf("the ACL read back does not decode: %v", err)
	}
	if a == nil {
		return "-", nil
	}
	var out []string
	for _, e := range a {
		var tag, id string
		switch e.Tag {
		case acl.TagUserObj:
			tag = "u"
		case acl.TagUser:
			tag, id = "u", strconv.FormatUint(uint64(e.ID), 10)
		case acl.TagGroupObj:
			tag = "g"
		case acl.TagGroup:
			tag, id = "g", strconv.FormatUint(uint64(e.ID), 10)
		case acl.TagMask:
			tag = "m"
		case acl.TagOther:
			tag = "o"
		}
		perm := []byte("---")
		for i, bit := range []uint16{acl.Read, acl.Write, acl.Exec} {
			if e.Perm&bit != 0 {
				perm[i] = "rwx"[i]
			}
		}
		out = append(out, tag+":"+id+":"+string(perm))
	}
	return strings.Join(out, ","), nil
}
