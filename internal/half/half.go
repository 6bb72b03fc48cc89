// Package half converts float32 to and from the bits of CUDA's __half
// and __nv_bfloat16 scalars, rounded as the device's __float2half_rn and
// __float2bfloat16_rn. Arguments (cuda.F16Arg) and the front door's
// encoders (lanes.EncodeF16) use it.
package half

import "math"

// Float16Bits converts a float32 to IEEE 754 half precision bits, rounded
// to nearest even (overflow to infinity, NaN kept a NaN).
func Float16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	mant := b & 0x7fffff
	switch {
	case exp == 0xff: // infinity or NaN
		if mant != 0 {
			return sign | 0x7e00
		}
		return sign | 0x7c00
	case exp-127 > 15: // too large: infinity
		return sign | 0x7c00
	case exp-127 >= -14: // normal
		h := uint32(exp-127+15)<<10 | mant>>13
		return sign | uint16(roundEven(h, mant, 13)) // a carry into the exponent is right, up to infinity
	case exp-127 >= -25: // subnormal (or rounds up to the smallest one)
		m := mant | 0x800000
		shift := uint32(-14-(exp-127)) + 13
		return sign | uint16(roundEven(m>>shift, m, shift))
	}
	return sign // too small: zero
}

// roundEven rounds truncated (full >> shift) to nearest, ties to even, by
// the shift bits dropped from full.
func roundEven(truncated, full, shift uint32) uint32 {
	rest := full & (1<<shift - 1)
	half := uint32(1) << (shift - 1)
	if rest > half || rest == half && truncated&1 == 1 {
		truncated++
	}
	return truncated
}

// Float16From widens half precision bits to a float32, exactly.
func Float16From(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		v := float32(mant) / (1 << 24) // subnormal: mant x 2^-24
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// BFloat16From widens bfloat16 bits (a float32's upper half) to a
// float32, exactly.
func BFloat16From(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// BFloat16Bits converts a float32 to bfloat16 bits (its upper half),
// rounded to nearest even (NaN kept a NaN).
func BFloat16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it one, quiet
		return uint16(b>>16) | 0x40
	}
	return uint16(roundEven(b>>16, b, 16))
}
