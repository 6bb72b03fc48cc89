package half_test

import (
	"math"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/half"
)

// TestHalfConversions: every half value widens and narrows back to
// itself, and rounding follows the device's round-to-nearest-even.
func TestHalfConversions(t *testing.T) {
	for h := range 1 << 16 {
		v := half.Float16From(uint16(h))
		if v != v { // NaN
			if got := half.Float16Bits(v); got&0x7c00 != 0x7c00 || got&0x3ff == 0 {
				t.Fatalf("half NaN %#04x came back as %#04x, not a NaN", h, got)
			}
			continue
		}
		if got := half.Float16Bits(v); got != uint16(h) {
			t.Fatalf("half %#04x (%v) came back as %#04x", h, v, got)
		}
	}
	for _, c := range []struct {
		v    float32
		want uint16
	}{
		{1, 0x3c00}, {-2, 0xc000}, {0.1, 0x2e66}, {65504, 0x7bff}, {65519, 0x7bff}, {65520, 0x7c00}, {1e9, 0x7c00},
		{float32(math.Ldexp(1, -24)), 0x0001}, {float32(math.Ldexp(1, -25)), 0x0000}, {float32(math.Ldexp(1.5, -25)), 0x0001},
		{float32(math.Ldexp(3, -25)), 0x0002}, // a tie between 1 and 2 ulps: to even
		{1 + float32(math.Ldexp(1, -11)), 0x3c00}, {1 + float32(math.Ldexp(3, -11)), 0x3c02},
	} {
		if got := half.Float16Bits(c.v); got != c.want {
			t.Errorf("Float16Bits(%v): got %#04x, want %#04x", c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    float32
		want uint16
	}{{1, 0x3f80}, {0.1, 0x3dcd}, {-3.5, 0xc060}, {math.MaxFloat32, 0x7f80}, {float32(math.Inf(-1)), 0xff80}} {
		if got := half.BFloat16Bits(c.v); got != c.want {
			t.Errorf("BFloat16Bits(%v): got %#04x, want %#04x", c.v, got, c.want)
		}
	}
	if a := cuda.F16Arg(0.1); a.Elem != cuda.F16 || a.F16() != half.Float16From(0x2e66) {
		t.Errorf("F16Arg(0.1): got %+v (%v), want an f16 scalar of bits 0x2e66", a, a.F16())
	}
	if a := cuda.BF16Arg(-3.5); a.Elem != cuda.BF16 || a.BF16() != -3.5 {
		t.Errorf("BF16Arg(-3.5): got %+v (%v), want a bf16 scalar of -3.5", a, a.BF16())
	}
}
