package acl

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func ents(es ...Entry) ACL { return ACL(es) }

func uo(p uint16) Entry           { return Entry{Tag: TagUserObj, Perm: p, ID: undefinedID} }
func u(id uint32, p uint16) Entry { return Entry{Tag: TagUser, Perm: p, ID: id} }
func gobj(p uint16) Entry         { return Entry{Tag: TagGroupObj, Perm: p, ID: undefinedID} }
func g(id uint32, p uint16) Entry { return Entry{Tag: TagGroup, Perm: p, ID: id} }
func mask(p uint16) Entry         { return Entry{Tag: TagMask, Perm: p, ID: undefinedID} }
func other(p uint16) Entry        { return Entry{Tag: TagOther, Perm: p, ID: undefinedID} }

func TestDecodeRoundTrip(t *testing.T) {
	a := ents(uo(6), u(1000, 7), gobj(4), g(50, 2), mask(6), other(0))
	b, err := Decode(a.Encode())
	require.NoError(t, err)
	require.Equal(t, a, b)

	empty, err := Decode(ACL(nil).Encode())
	require.NoError(t, err)
	require.Nil(t, empty, "a header alone is the empty ACL")
}

func TestDecodeRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"short":       {[]byte{2, 0}, ErrInvalid},
		"version":     {[]byte{1, 0, 0, 0}, ErrVersion},
		"ragged":      {append(ents(uo(6), gobj(4), other(4)).Encode(), 1), ErrInvalid},
		"no mask":     {ents(uo(6), u(1, 4), gobj(4), other(4)).Encode(), ErrInvalid},
		"two owners":  {ents(uo(6), uo(6), gobj(4), other(4)).Encode(), ErrInvalid},
		"order":       {ents(gobj(4), uo(6), other(4)).Encode(), ErrInvalid},
		"no other":    {ents(uo(6), gobj(4)).Encode(), ErrInvalid},
		"after other": {ents(uo(6), gobj(4), other(4), mask(4)).Encode(), ErrInvalid},
		"bad perm":    {ents(uo(8), gobj(4), other(4)).Encode(), ErrInvalid},
		"unmapped id": {ents(uo(6), u(undefinedID, 4), gobj(4), mask(4), other(4)).Encode(), ErrInvalid},
		"unknown tag": {ents(uo(6), Entry{Tag: 0x40}, gobj(4), other(4)).Encode(), ErrInvalid},
		"too many":    {make([]byte, 4+8*(MaxEntries+1)), ErrInvalid},
	} {
		if name == "too many" {
			tc.b[0] = version
		}
		_, err := Decode(tc.b)
		require.True(t, errors.Is(err, tc.want), "%s: %v", name, err)
	}
}

func TestEquivMode(t *testing.T) {
	perm, eq := ents(uo(6), gobj(4), other(1)).EquivMode()
	require.Equal(t, uint32(0o641), perm)
	require.True(t, eq)
	perm, eq = ents(uo(7), u(5, 7), gobj(4), mask(5), other(0)).EquivMode()
	require.Equal(t, uint32(0o750), perm, "the group class is the mask")
	require.False(t, eq)
}

func TestChmod(t *testing.T) {
	a := ents(uo(7), u(5, 7), gobj(7), mask(7), other(7))
	require.Equal(t, ents(uo(6), u(5, 7), gobj(7), mask(4), other(0)), a.Chmod(0o640))
	require.Equal(t, ents(uo(7), u(5, 7), gobj(7), mask(7), other(7)), a, "Chmod copies")
	require.Equal(t, ents(uo(5), gobj(1), other(2)), ents(uo(7), gobj(7), other(7)).Chmod(0o512))
}

func TestInherit(t *testing.T) {
	def := ents(uo(7), u(5, 7), gobj(5), mask(7), other(5))
	perm, acc, dflt := def.Inherit(0o666, false)
	require.Equal(t, uint32(0o666&0o765), perm)
	require.Equal(t, ents(uo(6), u(5, 7), gobj(5), mask(6), other(4)), acc)
	require.Nil(t, dflt)
	perm, _, dflt = def.Inherit(0o1777, true)
	require.Equal(t, uint32(0o1775), perm, "type and special bits pass through")
	require.Equal(t, def, dflt)
	perm, acc, _ = ents(uo(7), gobj(5), other(0)).Inherit(0o666, false)
	require.Equal(t, uint32(0o640), perm)
	require.Nil(t, acc, "an equivalent ACL is the mode alone")
}

func TestPermits(t *testing.T) {
	in := func(gs ...uint32) func(uint32) bool {
		return func(x uint32) bool {
			for _, g := range gs {
				if g == x {
					return true
				}
			}
			return false
		}
	}
	a := ents(uo(7), u(5, 6), gobj(4), g(50, 6), mask(4), other(0))
	require.True(t, a.Permits(5, in(), 1, Read))
	require.False(t, a.Permits(5, in(), 1, Write), "the mask limits a named user")
	require.True(t, a.Permits(9, in(50), 1, Read))
	require.False(t, a.Permits(9, in(50), 1, Write), "the mask limits a named group")
	require.True(t, a.Permits(9, in(1), 1, Read), "the owning group")
	require.False(t, a.Permits(9, in(1), 1, Exec))
	require.False(t, a.Permits(9, in(), 1, Read), "other has nothing")
	b := ents(uo(7), gobj(0), g(50, 0), mask(7), other(4))
	require.False(t, b.Permits(9, in(50), 1, Read), "a matching group without the bits denies, not other")
	require.True(t, b.Permits(9, in(), 1, Read))
}

func FuzzDecode(f *testing.F) {
	f.Add(ents(uo(6), u(1000, 7), gobj(4), g(50, 2), mask(6), other(0)).Encode())
	f.Add(ents(uo(6), gobj(4), other(4)).Encode())
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := Decode(b)
		if err != nil {
			return
		}
		if a == nil {
			require.Len(t, b, headerLen)
			return
		}
		again, err := Decode(a.Encode())
		require.NoError(t, err)
		require.Equal(t, a, again)
		perm, _ := a.EquivMode()
		require.Zero(t, perm&^0o777)
		_, err = Decode(a.Chmod(0o751).Encode())
		require.NoError(t, err, "chmod keeps an ACL valid")
		_, acc, _ := a.Inherit(0o777, true)
		if acc != nil {
			_, err = Decode(acc.Encode())
			require.NoError(t, err, "an inherited ACL is valid")
		}
	})
}
