package wire

import (
	"bytes"
	"testing"
)

// FuzzRequest: DecodeRequest never panics, and what it accepts re-encodes
// to the same bytes.
func FuzzRequest(f *testing.F) {
	h := sampleHeader()
	for _, tc := range sampleRequests() {
		f.Add(EncodeRequest(tc.op, &h, tc.body))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		op, h, body, err := DecodeRequest(b)
		if err != nil {
			return
		}
		if got := EncodeRequest(op, &h, body); !bytes.Equal(got, b) {
			t.Fatalf("%v: re-encoded\n%x\nfrom\n%x", op, got, b)
		}
	})
}

// FuzzReply: DecodeReply of every op's body never panics, and what it
// accepts re-encodes to the same bytes.
func FuzzReply(f *testing.F) {
	for _, tc := range sampleReplies() {
		f.Add(uint16(tc.op), EncodeReply(ReplyHeader{Epoch: 1}, tc.body))
	}
	f.Add(uint16(OpGetAttr), EncodeReply(ReplyHeader{Status: StatusWrongOwner, Epoch: 9}, nil))
	f.Fuzz(func(t *testing.T, op uint16, b []byte) {
		body := NewReply(Op(op))
		if body == nil {
			return
		}
		rh, err := DecodeReply(b, body)
		if err != nil {
			return
		}
		if got := EncodeReply(rh, body); !bytes.Equal(got, b) {
			t.Fatalf("%v: re-encoded\n%x\nfrom\n%x", Op(op), got, b)
		}
	})
}

// FuzzRecord: DecodeRecord never panics, and what it accepts re-encodes
// to the same bytes.
func FuzzRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(EncodeRecord(r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if got := EncodeRecord(r); !bytes.Equal(got, b) {
			t.Fatalf("kind %d: re-encoded\n%x\nfrom\n%x", r.Kind(), got, b)
		}
	})
}
