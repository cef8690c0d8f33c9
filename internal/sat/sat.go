package sat

import (
	"math"
	"math/bits"
)

// Add is a+b, or the largest uint64 if that overflows.
func Add(a, b uint64) uint64 {
	if sum, carry := bits.Add64(a, b, 0); carry == 0 {
		return sum
	}
	return math.MaxUint64
}

// Mul is a*b, or the largest uint64 if that overflows.
func Mul(a, b uint64) uint64 {
	if hi, lo := bits.Mul64(a, b); hi == 0 {
		return lo
	}
	return math.MaxUint64
}
