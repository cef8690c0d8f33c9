package codec

import (
	"errors"
	"slices"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	e := NewEncoder(nil)
	e.U8(7)
	e.Bool(true)
	e.U16(0xbeef)
	e.U32(0xdeadbeef)
	e.U64(1 << 60)
	e.I64(-5)
	e.Bytes32([]byte("blob"))
	e.String16("name")
	e.String32("long")
	e.U32s([]uint32{1, 2, 3})

	d := NewDecoder(e.Bytes())
	if got := d.U8(); got != 7 {
		t.Errorf("U8 = %d", got)
	}
	if !d.Bool() {
		t.Error("Bool = false")
	}
	if got := d.U16(); got != 0xbeef {
		t.Errorf("U16 = %#x", got)
	}
	if got := d.U32(); got != 0xdeadbeef {
		t.Errorf("U32 = %#x", got)
	}
	if got := d.U64(); got != 1<<60 {
		t.Errorf("U64 = %#x", got)
	}
	if got := d.I64(); got != -5 {
		t.Errorf("I64 = %d", got)
	}
	if got := d.Bytes32(10); string(got) != "blob" {
		t.Errorf("Bytes32 = %q", got)
	}
	if got := d.String16(10); got != "name" {
		t.Errorf("String16 = %q", got)
	}
	if got := d.String32(10); got != "long" {
		t.Errorf("String32 = %q", got)
	}
	if got := d.U32s(10); !slices.Equal(got, []uint32{1, 2, 3}) {
		t.Errorf("U32s = %v", got)
	}
	if err := d.Finish(); err != nil {
		t.Fatal(err)
	}
}

func TestMalformed(t *testing.T) {
	long := NewEncoder(nil)
	long.String16("abcdef")
	many := NewEncoder(nil)
	many.U32s([]uint32{1, 2, 3, 4})
	for _, tc := range []struct {
		name string
		in   []byte
		read func(d *Decoder)
	}{
		{"short u64", []byte{1, 2, 3}, func(d *Decoder) { d.U64() }},
		{"length past end", []byte{10, 0, 0, 0, 'a'}, func(d *Decoder) { d.Bytes32(100) }},
		{"length over max", long.Bytes(), func(d *Decoder) { d.String16(3) }},
		{"too many values", many.Bytes(), func(d *Decoder) { d.U32s(3) }},
		{"count past end", []byte{200, 0, 1, 0, 0, 0}, func(d *Decoder) { d.U32s(1000) }},
		{"bad bool", []byte{2}, func(d *Decoder) { d.Bool() }},
		{"trailing bytes", []byte{1, 2}, func(d *Decoder) { d.U8() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := NewDecoder(tc.in)
			tc.read(d)
			if err := d.Finish(); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Finish = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestErrorSticks(t *testing.T) {
	d := NewDecoder([]byte{1})
	d.U32()
	first := d.Err()
	if first == nil {
		t.Fatal("no error for a short u32")
	}
	if d.U8() != 0 || d.Err() != first {
		t.Fatalf("reads after an error: value returned or error replaced (%v)", d.Err())
	}
}

// FuzzDecoder feeds arbitrary bytes to every reader in an order chosen by
// the input itself: no panic, no allocation beyond the input.
func FuzzDecoder(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{5, 4, 0, 0, 0, 'a', 'b', 'c', 'd'})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		plan := b[0]
		d := NewDecoder(b[1:])
		for i := 0; i < 64 && d.Err() == nil && d.Remaining() > 0; i++ {
			switch (plan + uint8(i)) % 9 {
			case 0:
				d.U8()
			case 1:
				d.Bool()
			case 2:
				d.U16()
			case 3:
				d.U32()
			case 4:
				d.U64()
			case 5:
				if p := d.Bytes32(len(b)); len(p) > len(b) {
					t.Fatalf("Bytes32 returned %d bytes from %d", len(p), len(b))
				}
			case 6:
				d.String16(255)
			case 7:
				d.String32(4096)
			case 8:
				if v := d.U32s(64); len(v) > 64 {
					t.Fatalf("U32s returned %d values", len(v))
				}
			}
		}
		d.Finish()
	})
}
