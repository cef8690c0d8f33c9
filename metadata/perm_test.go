package metadata_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata/wire"
)

// TestPermissions: each case builds its own directory under the root
// (owned as it says), then runs one operation as some caller and checks
// the errno Linux gives.
func TestPermissions(t *testing.T) {
	f := newFixture(t)
	type env struct {
		dir, file uint64
	}
	tests := map[string]struct {
		dirMode  uint32
		dirOwner wire.Cred
		// file is created in the directory when fileMode is not 0.
		fileMode  uint32
		fileOwner wire.Cred
		op        func(e env) error
		want      syscall.Errno
	}{
		"create without write on the directory": {dirMode: 0o555, dirOwner: alice,
			op: func(e env) error { _, err := f.cl.Create(bg, alice, e.dir, "x", 0o644, 0, false, 0); return err }, want: syscall.EACCES},
		"create without search on the directory": {dirMode: 0o666, dirOwner: alice,
			op: func(e env) error { _, err := f.cl.Create(bg, alice, e.dir, "x", 0o644, 0, false, 0); return err }, want: syscall.EACCES},
		"create by a supplementary group member": {dirMode: 0o770, dirOwner: alice,
			op: func(e env) error { _, err := f.cl.Create(bg, carol, e.dir, "x", 0o644, 0, false, 0); return err }},
		"create by other in a 0775 directory": {dirMode: 0o775, dirOwner: alice,
			op: func(e env) error { _, err := f.cl.Create(bg, bob, e.dir, "x", 0o644, 0, false, 0); return err }, want: syscall.EACCES},
		"owner bits rule even when other has more": {dirMode: 0o077, dirOwner: alice,
			op: func(e env) error { _, err := f.cl.Create(bg, alice, e.dir, "x", 0o644, 0, false, 0); return err }, want: syscall.EACCES},
		"root creates anywhere": {dirMode: 0o000, dirOwner: alice,
			op: func(e env) error { _, err := f.cl.Create(bg, root, e.dir, "x", 0o644, 0, false, 0); return err }},
		"lookup without search": {dirMode: 0o600, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error { _, err := f.cl.Lookup(bg, alice, e.dir, "f"); return err }, want: syscall.EACCES},
		"readdir without read": {dirMode: 0o300, dirOwner: alice,
			op: func(e env) error { _, _, err := f.cl.ReadDir(bg, alice, e.dir, 0, 0, 0); return err }, want: syscall.EACCES},
		"unlink in a sticky directory by a stranger": {dirMode: 0o1777, dirOwner: alice, fileMode: 0o666, fileOwner: carol,
			op: func(e env) error { return f.cl.Unlink(bg, bob, e.dir, "f", 0) }, want: syscall.EPERM},
		"unlink in a sticky directory by the file's owner": {dirMode: 0o1777, dirOwner: alice, fileMode: 0o600, fileOwner: bob,
			op: func(e env) error { return f.cl.Unlink(bg, bob, e.dir, "f", 0) }},
		"unlink in a sticky directory by the directory's owner": {dirMode: 0o1777, dirOwner: alice, fileMode: 0o600, fileOwner: bob,
			op: func(e env) error { return f.cl.Unlink(bg, alice, e.dir, "f", 0) }},
		"unlink without write on the directory": {dirMode: 0o555, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error { return f.cl.Unlink(bg, alice, e.dir, "f", 0) }, want: syscall.EACCES},
		"rename out of a sticky directory by a stranger": {dirMode: 0o1777, dirOwner: alice, fileMode: 0o666, fileOwner: carol,
			op: func(e env) error {
				return f.cl.Rename(bg, bob, wire.RenameRequest{SrcParent: e.dir, SrcName: "f", DstParent: e.dir, DstName: "g"})
			}, want: syscall.EPERM},
		"chmod by a stranger": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, bob, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetMode, Mode: 0o600})
				return err
			}, want: syscall.EPERM},
		"chown to another user by the owner": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetUID, UID: bob.UID})
				return err
			}, want: syscall.EPERM},
		"chown to oneself by the owner": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetUID, UID: alice.UID})
				return err
			}},
		"chown to oneself by a stranger": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, bob, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetUID, UID: alice.UID})
				return err
			}, want: syscall.EPERM},
		"chgrp to a supplementary group by the owner": {dirMode: 0o777, dirOwner: carol, fileMode: 0o666, fileOwner: carol,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, carol, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetGID, GID: 1000})
				return err
			}},
		"chgrp to a foreign group by the owner": {dirMode: 0o777, dirOwner: carol, fileMode: 0o666, fileOwner: carol,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, carol, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetGID, GID: 1001})
				return err
			}, want: syscall.EPERM},
		"explicit times by a writer who is not the owner": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, bob, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetAtime | wire.SetMtime})
				return err
			}, want: syscall.EPERM},
		"times now by a writer who is not the owner": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, bob, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetAtimeNow | wire.SetMtimeNow})
				return err
			}},
		"times now by a stranger without write": {dirMode: 0o777, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, bob, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetAtimeNow | wire.SetMtimeNow})
				return err
			}, want: syscall.EACCES},
		"truncate without write": {dirMode: 0o777, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, bob, wire.SetAttrRequest{Ino: e.file, Valid: wire.SetSize, Size: 0})
				return err
			}, want: syscall.EACCES},
		"truncate a directory": {dirMode: 0o777, dirOwner: alice,
			op: func(e env) error {
				_, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: e.dir, Valid: wire.SetSize, Size: 0})
				return err
			}, want: syscall.EISDIR},
		"open for writing a read-only file": {dirMode: 0o777, dirOwner: alice, fileMode: 0o444, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.Open(bg, alice, e.file, 0, wire.OpenReadWrite, false)
				return err
			}, want: syscall.EACCES},
		"root opens a read-only file for writing": {dirMode: 0o777, dirOwner: alice, fileMode: 0o444, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.Open(bg, root, e.file, 0, wire.OpenReadWrite, false)
				return err
			}},
		"O_TRUNC needs write": {dirMode: 0o777, dirOwner: alice, fileMode: 0o444, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.Open(bg, alice, e.file, 0, wire.OpenReadOnly|wire.OpenTrunc, false)
				return err
			}, want: syscall.EACCES},
		"open a directory for writing": {dirMode: 0o777, dirOwner: alice,
			op: func(e env) error {
				_, err := f.cl.Open(bg, root, e.dir, 0, wire.OpenWriteOnly, false)
				return err
			}, want: syscall.EISDIR},
		"O_DIRECTORY on a file": {dirMode: 0o777, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.Open(bg, alice, e.file, 0, wire.OpenReadOnly|wire.OpenDirectory, false)
				return err
			}, want: syscall.ENOTDIR},
		"O_NOATIME by a stranger": {dirMode: 0o777, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error {
				_, err := f.cl.Open(bg, bob, e.file, 0, wire.OpenReadOnly|wire.OpenNoAtime, false)
				return err
			}, want: syscall.EPERM},
		"root may not execute a file without x bits": {dirMode: 0o777, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error { return f.cl.Access(bg, root, e.file, wire.AccessExec) }, want: syscall.EACCES},
		"root may execute a file with one x bit": {dirMode: 0o777, dirOwner: alice, fileMode: 0o744, fileOwner: alice,
			op: func(e env) error { return f.cl.Access(bg, root, e.file, wire.AccessExec) }},
		"access read by group through a supplementary group": {dirMode: 0o777, dirOwner: alice, fileMode: 0o640, fileOwner: alice,
			op: func(e env) error { return f.cl.Access(bg, carol, e.file, wire.AccessRead) }},
		"access write by group without the bit": {dirMode: 0o777, dirOwner: alice, fileMode: 0o640, fileOwner: alice,
			op: func(e env) error { return f.cl.Access(bg, carol, e.file, wire.AccessWrite) }, want: syscall.EACCES},
		"user xattr on a file without write": {dirMode: 0o777, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error { return f.cl.SetXattr(bg, bob, e.file, "user.x", []byte("v"), 0) }, want: syscall.EACCES},
		"trusted xattr by a user": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error { return f.cl.SetXattr(bg, alice, e.file, "trusted.x", []byte("v"), 0) }, want: syscall.EPERM},
		"security xattr by a user": {dirMode: 0o777, dirOwner: alice, fileMode: 0o666, fileOwner: alice,
			op: func(e env) error { return f.cl.SetXattr(bg, alice, e.file, "security.x", []byte("v"), 0) }, want: syscall.EPERM},
		"user xattr in a sticky directory by a stranger": {dirMode: 0o1777, dirOwner: alice,
			op: func(e env) error { return f.cl.SetXattr(bg, bob, e.dir, "user.x", []byte("v"), 0) }, want: syscall.EPERM},
		"link into a directory without write": {dirMode: 0o555, dirOwner: alice, fileMode: 0o644, fileOwner: alice,
			op: func(e env) error { _, err := f.cl.Link(bg, alice, e.file, e.dir, "g"); return err }, want: syscall.EACCES},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			d := f.mkdir(rootIno, name, 0o777, root)
			e := env{dir: d.Ino}
			if tc.fileMode != 0 {
				e.file = f.file(d.Ino, "f", tc.fileMode, tc.fileOwner).Ino
			}
			f.chown(d.Ino, tc.dirOwner, tc.dirMode)
			require.Equal(t, tc.want, errnoOf(t, tc.op(e)))
		})
	}
}

// TestModeBits covers the setuid/setgid rules: inheritance from setgid
// directories, clearing on chmod by a non-member, on chown, on writes
// and truncation by non-root.
func TestModeBits(t *testing.T) {
	f := newFixture(t)
	sg := f.mkdir(rootIno, "sg", 0o2777, wire.Cred{UID: 0, GID: 500})
	t.Run("a file in a setgid directory takes its group", func(t *testing.T) {
		a, err := f.cl.Create(bg, alice, sg.Ino, "f", 0o644, 0, false, 0)
		require.NoError(t, err)
		require.Equal(t, uint32(500), a.GID)
		require.Equal(t, uint32(wire.ModeRegular|0o644), a.Mode)
	})
	t.Run("a directory in a setgid directory takes its group and the bit", func(t *testing.T) {
		a, err := f.cl.Mkdir(bg, alice, sg.Ino, "d", 0o755)
		require.NoError(t, err)
		require.Equal(t, uint32(500), a.GID)
		require.Equal(t, uint32(wire.ModeDir|0o2755), a.Mode)
	})
	t.Run("a setgid file by a non-member of the directory's group loses the bit", func(t *testing.T) {
		a, err := f.cl.Create(bg, alice, sg.Ino, "g", 0o2755, 0, false, 0)
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o755), a.Mode)
	})
	t.Run("a setgid file by a member keeps it", func(t *testing.T) {
		member := wire.Cred{UID: 1005, GID: 1005, Groups: []uint32{500}}
		a, err := f.cl.Create(bg, member, sg.Ino, "h", 0o2755, 0, false, 0)
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o2755), a.Mode)
	})
	file := f.file(rootIno, "file", 0o644, alice)
	t.Run("chmod setgid by a non-member of the file's group clears it", func(t *testing.T) {
		f.chown(file.Ino, wire.Cred{UID: alice.UID, GID: 77}, 0o644)
		a, err := f.cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetMode, Mode: 0o2755})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o755), a.Mode)
	})
	t.Run("chmod setgid by root keeps it", func(t *testing.T) {
		a, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetMode, Mode: 0o6755})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o6755), a.Mode)
	})
	t.Run("chown clears setuid and setgid", func(t *testing.T) {
		a, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetUID, UID: bob.UID})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o755), a.Mode)
	})
	t.Run("setgid without group exec survives chown", func(t *testing.T) {
		_, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetMode, Mode: 0o6745})
		require.NoError(t, err)
		a, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetGID, GID: 9})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o2745), a.Mode)
	})
	t.Run("a write by non-root clears setuid", func(t *testing.T) {
		_, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetMode, Mode: 0o6777})
		require.NoError(t, err)
		a, err := f.cl.WriteCommit(bg, root, file.Ino, 10, wire.Timespec{})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o6777), a.Mode, "root keeps the bits")
		a, err = f.cl.WriteCommit(bg, alice, file.Ino, 20, wire.Timespec{})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o777), a.Mode)
		require.Equal(t, uint64(20), a.Size)
		a, err = f.cl.WriteCommit(bg, alice, file.Ino, 5, wire.Timespec{})
		require.NoError(t, err)
		require.Equal(t, uint64(20), a.Size, "a commit never shrinks")
	})
	t.Run("truncate by non-root clears setuid", func(t *testing.T) {
		_, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetMode, Mode: 0o4777})
		require.NoError(t, err)
		a, err := f.cl.SetAttr(bg, alice, wire.SetAttrRequest{Ino: file.Ino, Valid: wire.SetSize, Size: 100})
		require.NoError(t, err)
		require.Equal(t, uint32(wire.ModeRegular|0o777), a.Mode)
		require.Equal(t, uint64(100), a.Size)
	})
}

// TestKillPrivs: what a write, a truncation, an O_TRUNC open, a
// FATTR_KILL_SUIDGID setattr and a chown leave of setuid and setgid, by
// Linux's rules since 6.2: setuid always goes (a write or truncation by
// root keeps both); setgid goes when group execute is set, or when the
// caller is not in the file's group (the group before a chown). The file
// belongs to alice and group 500; member is in group 500, bob is not.
func TestKillPrivs(t *testing.T) {
	f := newFixture(t)
	member := wire.Cred{UID: 1005, GID: 1005, Groups: []uint32{500}}
	// chgrp lets the caller own the file (root's chown keeps setgid
	// without group execute, so the bits are set again) and has it change
	// the group to its own, with extra set in the request's Valid.
	chgrp := func(extra uint32) func(c wire.Cred, ino uint64) (wire.Attr, error) {
		return func(c wire.Cred, ino uint64) (wire.Attr, error) {
			a := f.attr(ino)
			if _, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: ino, Valid: wire.SetUID, UID: c.UID}); err != nil {
				return wire.Attr{}, err
			}
			if _, err := f.cl.SetAttr(bg, root, wire.SetAttrRequest{Ino: ino, Valid: wire.SetMode, Mode: a.Mode & wire.ModePerm}); err != nil {
				return wire.Attr{}, err
			}
			return f.cl.SetAttr(bg, c, wire.SetAttrRequest{Ino: ino, Valid: wire.SetGID | extra, GID: c.GID})
		}
	}
	ops := map[string]func(c wire.Cred, ino uint64) (wire.Attr, error){
		"write": func(c wire.Cred, ino uint64) (wire.Attr, error) {
			return f.cl.WriteCommit(bg, c, ino, 10, wire.Timespec{})
		},
		"truncate": func(c wire.Cred, ino uint64) (wire.Attr, error) {
			return f.cl.SetAttr(bg, c, wire.SetAttrRequest{Ino: ino, Valid: wire.SetSize, Size: 3})
		},
		"kill flag": func(c wire.Cred, ino uint64) (wire.Attr, error) {
			return f.cl.SetAttr(bg, c, wire.SetAttrRequest{Ino: ino, Valid: wire.SetKillSuidGid})
		},
		"open O_TRUNC": func(c wire.Cred, ino uint64) (wire.Attr, error) {
			if _, err := f.cl.WriteCommit(bg, root, ino, 10, wire.Timespec{}); err != nil {
				return wire.Attr{}, err
			}
			a, err := f.cl.Open(bg, c, ino, 0, wire.OpenWriteOnly|wire.OpenTrunc, false)
			if err == nil {
				err = f.cl.Release(bg, ino, wire.OpenWriteOnly)
			}
			return a, err
		},
		// The kernel adds the kill flag to every chown; a chown is no
		// write, so the owner needs no write permission for it.
		"chgrp to the caller's group":       chgrp(0),
		"chgrp with the kernel's kill flag": chgrp(wire.SetKillSuidGid),
	}
	tests := map[string]struct {
		op     string
		caller wire.Cred
		mode   uint32
		want   uint32
	}{
		"write by a non-member: setgid without group execute goes": {"write", bob, 0o2767, 0o767},
		"write by a member: setgid without group execute stays":    {"write", member, 0o2767, 0o2767},
		"write by a member: setuid goes, setgid stays":             {"write", member, 0o6767, 0o2767},
		"write by a member: setgid with group execute goes":        {"write", member, 0o2777, 0o777},
		"write by root keeps both":                                 {"write", root, 0o6767, 0o6767},
		"truncate by a non-member":                                 {"truncate", bob, 0o2767, 0o767},
		"truncate by a member":                                     {"truncate", member, 0o2767, 0o2767},
		"kill flag by a non-member":                                {"kill flag", bob, 0o6766, 0o766},
		"kill flag by a member":                                    {"kill flag", member, 0o6766, 0o2766},
		"O_TRUNC by a non-member":                                  {"open O_TRUNC", bob, 0o2766, 0o766},
		"O_TRUNC by a member":                                      {"open O_TRUNC", member, 0o2766, 0o2766},
		"chgrp by an owner outside the old group":                  {"chgrp to the caller's group", bob, 0o2745, 0o745},
		"chgrp by an owner in the old group":                       {"chgrp to the caller's group", member, 0o2745, 0o2745},
		"chgrp by an owner in the old group, setuid goes":          {"chgrp to the caller's group", member, 0o6745, 0o2745},
		"chgrp with the kill flag by an owner without write":       {"chgrp with the kernel's kill flag", member, 0o6545, 0o2545},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			a := f.file(rootIno, name, 0o644, wire.Cred{UID: alice.UID, GID: 500})
			f.chown(a.Ino, wire.Cred{UID: alice.UID, GID: 500}, tc.mode)
			require.Equal(t, wire.ModeRegular|tc.mode, f.attr(a.Ino).Mode)
			got, err := ops[tc.op](tc.caller, a.Ino)
			require.NoError(t, err)
			require.Equal(t, wire.ModeRegular|tc.want, got.Mode, "answered mode")
			require.Equal(t, wire.ModeRegular|tc.want, f.attr(a.Ino).Mode, "stored mode")
		})
	}
}
