//go:build verbs && cgo

package verbs

import (
	"net/netip"
	"testing"
)

func gidOf(s string) [16]byte { return netip.MustParseAddr(s).As16() }

func TestPickGID(t *testing.T) {
	// The GID table of an rxe device on a netdev with an IPv4 address: the
	// link-local GID first, RoCE v2 only.
	rxe := []gidEntry{
		{index: 0, typ: gidTypeRoCEv2, gid: gidOf("fe80::5054:ff:fe00:1")},
		{index: 1, typ: gidTypeRoCEv2, gid: gidOf("::ffff:169.254.10.1")},
	}
	// A RoCE NIC lists each address as v1 and v2.
	mlx := []gidEntry{
		{index: 0, typ: gidTypeRoCEv1, gid: gidOf("fe80::1")},
		{index: 1, typ: gidTypeRoCEv2, gid: gidOf("fe80::1")},
		{index: 2, typ: gidTypeRoCEv1, gid: gidOf("2001:db8::1")},
		{index: 3, typ: gidTypeRoCEv2, gid: gidOf("2001:db8::1")},
		{index: 4, typ: gidTypeRoCEv1, gid: gidOf("::ffff:10.0.0.1")},
		{index: 5, typ: gidTypeRoCEv2, gid: gidOf("::ffff:10.0.0.1")},
	}
	ib := []gidEntry{{index: 0, typ: gidTypeIB, gid: gidOf("fe80::2:c903:a:1")}}
	for _, tc := range []struct {
		name     string
		table    []gidEntry
		want     int
		ethernet bool
		got      int
		err      bool
	}{
		{name: "rxe/auto prefers IPv4-mapped v2", table: rxe, want: -1, ethernet: true, got: 1},
		{name: "rxe/explicit index", table: rxe, want: 0, ethernet: true, got: 0},
		{name: "rxe/empty index", table: rxe, want: 7, ethernet: true, err: true},
		{name: "roce/auto prefers v2 IPv4", table: mlx, want: -1, ethernet: true, got: 5},
		{name: "roce/auto global IPv6 over link-local", table: mlx[:4], want: -1, ethernet: true, got: 3},
		{name: "roce/auto link-local v2", table: mlx[:2], want: -1, ethernet: true, got: 1},
		{name: "roce/v1 only", table: []gidEntry{mlx[0]}, want: -1, ethernet: true, got: 0},
		{name: "ib/auto index 0", table: ib, want: -1, ethernet: false, got: 0},
		{name: "empty table", table: nil, want: -1, ethernet: true, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pickGID(tc.table, tc.want, tc.ethernet)
			if tc.err {
				if err == nil {
					t.Fatalf("pickGID = %d, want an error", got)
				}
				return
			}
			if err != nil || got != tc.got {
				t.Fatalf("pickGID = %d, %v; want %d", got, err, tc.got)
			}
		})
	}
}

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		bytes uint32
		enum  int
	}{{256, 1}, {1023, 2}, {1024, 3}, {1500, 3}, {4096, 5}, {9000, 5}, {100, 1}} {
		if got := mtuEnum(tc.bytes); got != tc.enum {
			t.Errorf("mtuEnum(%d) = %d, want %d", tc.bytes, got, tc.enum)
		}
	}
	for m := 1; m <= 5; m++ {
		if mtuEnum(mtuBytes(m)) != m {
			t.Errorf("mtuEnum(mtuBytes(%d)) = %d", m, mtuEnum(mtuBytes(m)))
		}
	}
}
