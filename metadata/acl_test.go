package metadata_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/cluster"
	"github.com/octofs/octofs/metadata/acl"
	"github.com/octofs/octofs/metadata/wire"
)

func entries(es ...acl.Entry) acl.ACL { return acl.ACL(es) }

const none = ^uint32(0)

var (
	uobj  = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagUserObj, Perm: p, ID: none} }
	gobj  = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagGroupObj, Perm: p, ID: none} }
	other = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagOther, Perm: p, ID: none} }
	mask  = func(p uint16) acl.Entry { return acl.Entry{Tag: acl.TagMask, Perm: p, ID: none} }
	user  = func(id uint32, p uint16) acl.Entry { return acl.Entry{Tag: acl.TagUser, Perm: p, ID: id} }
	group = func(id uint32, p uint16) acl.Entry { return acl.Entry{Tag: acl.TagGroup, Perm: p, ID: id} }
)

func (f *fixture) getACL(ino uint64, name string) acl.ACL {
	f.t.Helper()
	v, err := f.cl.GetXattr(bg, root, ino, name, 0)
	if errnoOf(f.t, err) == syscall.ENODATA {
		return nil
	}
	a, err := acl.Decode(v)
	require.NoError(f.t, err)
	return a
}

// TestAccessACL: setting an access ACL sets the mode's bits, one the
// mode can say is not kept, chmod rewrites the mask, named users and
// groups get what the mask lets through, and only the owner sets one.
func TestAccessACL(t *testing.T) {
	f := newFixture(t)
	d := f.mkdir(rootIno, "d", 0o755, root)
	file := f.file(d.Ino, "f", 0o600, alice)

	a := entries(uobj(6), user(bob.UID, 6), gobj(0), mask(4), other(0))
	require.Equal(t, syscall.EPERM, errnoOf(t, f.cl.SetXattr(bg, bob, file.Ino, acl.XattrAccess, a.Encode(), 0)))
	require.NoError(t, f.cl.SetXattr(bg, alice, file.Ino, acl.XattrAccess, a.Encode(), 0))
	require.Equal(t, uint32(wire.ModeRegular|0o640), f.attr(file.Ino).Mode, "the group class is the mask")
	require.Equal(t, a, f.getACL(file.Ino, acl.XattrAccess))
	require.NoError(t, f.cl.Access(bg, bob, file.Ino, wire.AccessRead))
	require.Equal(t, syscall.EACCES, errnoOf(t, f.cl.Access(bg, bob, file.Ino, wire.AccessWrite)), "the mask limits bob")
	require.Equal(t, syscall.EACCES, errnoOf(t, f.cl.Access(bg, carol, file.Ino, wire.AccessRead)), "carol's group has nothing")

	_, err := f.cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetMode, Mode: 0o660})
	require.NoError(t, err)
	require.Equal(t, entries(uobj(6), user(bob.UID, 6), gobj(0), mask(6), other(0)), f.getACL(file.Ino, acl.XattrAccess),
		"chmod writes the group bits into the mask")
	require.NoError(t, f.cl.Access(bg, bob, file.Ino, wire.AccessWrite))

	g := entries(uobj(6), gobj(0), group(alice.GID, 4), mask(4), other(0))
	require.NoError(t, f.cl.SetXattr(bg, alice, file.Ino, acl.XattrAccess, g.Encode(), 0))
	require.NoError(t, f.cl.Access(bg, carol, file.Ino, wire.AccessRead), "carol is in alice's group")
	require.Equal(t, syscall.EACCES, errnoOf(t, f.cl.Access(bg, bob, file.Ino, wire.AccessRead)))

	plain := entries(uobj(7), gobj(5), other(4))
	require.NoError(t, f.cl.SetXattr(bg, alice, file.Ino, acl.XattrAccess, plain.Encode(), 0))
	require.Equal(t, uint32(wire.ModeRegular|0o754), f.attr(file.Ino).Mode)
	require.Nil(t, f.getACL(file.Ino, acl.XattrAccess), "an ACL the mode can say is not kept")

	bad := entries(uobj(6), user(bob.UID, 6), gobj(0), other(0)).Encode()
	require.Equal(t, syscall.EINVAL, errnoOf(t, f.cl.SetXattr(bg, alice, file.Ino, acl.XattrAccess, bad, 0)), "named entries need a mask")
	require.Equal(t, syscall.EACCES, errnoOf(t, f.cl.SetXattr(bg, alice, file.Ino, acl.XattrDefault, plain.Encode(), 0)),
		"a file has no default ACL")
}

// TestDefaultACLInherited: creations in a directory with a default ACL
// take their bits and ACLs from it, not from the umask, whether the new
// inode lives in the directory's partition or not; elsewhere the umask
// applies.
func TestDefaultACLInherited(t *testing.T) {
	f := newFixture(t)
	d := f.mkdir(rootIno, "d", 0o755, alice)
	def := entries(uobj(7), user(bob.UID, 7), gobj(5), mask(7), other(5))
	require.NoError(t, f.cl.SetXattr(bg, alice, d.Ino, acl.XattrDefault, def.Encode(), 0))

	umask := uint32(0o077)
	crossed := 0
	for i := range 12 {
		name := fmt.Sprintf("s%d", i)
		_, _, err := f.cl.Make(bg, wire.OpMkdir, alice, wire.MakeRequest{Parent: d.Ino, Name: name, Mode: wire.ModeDir | 0o777, Umask: umask})
		require.NoError(t, err)
		s := f.lookup(d.Ino, name)
		if cluster.PartitionOf(s.Ino) != cluster.PartitionOf(d.Ino) {
			crossed++
		}
		require.Equal(t, uint32(wire.ModeDir|0o775), s.Mode, "%s: the ACL, not the umask", name)
		require.Equal(t, def, f.getACL(s.Ino, acl.XattrAccess), name)
		require.Equal(t, def, f.getACL(s.Ino, acl.XattrDefault), name)

		_, _, err = f.cl.Make(bg, wire.OpCreate, alice, wire.MakeRequest{Parent: s.Ino, Name: "f", Mode: wire.ModeRegular | 0o640, Umask: umask})
		require.NoError(t, err)
		file := f.lookup(s.Ino, "f")
		require.Equal(t, uint32(wire.ModeRegular|0o640), file.Mode, name)
		require.Equal(t, entries(uobj(6), user(bob.UID, 7), gobj(5), mask(4), other(0)), f.getACL(file.Ino, acl.XattrAccess), name)
		require.Nil(t, f.getACL(file.Ino, acl.XattrDefault), name)
		require.NoError(t, f.cl.Access(bg, bob, file.Ino, wire.AccessRead), name)
		require.Equal(t, syscall.EACCES, errnoOf(t, f.cl.Access(bg, bob, file.Ino, wire.AccessWrite)), name)
	}
	require.NotZero(t, crossed, "no directory landed in another partition: the test did not cross one")

	plainDir := f.mkdir(rootIno, "plain", 0o777, alice)
	_, _, err := f.cl.Make(bg, wire.OpCreate, alice, wire.MakeRequest{Parent: plainDir.Ino, Name: "f", Mode: wire.ModeRegular | 0o666, Umask: 0o027})
	require.NoError(t, err)
	require.Equal(t, uint32(wire.ModeRegular|0o640), f.lookup(plainDir.Ino, "f").Mode, "without a default ACL the umask applies")
	_, _, err = f.cl.Make(bg, wire.OpSymlink, alice, wire.MakeRequest{Parent: d.Ino, Name: "l", Mode: wire.ModeSymlink | 0o777, Target: "x", Umask: 0o077})
	require.NoError(t, err)
	l := f.lookup(d.Ino, "l")
	require.Equal(t, uint32(wire.ModeSymlink|0o777), l.Mode)
	require.Equal(t, syscall.EOPNOTSUPP, errnoOf(t, func() error { _, err := f.cl.GetXattr(bg, root, l.Ino, acl.XattrAccess, 0); return err }()))
}

// TestRenameByACL: a rename between directories the caller may write
// only through their ACLs passes the coordinator's checks, whichever
// partitions the directories live in.
func TestRenameByACL(t *testing.T) {
	f := newFixture(t)
	open := entries(uobj(7), user(bob.UID, 7), gobj(5), mask(7), other(5)).Encode()
	var dirs []wire.Attr
	for i := range 4 {
		d := f.mkdir(rootIno, fmt.Sprintf("d%d", i), 0o755, alice)
		require.NoError(t, f.cl.SetXattr(bg, alice, d.Ino, acl.XattrAccess, open, 0))
		dirs = append(dirs, d)
	}
	_, err := f.cl.Create(bg, bob, dirs[0].Ino, "f", 0o644, 0, false, 0)
	require.NoError(t, err)
	for i := 1; i < len(dirs); i++ {
		require.NoError(t, f.cl.Rename(bg, bob, wire.RenameRequest{SrcParent: dirs[i-1].Ino, SrcName: "f",
			DstParent: dirs[i].Ino, DstName: "f"}), "d%d -> d%d", i-1, i)
	}
	_, err = f.cl.Create(bg, carol, dirs[0].Ino, "g", 0o644, 0, false, 0)
	require.Equal(t, syscall.EACCES, errnoOf(t, err), "carol is not named")
}
