package metadata_test

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/metadata/wire"
)

// TestRename runs every rename case with several name variants, so that
// the directories and inodes fall on the same partition in some runs and
// on different nodes in others.
func TestRename(t *testing.T) {
	f := newFixture(t)
	type tree struct {
		a, b   uint64 // two directories under the case's root
		caseIn uint64
	}
	tests := map[string]struct {
		// setup builds inside a and b; names are suffixed by the variant.
		setup func(tr tree, s string)
		req   func(tr tree, s string) wire.RenameRequest
		want  syscall.Errno
		check func(t *testing.T, tr tree, s string)
	}{
		"file in one directory": {
			setup: func(tr tree, s string) { f.file(tr.a, "f"+s, 0o644, root) },
			req:   func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.a, "g"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				gone(t, f, tr.a, "f"+s)
				require.Equal(t, uint32(1), f.lookup(tr.a, "g"+s).Nlink)
			},
		},
		"file across directories": {
			setup: func(tr tree, s string) { f.file(tr.a, "f"+s, 0o644, root) },
			req:   func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				gone(t, f, tr.a, "f"+s)
				f.lookup(tr.b, "g"+s)
			},
		},
		"file over a file": {
			setup: func(tr tree, s string) {
				f.file(tr.a, "f"+s, 0o644, root)
				f.file(tr.b, "g"+s, 0o600, root)
			},
			req: func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				gone(t, f, tr.a, "f"+s)
				require.Equal(t, uint32(wire.ModeRegular|0o644), f.lookup(tr.b, "g"+s).Mode)
			},
		},
		"file over a file with another link": {
			setup: func(tr tree, s string) {
				f.file(tr.a, "f"+s, 0o644, root)
				g := f.file(tr.b, "g"+s, 0o600, root)
				_, err := f.cl.Link(bg, root, g.Ino, tr.a, "h"+s)
				require.NoError(t, err)
			},
			req: func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				h := f.lookup(tr.a, "h"+s)
				require.Equal(t, uint32(1), h.Nlink)
				require.Equal(t, uint32(wire.ModeRegular|0o600), h.Mode)
			},
		},
		"directory over an empty directory across parents": {
			setup: func(tr tree, s string) {
				d := f.mkdir(tr.a, "d"+s, 0o755, root)
				f.file(d.Ino, "inside", 0o644, root)
				f.mkdir(tr.b, "e"+s, 0o755, root)
			},
			req: func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "d"+s, tr.b, "e"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				gone(t, f, tr.a, "d"+s)
				e := f.lookup(tr.b, "e"+s)
				require.Equal(t, tr.b, f.lookup(e.Ino, "..").Ino)
				f.lookup(e.Ino, "inside")
				require.Equal(t, uint32(2), f.attr(tr.a).Nlink)
				require.Equal(t, uint32(3), f.attr(tr.b).Nlink)
			},
		},
		"directory across parents": {
			setup: func(tr tree, s string) { f.mkdir(tr.a, "d"+s, 0o755, root) },
			req:   func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "d"+s, tr.b, "d"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				require.Equal(t, uint32(2), f.attr(tr.a).Nlink)
				require.Equal(t, uint32(3), f.attr(tr.b).Nlink)
				d := f.lookup(tr.b, "d"+s)
				require.Equal(t, tr.b, f.lookup(d.Ino, "..").Ino)
			},
		},
		"directory over a non-empty directory": {
			setup: func(tr tree, s string) {
				f.mkdir(tr.a, "d"+s, 0o755, root)
				e := f.mkdir(tr.b, "e"+s, 0o755, root)
				f.file(e.Ino, "x", 0o644, root)
			},
			req:  func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "d"+s, tr.b, "e"+s, 0) },
			want: syscall.ENOTEMPTY,
		},
		"file over a directory": {
			setup: func(tr tree, s string) {
				f.file(tr.a, "f"+s, 0o644, root)
				f.mkdir(tr.b, "e"+s, 0o755, root)
			},
			req:  func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "e"+s, 0) },
			want: syscall.EISDIR,
		},
		"directory over a file": {
			setup: func(tr tree, s string) {
				f.mkdir(tr.a, "d"+s, 0o755, root)
				f.file(tr.b, "g"+s, 0o644, root)
			},
			req:  func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "d"+s, tr.b, "g"+s, 0) },
			want: syscall.ENOTDIR,
		},
		"directory into its own subtree": {
			setup: func(tr tree, s string) {
				d := f.mkdir(tr.a, "d"+s, 0o755, root)
				f.mkdir(d.Ino, "sub", 0o755, root)
			},
			req: func(tr tree, s string) wire.RenameRequest {
				d := f.lookup(tr.a, "d"+s)
				sub := f.lookup(d.Ino, "sub")
				return rr(tr.a, "d"+s, sub.Ino, "x", 0)
			},
			want: syscall.EINVAL,
		},
		"directory into itself": {
			setup: func(tr tree, s string) { f.mkdir(tr.a, "d"+s, 0o755, root) },
			req: func(tr tree, s string) wire.RenameRequest {
				d := f.lookup(tr.a, "d"+s)
				return rr(tr.a, "d"+s, d.Ino, "x", 0)
			},
			want: syscall.EINVAL,
		},
		"directory over its own ancestor": {
			setup: func(tr tree, s string) {
				d := f.mkdir(tr.a, "d"+s, 0o755, root)
				f.mkdir(d.Ino, "sub", 0o755, root)
			},
			req: func(tr tree, s string) wire.RenameRequest {
				d := f.lookup(tr.a, "d"+s)
				return rr(d.Ino, "sub", tr.a, "d"+s, 0)
			},
			want: syscall.ENOTEMPTY,
		},
		"noreplace over an existing name": {
			setup: func(tr tree, s string) {
				f.file(tr.a, "f"+s, 0o644, root)
				f.file(tr.b, "g"+s, 0o644, root)
			},
			req:  func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, wire.RenameNoReplace) },
			want: syscall.EEXIST,
		},
		"noreplace to a free name": {
			setup: func(tr tree, s string) { f.file(tr.a, "f"+s, 0o644, root) },
			req:   func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, wire.RenameNoReplace) },
			check: func(t *testing.T, tr tree, s string) { f.lookup(tr.b, "g"+s) },
		},
		"exchange two files across directories": {
			setup: func(tr tree, s string) {
				f.file(tr.a, "f"+s, 0o641, root)
				f.file(tr.b, "g"+s, 0o642, root)
			},
			req: func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, wire.RenameExchange) },
			check: func(t *testing.T, tr tree, s string) {
				require.Equal(t, uint32(wire.ModeRegular|0o642), f.lookup(tr.a, "f"+s).Mode)
				require.Equal(t, uint32(wire.ModeRegular|0o641), f.lookup(tr.b, "g"+s).Mode)
			},
		},
		"exchange a directory and a file across parents": {
			setup: func(tr tree, s string) {
				f.mkdir(tr.a, "d"+s, 0o755, root)
				f.file(tr.b, "g"+s, 0o644, root)
			},
			req: func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "d"+s, tr.b, "g"+s, wire.RenameExchange) },
			check: func(t *testing.T, tr tree, s string) {
				require.True(t, f.lookup(tr.b, "g"+s).IsDir())
				require.False(t, f.lookup(tr.a, "d"+s).IsDir())
				require.Equal(t, uint32(2), f.attr(tr.a).Nlink)
				require.Equal(t, uint32(3), f.attr(tr.b).Nlink)
				require.Equal(t, tr.b, f.lookup(f.lookup(tr.b, "g"+s).Ino, "..").Ino)
			},
		},
		"exchange with a missing target": {
			setup: func(tr tree, s string) { f.file(tr.a, "f"+s, 0o644, root) },
			req:   func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, wire.RenameExchange) },
			want:  syscall.ENOENT,
		},
		"two links of one inode": {
			setup: func(tr tree, s string) {
				a := f.file(tr.a, "f"+s, 0o644, root)
				_, err := f.cl.Link(bg, root, a.Ino, tr.b, "g"+s)
				require.NoError(t, err)
			},
			req: func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.b, "g"+s, 0) },
			check: func(t *testing.T, tr tree, s string) {
				require.Equal(t, uint32(2), f.lookup(tr.a, "f"+s).Nlink)
				f.lookup(tr.b, "g"+s)
			},
		},
		"onto itself": {
			setup: func(tr tree, s string) { f.file(tr.a, "f"+s, 0o644, root) },
			req:   func(tr tree, s string) wire.RenameRequest { return rr(tr.a, "f"+s, tr.a, "f"+s, 0) },
			check: func(t *testing.T, tr tree, s string) { f.lookup(tr.a, "f"+s) },
		},
		"with a stale source hint": {
			setup: func(tr tree, s string) {
				f.file(tr.a, "f"+s, 0o644, root)
				f.file(tr.a, "other"+s, 0o600, root)
			},
			req: func(tr tree, s string) wire.RenameRequest {
				r := rr(tr.a, "f"+s, tr.b, "g"+s, 0)
				r.SrcIno = f.lookup(tr.a, "other"+s).Ino
				return r
			},
			check: func(t *testing.T, tr tree, s string) {
				require.Equal(t, uint32(wire.ModeRegular|0o644), f.lookup(tr.b, "g"+s).Mode)
				f.lookup(tr.a, "other"+s)
			},
		},
	}
	n := 0
	for name, tc := range tests {
		for v := range 6 {
			n++
			s := fmt.Sprint(v)
			t.Run(fmt.Sprintf("%s/%d", name, v), func(t *testing.T) {
				c := f.mkdir(rootIno, fmt.Sprintf("case%d", n), 0o755, root)
				tr := tree{caseIn: c.Ino, a: f.mkdir(c.Ino, "a"+s, 0o755, root).Ino, b: f.mkdir(c.Ino, "b"+s, 0o755, root).Ino}
				tc.setup(tr, s)
				before := f.attr(tr.a).Ctime
				err := f.cl.Rename(bg, root, tc.req(tr, s))
				require.Equal(t, tc.want, errnoOf(t, err))
				if tc.want == 0 && tc.check != nil {
					tc.check(t, tr, s)
				}
				if tc.want != 0 {
					require.Equal(t, before, f.attr(tr.a).Ctime, "a failed rename changed nothing")
				}
			})
		}
	}
}

func rr(sp uint64, sn string, dp uint64, dn string, flags uint32) wire.RenameRequest {
	return wire.RenameRequest{SrcParent: sp, SrcName: sn, DstParent: dp, DstName: dn, Flags: flags}
}

func gone(t *testing.T, f *fixture, dir uint64, name string) {
	t.Helper()
	_, err := f.cl.Lookup(bg, root, dir, name)
	require.Equal(t, syscall.ENOENT, err)
}
