package rdma

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCMMsgRoundTrip(t *testing.T) {
	tests := map[string]cmMsg{
		"request": {Kind: cmRequest, Endpoint: Endpoint{QPN: 7, PSN: 0xabcdef, Addr: "127.0.0.1:4791", Secret: [SecretSize]byte{1, 2, 15: 0xff}}, PrivateData: []byte("token")},
		"accept":  {Kind: cmAccept, Endpoint: Endpoint{QPN: 1 << 23, LID: 3, GID: [16]byte{0xfe, 0x80, 15: 1}, MTU: 4096}},
		"reject":  {Kind: cmReject, PrivateData: []byte("no")},
		"ready":   {Kind: cmReady},
	}
	for name, m := range tests {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, writeCMMsg(&buf, &m))
			got, err := readCMMsg(&buf)
			require.NoError(t, err)
			require.Equal(t, m, *got)
		})
	}
}

func TestCMMsgRejectsMalformed(t *testing.T) {
	good, err := (&cmMsg{Kind: cmRequest, Endpoint: Endpoint{Addr: "a:1"}, PrivateData: []byte("pd")}).marshal()
	require.NoError(t, err)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	tests := map[string][]byte{
		"bad magic":      mutate(func(b []byte) []byte { b[0] = 'X'; return b }),
		"unknown kind":   mutate(func(b []byte) []byte { b[4] = 99; return b }),
		"huge body":      mutate(func(b []byte) []byte { b[8] = 0x7f; return b }),
		"truncated":      good[:len(good)-1],
		"addr overflows": mutate(func(b []byte) []byte { b[cmHeaderSize+30+SecretSize] = 0xff; return b }),
		"old version":    mutate(func(b []byte) []byte { b[3] = 1; return b }),
		"private short":  mutate(func(b []byte) []byte { b[len(b)-3] = 9; return b }),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := readCMMsg(bytes.NewReader(b))
			require.Error(t, err)
		})
	}
}

func FuzzCMMsg(f *testing.F) {
	for _, m := range []cmMsg{
		{Kind: cmRequest, Endpoint: Endpoint{QPN: 1, Addr: "127.0.0.1:1", Secret: [SecretSize]byte{9: 9}}, PrivateData: []byte("x")},
		{Kind: cmReady},
	} {
		b, err := m.marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := readCMMsg(bytes.NewReader(b))
		if err != nil {
			// Malformed input must be refused as a protocol error, or as
			// a short read when the bytes end early.
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		// What decodes must encode back to the same message.
		out, err := m.marshal()
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		m2, err := readCMMsg(bytes.NewReader(out))
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v", err)
		}
		require.Equal(t, m, m2)
	})
}
