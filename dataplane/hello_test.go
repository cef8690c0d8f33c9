package dataplane

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/octofs/octofs/internal/codec"
	"github.com/octofs/octofs/rdma"
)

func TestHelloRoundTrip(t *testing.T) {
	for name, h := range map[string]Hello{
		"client data": {Purpose: PurposeData, Token: "t", ClientID: 7, Incarnation: 9, Client: "fsx"},
		"node rpc":    {Purpose: PurposeRPC, Token: "t", ClientID: 1, Incarnation: 2, Node: "n1"},
		"longest": {Purpose: PurposeRPC, Token: strings.Repeat("t", maxHelloToken), ClientID: 1, Incarnation: 2,
			Node: strings.Repeat("n", maxHelloNode), Client: strings.Repeat("c", maxHelloClient)},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := EncodeHello(h)
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), rdma.MaxPrivateData)
			got, err := DecodeHello(b)
			require.NoError(t, err)
			require.Equal(t, h, got)
		})
	}
}

func TestHelloRefused(t *testing.T) {
	good := Hello{Purpose: PurposeData, Token: "t", ClientID: 7, Incarnation: 9}
	other := codec.NewEncoder(nil)
	other.U8(helloVersion + 1)
	for name, in := range map[string]func() []byte{
		"json v1":       func() []byte { return []byte(`{"v":1,"token":"t"}`) },
		"other version": func() []byte { return other.Bytes() },
		"empty":         func() []byte { return nil },
		"truncated": func() []byte {
			b, _ := EncodeHello(good)
			return b[:len(b)-1]
		},
		"trailing": func() []byte {
			b, _ := EncodeHello(good)
			return append(b, 0)
		},
		"unknown purpose": func() []byte {
			e := codec.NewEncoder(nil)
			e.U8(helloVersion)
			e.String16("bulk")
			e.String16("t")
			e.U64(1)
			e.U64(1)
			e.String16("")
			e.String16("")
			return e.Bytes()
		},
		"zero client": func() []byte {
			e := codec.NewEncoder(nil)
			e.U8(helloVersion)
			e.String16(string(PurposeData))
			e.String16("t")
			e.U64(0)
			e.U64(1)
			e.String16("")
			e.String16("")
			return e.Bytes()
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeHello(in())
			require.ErrorIs(t, err, ErrBadHello)
		})
	}
	_, err := EncodeHello(Hello{Purpose: PurposeData, ClientID: 1, Incarnation: 1, Token: strings.Repeat("x", maxHelloToken+1)})
	require.ErrorIs(t, err, ErrBadHello, "a token too long to decode is refused at encoding")
}

func TestHelloAuthorize(t *testing.T) {
	h := Hello{Token: "secret"}
	require.NoError(t, h.Authorize("secret"))
	for name, want := range map[string]string{"other": "secreT", "prefix": "secret2", "not joined": ""} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, h.Authorize(want), ErrUnauthorized)
		})
	}
	require.ErrorIs(t, Hello{}.Authorize(""), ErrUnauthorized, "an empty token matches nothing")
}

func TestGrantRoundTrip(t *testing.T) {
	g := Grant{Session: 3, Incarnation: 99, BlockSize: 4096}
	got, err := DecodeGrant(EncodeGrant(g))
	require.NoError(t, err)
	require.Equal(t, g, got)
	_, err = DecodeGrant(EncodeGrant(Grant{Session: 3, Incarnation: 99}))
	require.ErrorIs(t, err, ErrBadHello, "a grant without a block size")
	_, err = DecodeGrant([]byte{grantVersion})
	require.ErrorIs(t, err, ErrBadHello)
}

func FuzzDecodeHello(f *testing.F) {
	b, _ := EncodeHello(Hello{Purpose: PurposeRPC, Token: "t", ClientID: 1, Incarnation: 2, Node: "n", Client: "c"})
	f.Add(b)
	f.Add([]byte(`{"v":1}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := DecodeHello(in)
		if err != nil {
			require.ErrorIs(t, err, ErrBadHello)
			return
		}
		// What decodes encodes back to the same bytes.
		out, err := EncodeHello(h)
		require.NoError(t, err)
		require.Equal(t, in, out)
	})
}

func FuzzDecodeGrant(f *testing.F) {
	f.Add(EncodeGrant(Grant{Session: 1, Incarnation: 2, BlockSize: 4096}))
	f.Fuzz(func(t *testing.T, in []byte) {
		g, err := DecodeGrant(in)
		if err != nil {
			require.ErrorIs(t, err, ErrBadHello)
			return
		}
		require.Equal(t, in, EncodeGrant(g))
	})
}
