package codec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrMalformed is returned for input that does not decode.
var ErrMalformed = errors.New("codec: malformed message")

// Encoder appends fields to a byte slice. The zero value is ready to use.
type Encoder struct {
	b []byte
}

// NewEncoder returns an Encoder that appends to buf (which may be nil), so
// a caller can reuse a buffer across messages.
func NewEncoder(buf []byte) *Encoder { return &Encoder{b: buf[:0]} }

// Bytes is the encoded message so far.
func (e *Encoder) Bytes() []byte { return e.b }

// Len is the length of the encoded message so far.
func (e *Encoder) Len() int { return len(e.b) }

// U8 appends v.
func (e *Encoder) U8(v uint8) { e.b = append(e.b, v) }

// Bool appends v as one byte.
func (e *Encoder) Bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// U16 appends v.
func (e *Encoder) U16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }

// U32 appends v.
func (e *Encoder) U32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }

// U64 appends v.
func (e *Encoder) U64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }

// I64 appends v.
func (e *Encoder) I64(v int64) { e.U64(uint64(v)) }

// Bytes32 appends p with a 32-bit length prefix.
func (e *Encoder) Bytes32(p []byte) {
	e.U32(uint32(len(p)))
	e.b = append(e.b, p...)
}

// String16 appends s with a 16-bit length prefix (names, short strings).
// It panics if s is longer than 65535 bytes: callers bound their strings.
func (e *Encoder) String16(s string) {
	if len(s) > math.MaxUint16 {
		panic(fmt.Sprintf("codec: String16 of %d bytes", len(s)))
	}
	e.U16(uint16(len(s)))
	e.b = append(e.b, s...)
}

// String32 appends s with a 32-bit length prefix.
func (e *Encoder) String32(s string) {
	e.U32(uint32(len(s)))
	e.b = append(e.b, s...)
}

// U32s appends a 16-bit count and the values (e.g. supplementary groups).
// It panics past 65535 values.
func (e *Encoder) U32s(v []uint32) {
	if len(v) > math.MaxUint16 {
		panic(fmt.Sprintf("codec: U32s of %d values", len(v)))
	}
	e.U16(uint16(len(v)))
	for _, x := range v {
		e.U32(x)
	}
}

// Decoder reads fields from a message. Its first error sticks.
type Decoder struct {
	b   []byte
	off int
	err error
}

// NewDecoder reads from b. Byte slices it returns alias b.
func NewDecoder(b []byte) *Decoder { return &Decoder{b: b} }

// Err is the first error met, nil if none.
func (d *Decoder) Err() error { return d.err }

// Remaining is how many bytes are left.
func (d *Decoder) Remaining() int { return len(d.b) - d.off }

// Fail records err (wrapped in ErrMalformed unless it already is) as the
// decoder's error if it has none: for checks a message type makes on its
// own fields, such as an unknown version.
func (d *Decoder) Fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
}

// Finish returns the first error, or ErrMalformed if bytes are left over.
func (d *Decoder) Finish() error {
	if d.err == nil && d.off != len(d.b) {
		d.err = fmt.Errorf("%w: %d trailing bytes at offset %d", ErrMalformed, len(d.b)-d.off, d.off)
	}
	return d.err
}

func (d *Decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b)-d.off {
		d.err = fmt.Errorf("%w: %s needs %d bytes at offset %d, %d left", ErrMalformed, what, n, d.off, len(d.b)-d.off)
		return nil
	}
	p := d.b[d.off : d.off+n : d.off+n]
	d.off += n
	return p
}

// U8 reads a byte.
func (d *Decoder) U8() uint8 {
	if p := d.take(1, "u8"); p != nil {
		return p[0]
	}
	return 0
}

// Bool reads a byte that must be 0 or 1.
func (d *Decoder) Bool() bool {
	switch v := d.U8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.Fail("boolean byte %d at offset %d", v, d.off-1)
		return false
	}
}

// U16 reads a uint16.
func (d *Decoder) U16() uint16 {
	if p := d.take(2, "u16"); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

// U32 reads a uint32.
func (d *Decoder) U32() uint32 {
	if p := d.take(4, "u32"); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

// U64 reads a uint64.
func (d *Decoder) U64() uint64 {
	if p := d.take(8, "u64"); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

// I64 reads an int64.
func (d *Decoder) I64() int64 { return int64(d.U64()) }

// Bytes32 reads a 32-bit length-prefixed byte string of at most max bytes.
// The result aliases the input.
func (d *Decoder) Bytes32(max int) []byte {
	n := d.U32()
	if d.err == nil && uint64(n) > uint64(max) {
		d.Fail("byte string of %d bytes, at most %d", n, max)
		return nil
	}
	return d.take(int(n), "byte string")
}

// String16 reads a 16-bit length-prefixed string of at most max bytes.
func (d *Decoder) String16(max int) string {
	n := d.U16()
	if d.err == nil && int(n) > max {
		d.Fail("string of %d bytes, at most %d", n, max)
		return ""
	}
	return string(d.take(int(n), "string"))
}

// String32 reads a 32-bit length-prefixed string of at most max bytes.
func (d *Decoder) String32(max int) string {
	n := d.U32()
	if d.err == nil && uint64(n) > uint64(max) {
		d.Fail("string of %d bytes, at most %d", n, max)
		return ""
	}
	return string(d.take(int(n), "string"))
}

// U32s reads a 16-bit count of at most max values and the values.
func (d *Decoder) U32s(max int) []uint32 {
	n := int(d.U16())
	if d.err != nil {
		return nil
	}
	if n > max {
		d.Fail("%d values, at most %d", n, max)
		return nil
	}
	if n*4 > d.Remaining() {
		d.Fail("%d values need %d bytes, %d left", n, n*4, d.Remaining())
		return nil
	}
	if n == 0 {
		return nil
	}
	v := make([]uint32, n)
	for i := range v {
		v[i] = d.U32()
	}
	return v
}
