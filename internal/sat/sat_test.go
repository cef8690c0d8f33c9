package sat

import (
	"math"
	"testing"
)

func TestSaturates(t *testing.T) {
	const max = math.MaxUint64
	for _, c := range []struct{ a, b, add, mul uint64 }{
		{0, 0, 0, 0},
		{3, 4, 7, 12},
		{max, 0, max, 0},
		{max, 1, max, max},
		{1 << 63, 1 << 63, max, max},
		{1 << 32, 1 << 31, 1<<32 + 1<<31, 1 << 63},
		{1 << 32, 1 << 32, 1 << 33, max},
	} {
		if got := Add(c.a, c.b); got != c.add {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.add)
		}
		if got := Mul(c.a, c.b); got != c.mul {
			t.Errorf("Mul(%d, %d) = %d, want %d", c.a, c.b, got, c.mul)
		}
	}
}
