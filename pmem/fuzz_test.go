package pmem

import (
	"context"
	"encoding/binary"
	"testing"
)

// fuzzGeometry is the layout the log and record fuzzers decode against.
func fuzzGeometry(t testing.TB) Geometry {
	g, err := formatGeometry(128<<10, smallFormat)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func FuzzDecodeSuperblock(f *testing.F) {
	g := fuzzGeometry(f)
	sb := Superblock{Version: FormatVersion, Seq: 3, RegionUUID: UUID{1}, ClusterUUID: UUID{2}, NodeID: 4, Geometry: g}
	good := sb.Encode()
	f.Add(good)
	f.Add(make([]byte, superblockSize))
	f.Add(good[:100])
	torn := append([]byte(nil), good...)
	torn[70] ^= 1
	f.Add(torn)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSuperblock(b)
		if err != nil {
			return
		}
		// Whatever decodes must describe areas inside the region and
		// survive a round trip.
		g := s.Geometry
		if end := g.DataOff + g.NumBlocks*uint64(g.BlockSize); end > g.RegionSize || g.RecordOff+g.NumRecords*uint64(g.RecordSize) > g.DataOff {
			t.Fatalf("decoded geometry overflows the region: %+v", g)
		}
		s2, err := DecodeSuperblock(s.Encode())
		if err != nil || s2 != s {
			t.Fatalf("round trip: %v, %+v != %+v", err, s2, s)
		}
	})
}

func FuzzDecodeLogSlot(f *testing.F) {
	g := fuzzGeometry(f)
	slot := func(seq uint64, entries []logEntry) []byte {
		b := make([]byte, g.LogSlotSize)
		binary.LittleEndian.PutUint64(b, seq)
		size := 0
		for _, e := range entries {
			size += e.size()
		}
		encodeLogSlot(b[8:], seq, entries, size)
		return b
	}
	f.Add(slot(5, []logEntry{{op: opSet, off: g.RootsOff, val: 1}, {op: opOr, off: g.BlkBitmapOff, val: 3}, {op: opAndNot, off: g.RecBitmapOff, val: 1}}))
	f.Add(slot(6, []logEntry{{op: opBlkSet, off: 3, val: 70}, {op: opWrite, off: g.DataOff + 3, val: 5, data: []byte("hello")}, {op: opBlkClear, off: 0, val: 1}}))
	f.Add(slot(1, nil))
	f.Add(make([]byte, g.LogSlotSize))
	bad := slot(9, []logEntry{{op: opSet, off: 0, val: 1}}) // targets the superblock
	f.Add(bad)
	f.Add(slot(9, []logEntry{{op: opWrite, off: g.DataOff, val: 200, data: make([]byte, 200)}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeLogSlot(b, g)
		if err != nil || !s.committed {
			return
		}
		for _, e := range s.entries {
			sp := (&Region{geo: g}).entrySpan(e)
			if !g.mutable(sp.off, sp.n) || sp.off+sp.n > g.RegionSize {
				t.Fatalf("accepted entry outside the mutable areas: %+v", e)
			}
			if e.op == opWrite && uint64(len(e.data)) != e.val {
				t.Fatalf("write entry with %d bytes of data says %d", len(e.data), e.val)
			}
		}
		// Whatever decodes re-encodes to the same bytes.
		size := 0
		for _, e := range s.entries {
			size += e.size()
		}
		enc := encodeLogSlot(make([]byte, g.LogSlotSize), s.seq, s.entries, size)
		if want := b[8 : 8+len(enc)]; string(enc) != string(want) {
			t.Fatalf("round trip differs")
		}
	})
}

func FuzzDecodeRecordHeader(f *testing.F) {
	good := make([]byte, 80)
	binary.LittleEndian.PutUint64(good, encodeHeaderWord0(3, 2))
	binary.LittleEndian.PutUint64(good[8:], 7)
	binary.LittleEndian.PutUint64(good[16:], 10)
	binary.LittleEndian.PutUint64(good[24:], 4)
	binary.LittleEndian.PutUint64(good[32:], 20)
	binary.LittleEndian.PutUint64(good[40:], 1)
	f.Add(good, uint32(4), uint64(100))
	f.Add(make([]byte, 80), uint32(4), uint64(100))
	f.Add(good, uint32(1<<31), uint64(1<<63))
	f.Fuzz(func(t *testing.T, b []byte, slots uint32, numBlocks uint64) {
		h, err := decodeRecordHeader(b, slots, numBlocks)
		if err != nil {
			return
		}
		for _, e := range h.Extents {
			if e.Count == 0 || e.End() > numBlocks || e.End() < e.Start {
				t.Fatalf("accepted extent %v outside %d blocks", e, numBlocks)
			}
		}
	})
}

// FuzzAttach damages a formatted, populated region image at a fuzzed
// offset and opens it: opening, fsck, repair and a transaction on the
// result must fail cleanly or work, never panic or hang.
func FuzzAttach(f *testing.F) {
	base := func() []byte {
		m := NewMemMedium(MinRegionSize)
		r, err := Format(m, smallFormat, Options{})
		if err != nil {
			f.Fatal(err)
		}
		tx, _ := r.Begin(context.Background())
		id, _ := tx.AllocRecord(2)
		tx.AllocExtent(id, 2)
		tx.SetRoot(0, uint64(id))
		if err := tx.Commit(); err != nil {
			f.Fatal(err)
		}
		return m.Bytes()
	}()
	g := fuzzGeometry(f)
	f.Add(uint32(0), []byte{0xff})
	f.Add(uint32(g.LogOff), []byte{1, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add(uint32(g.RecordOff), []byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint32(g.BlkBitmapOff), []byte{0xff, 0xff})
	f.Add(uint32(superblockSlot+72), []byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, at uint32, patch []byte) {
		img := append([]byte(nil), base...)
		copy(img[int(at)%len(img):], patch)
		r, err := Attach(NewMemMediumFrom(img), Options{DiscardCorruptLog: true})
		if err != nil {
			return
		}
		defer r.Close()
		_ = Check(r)
		if _, err := Repair(context.Background(), r); err != nil {
			return
		}
		tx, err := r.Begin(context.Background())
		if err != nil {
			return
		}
		if id, err := tx.AllocRecord(1); err == nil {
			tx.AllocExtent(id, 1)
		}
		_ = tx.Commit()
		_ = r.Records(func(Record) bool { return true })
	})
}
