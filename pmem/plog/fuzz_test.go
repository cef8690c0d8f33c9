package plog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/octofs/octofs/pmem"
)

// The decoders of on-media bytes take anything without panicking, and
// whatever they accept encodes back to the same bytes (so no field is
// silently dropped or normalised).

func FuzzDecodeHead(f *testing.F) {
	f.Add(encodeHead(head{ID: LogID{1, 2}, Epoch: 1}), uint64(100))
	f.Add(encodeHead(head{ID: LogID{2, 9}, Epoch: 7, First: 3, Last: 9, RewriteBytes: 4096, State: stateDeleting}), uint64(10))
	f.Add([]byte{}, uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, numRecords uint64) {
		h, err := decodeHead(b, numRecords)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if got := encodeHead(h); !bytes.Equal(got, b[:headSize]) {
			t.Fatalf("decoded %+v re-encodes as %x, was %x", h, got, b[:headSize])
		}
	})
}

func FuzzDecodeSegment(f *testing.F) {
	f.Add(encodeSegment(segment{ID: LogID{1, 2}, Owner: 4, Epoch: 1, Seq: 0, End: 64}), uint64(100))
	f.Add(encodeSegment(segment{ID: LogID{3, 1}, Owner: 1, Epoch: 9, Seq: 5, Next: 12, End: 1 << 20}), uint64(12))
	f.Fuzz(func(t *testing.T, b []byte, numRecords uint64) {
		s, err := decodeSegment(b, numRecords)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if got := encodeSegment(s); !bytes.Equal(got, b[:segSize]) {
			t.Fatalf("decoded %+v re-encodes as %x, was %x", s, got, b[:segSize])
		}
	})
}

func FuzzDecodePool(f *testing.F) {
	f.Add(encodePool(pool{ID: LogID{2, 5}, Owner: 8}), uint64(100))
	f.Fuzz(func(t *testing.T, b []byte, numRecords uint64) {
		p, err := decodePool(b, numRecords)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if got := encodePool(p); !bytes.Equal(got, b[:poolSize]) {
			t.Fatalf("decoded %+v re-encodes as %x, was %x", p, got, b[:poolSize])
		}
	})
}

func FuzzDecodeFrame(f *testing.F) {
	frame := func(salt uint32, recs ...[]byte) []byte {
		var b []byte
		for _, r := range recs {
			buf := make([]byte, frameSize(len(r)))
			putFrame(buf, salt, r)
			b = append(b, buf...)
		}
		return b
	}
	f.Add(frame(7, []byte("hello")), uint32(7))
	f.Add(frame(1, []byte{}, []byte("a longer record of some bytes")), uint32(1))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}, uint32(0))
	f.Fuzz(func(t *testing.T, b []byte, salt uint32) {
		// Walk the bytes as replay does: records back to back.
		for off := 0; off < len(b); {
			rec, n, err := decodeFrame(b[off:], salt)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error %v is not ErrCorrupt", err)
				}
				return
			}
			if n < frameHdr || n > len(b)-off || n%8 != 0 {
				t.Fatalf("frame size %d at %d of %d bytes", n, off, len(b))
			}
			again := make([]byte, frameSize(len(rec)))
			putFrame(again, salt, rec)
			if !bytes.Equal(again, b[off:off+n]) {
				t.Fatalf("decoded record re-frames as %x, was %x", again, b[off:off+n])
			}
			off += n
		}
	})
}

// FuzzOpen damages the plog bytes of a populated region (the payloads of
// its records and the bytes of its segments) and then opens, checks,
// replays and appends to it: damage must be reported, never a panic.
func FuzzOpen(f *testing.F) {
	img, targets := fuzzImage(f)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0xff})
	f.Add([]byte{1, 0, 0x01, 40, 0, 0x80, 0, 2, 0x10})
	f.Fuzz(func(t *testing.T, damage []byte) {
		m := pmem.NewMemMediumFrom(img)
		buf := m.Bytes()
		// Each 3-byte group: a 16-bit index into the target bytes, an XOR mask.
		for i := 0; i+3 <= len(damage); i += 3 {
			at := int(binary.LittleEndian.Uint16(damage[i:])) % len(targets)
			buf[targets[at]] ^= damage[i+2]
		}
		r, err := pmem.Attach(m, pmem.Options{})
		if err != nil {
			return
		}
		defer r.Close()
		_ = Check(r).String()
		pmemClean := pmem.Check(r).Clean()
		s, err := Open(r, Options{SegmentSize: 1024})
		if err != nil {
			return
		}
		if rep := pmem.Check(r); pmemClean && !rep.Clean() {
			t.Fatalf("plog.Open broke the region's layout:\n%s", rep)
		}
		// What Check passes, Replay reads.
		clean := Check(r).Clean()
		for _, id := range s.IDs() {
			l, err := s.Log(id)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%v: %v is not ErrCorrupt", id, err)
				}
				continue
			}
			if err := l.Replay(func([]byte) error { return nil }); err != nil && clean {
				t.Fatalf("Check found nothing wrong but %v does not replay: %v", id, err)
			}
			_ = l.Append([]byte("after damage"))
			_ = l.Rewrite(func(emit func([]byte) error) error { return emit([]byte("rewritten")) })
			_ = l.Replay(func([]byte) error { return nil })
		}
		_ = Check(r).String()
	})
}

// fuzzImage builds a small region with two logs, segments, a rewrite's
// leftovers and pools, and lists the offsets of plog's bytes in it.
func fuzzImage(f *testing.F) ([]byte, []int) {
	m := pmem.NewMemMedium(256 << 10)
	r, err := pmem.Format(m, pmem.FormatOptions{BlockSize: 512, LogSlots: 4, LogSlotSize: 2048}, pmem.Options{})
	if err != nil {
		f.Fatal(err)
	}
	s, err := Open(r, Options{SegmentSize: 1024})
	if err != nil {
		f.Fatal(err)
	}
	for i, id := range []LogID{{1, 1}, {2, 1}} {
		l, err := s.Log(id)
		if err != nil {
			f.Fatal(err)
		}
		for j := range 30 {
			if err := l.Append(bytes.Repeat([]byte{byte(j)}, 10+j*7), []byte("x")); err != nil {
				f.Fatal(err)
			}
		}
		if i == 0 {
			if err := l.Rewrite(func(emit func([]byte) error) error { return emit([]byte("snapshot")) }); err != nil {
				f.Fatal(err)
			}
			if err := l.Append([]byte("after rewrite")); err != nil {
				f.Fatal(err)
			}
		}
		if _, err := l.AllocPool(4); err != nil {
			f.Fatal(err)
		}
	}
	var targets []int
	g := r.Geometry()
	err = r.Records(func(rec pmem.Record) bool {
		switch rec.Kind {
		case KindHead, KindSegment, KindPool:
			for i := range 56 {
				targets = append(targets, int(rec.PayloadOff)+i)
			}
		}
		if rec.Kind == KindSegment {
			off := int(r.ExtentOffset(rec.Extents[0]))
			for i := range int(rec.Extents[0].Count * uint64(g.BlockSize)) {
				targets = append(targets, off+i)
			}
		}
		return true
	})
	if err != nil {
		f.Fatal(err)
	}
	img := bytes.Clone(m.Bytes())
	r.Close()
	return img, targets
}
