package rpc

import (
	"bytes"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"
)

// The golden bytes pin the wire format: a change here is a protocol
// change, which needs a new version.
func TestHeaderGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		h    header
		want string
	}{
		{"request", header{Kind: kindRequest, Op: 0x0102, RequestID: 0x1122334455667788, Length: 5, Limit: 4096},
			"01010000010200001122334455667788000000050000100000000000000000000000000000000000"},
		{"large reply", header{Kind: kindReply, Flags: flagLarge, Status: StatusOK, Op: 7, RequestID: 9, Length: 1 << 20, Addr: 0xdeadbeef000, RKey: 0xabcd},
			"01020100000700000000000000000009001000000000000000000deadbeef0000000abcd00000000"},
		{"status reply", header{Kind: kindReply, Status: StatusBusy, Op: 7, RequestID: 9, Length: 3},
			"01020003000700000000000000000009000000030000000000000000000000000000000000000000"},
		{"release", header{Kind: kindRelease},
			"01030000000000000000000000000000000000000000000000000000000000000000000000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, HeaderSize)
			tc.h.put(b)
			require.Equal(t, tc.want, hex.EncodeToString(b))
			msg := b
			if !tc.h.large() && tc.h.Kind != kindRelease {
				msg = append(msg, make([]byte, tc.h.Length)...)
			}
			got, _, err := parseMessage(msg)
			require.NoError(t, err)
			require.Equal(t, tc.h, got)
		})
	}
}

func encode(h header, payload []byte) []byte {
	b := make([]byte, HeaderSize, HeaderSize+len(payload))
	h.put(b)
	return append(b, payload...)
}

func TestParseMessageRejects(t *testing.T) {
	req := header{Kind: kindRequest, Op: 1, RequestID: 2, Length: 3, Limit: 4096}
	good := encode(req, []byte("abc"))
	_, payload, err := parseMessage(good)
	require.NoError(t, err)
	require.Equal(t, "abc", string(payload))

	mutate := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	with := func(f func(h *header)) []byte {
		h := req
		f(&h)
		return encode(h, []byte("abc"))
	}
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"empty", nil},
		{"short", good[:HeaderSize-1]},
		{"version", mutate(func(b []byte) { b[0] = 2 })},
		{"kind zero", mutate(func(b []byte) { b[1] = 0 })},
		{"kind unknown", mutate(func(b []byte) { b[1] = 9 })},
		{"unknown flag", mutate(func(b []byte) { b[2] = 0x80 })},
		{"reserved 6", mutate(func(b []byte) { b[6] = 1 })},
		{"reserved 39", mutate(func(b []byte) { b[39] = 1 })},
		{"request with status", with(func(h *header) { h.Status = StatusBusy })},
		{"request limit too small", with(func(h *header) { h.Limit = minInline - 1 })},
		{"length longer than message", with(func(h *header) { h.Length = 4 })},
		{"length shorter than message", with(func(h *header) { h.Length = 2 })},
		{"length over the wire maximum", with(func(h *header) { h.Length = maxWireMessage + 1 })},
		{"inline with rkey", with(func(h *header) { h.RKey = 5 })},
		{"inline with addr", with(func(h *header) { h.Addr = 5 })},
		{"large with payload", with(func(h *header) { h.Flags = flagLarge })},
		{"large of zero bytes", encode(header{Kind: kindRequest, Flags: flagLarge, Limit: 4096}, nil)},
		{"reply with limit", encode(header{Kind: kindReply, Limit: 4096}, nil)},
		{"reply with unknown status", encode(header{Kind: kindReply, Status: numStatuses}, nil)},
		{"release with op", encode(header{Kind: kindRelease, Op: 1}, nil)},
		{"release with payload", append(encode(header{Kind: kindRelease}, nil), 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parseMessage(tc.msg)
			require.ErrorIs(t, err, ErrProtocol)
		})
	}
}

func TestImmediate(t *testing.T) {
	for _, tc := range []struct{ slot, gen uint16 }{{0, 0}, {1, 0}, {0, 1}, {MaxSlots - 1, 0xffff}, {0xffff, 0xffff}} {
		s, g := splitImm(makeImm(tc.slot, tc.gen))
		require.Equal(t, tc.slot, s)
		require.Equal(t, tc.gen, g)
	}
	require.NotEqual(t, makeImm(3, 1), makeImm(3, 2), "a new generation changes the immediate")
}

func TestServerParams(t *testing.T) {
	p := serverParams{Slots: 64, InlineSize: 4096, MaxMessage: 1 << 20}
	b := p.marshal()
	require.Equal(t, "4f52504301000000004000000000100000100000", hex.EncodeToString(b))
	got, err := decodeServerParams(b)
	require.NoError(t, err)
	require.Equal(t, p, got)
	for _, tc := range []struct {
		name string
		f    func(b []byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"hello of another service", func([]byte) []byte { return []byte(`{"v":1,"token":"x"}`) }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", func(b []byte) []byte { b[4] = 2; return b }},
		{"reserved", func(b []byte) []byte { b[10] = 1; return b }},
		{"zero slots", func(b []byte) []byte { b[8], b[9] = 0, 0; return b }},
		{"too many slots", func(b []byte) []byte { b[8], b[9] = 0xff, 0xff; return b }},
		{"inline too small", func(b []byte) []byte { b[12], b[13], b[14], b[15] = 0, 0, 0, 1; return b }},
		{"long", func(b []byte) []byte { return append(b, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decodeServerParams(tc.f(bytes.Clone(b)))
			require.ErrorIs(t, err, ErrProtocol)
		})
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add(encode(header{Kind: kindRequest, Op: 1, RequestID: 2, Length: 3, Limit: 4096}, []byte("abc")))
	f.Add(encode(header{Kind: kindReply, Flags: flagLarge, Length: 1 << 20, Addr: 1, RKey: 2}, nil))
	f.Add(encode(header{Kind: kindRelease}, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, payload, err := parseMessage(msg)
		if err != nil {
			return
		}
		// Whatever parses re-encodes to the same header bytes, and the
		// payload is exactly what follows the header.
		b := make([]byte, HeaderSize)
		h.put(b)
		if !bytes.Equal(b, msg[:HeaderSize]) {
			t.Fatalf("header %x re-encodes as %x", msg[:HeaderSize], b)
		}
		if h.large() || h.Kind == kindRelease {
			if payload != nil || len(msg) != HeaderSize {
				t.Fatalf("large or release message with inline bytes accepted")
			}
			return
		}
		if int(h.Length) != len(payload) || !bytes.Equal(payload, msg[HeaderSize:]) {
			t.Fatalf("payload of %d bytes for length %d", len(payload), h.Length)
		}
	})
}

func FuzzDecodeServerParams(f *testing.F) {
	f.Add(serverParams{Slots: 64, InlineSize: 4096, MaxMessage: 1 << 20}.marshal())
	f.Add([]byte("ORPC"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := decodeServerParams(b)
		if err != nil {
			return
		}
		if !bytes.Equal(p.marshal(), b) {
			t.Fatalf("params %x re-encode as %x", b, p.marshal())
		}
	})
}
