//go:build verbs && cgo

package verbs

import (
	"fmt"
	"net/netip"
)

// GID types, the values of enum ibv_gid_type.
const (
	gidTypeIB     = 0
	gidTypeRoCEv1 = 1
	gidTypeRoCEv2 = 2
)

type gidEntry struct {
	index int
	typ   int
	gid   [16]byte
}

// pickGID chooses the source GID index. A non-negative want is used as
// is if the port has it. Otherwise InfiniBand ports use index 0 (peers are
// addressed by LID), and Ethernet ports (RoCE, rxe) the best RoCE v2 GID:
// IPv4-mapped, then global IPv6, then link-local IPv6; RoCE v1 GIDs only
// when there is no v2 one, because rxe and routed RoCE networks speak v2.
func pickGID(table []gidEntry, want int, ethernet bool) (int, error) {
	if want >= 0 {
		for _, e := range table {
			if e.index == want {
				return want, nil
			}
		}
		return 0, fmt.Errorf("GID index %d is empty (valid: %s)", want, gidIndexes(table))
	}
	if len(table) == 0 {
		return 0, fmt.Errorf("%w: the GID table is empty (for RoCE/rxe: give the netdev an address)", errNoGID)
	}
	if !ethernet {
		return table[0].index, nil
	}
	best, bestRank := -1, 0
	for _, e := range table {
		if r := gidRank(e); r > bestRank {
			best, bestRank = e.index, r
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("%w among %s", errNoGID, gidIndexes(table))
	}
	return best, nil
}

// gidRank orders GIDs by preference; 0 means unusable.
func gidRank(e gidEntry) int {
	a := netip.AddrFrom16(e.gid)
	r := 0
	switch {
	case a.Is4In6():
		r = 3
	case a.IsLinkLocalUnicast():
		r = 1
	case a.IsGlobalUnicast() || a.IsPrivate():
		r = 2
	default:
		return 0
	}
	switch e.typ {
	case gidTypeRoCEv2:
		return r + 10
	case gidTypeRoCEv1:
		return r
	}
	return 0
}

func gidIndexes(table []gidEntry) string {
	s := ""
	for _, e := range table {
		if s != "" {
			s += ", "
		}
		typ := map[int]string{gidTypeIB: "IB", gidTypeRoCEv1: "RoCE v1", gidTypeRoCEv2: "RoCE v2"}[e.typ]
		s += fmt.Sprintf("%d=%s %s", e.index, fmtGID(e.gid), typ)
	}
	if s == "" {
		return "none"
	}
	return s
}

func fmtGID(g [16]byte) string { return netip.AddrFrom16(g).String() }

// mtuBytes converts enum ibv_mtu (1: 256 ... 5: 4096) to bytes.
func mtuBytes(m int) uint32 {
	if m < 1 || m > 5 {
		return 0
	}
	return 128 << m
}

// mtuEnum is the largest enum ibv_mtu not above n bytes (at least 256).
func mtuEnum(n uint32) int {
	m := 1
	for m < 5 && uint32(128<<(m+1)) <= n {
		m++
	}
	return m
}
