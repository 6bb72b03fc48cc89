package demo

import (
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
)

// TestElementTypeNamesParse: a manifest names element types as they
// print, and an unknown name is the caller's element-type error.
func TestElementTypeNamesParse(t *testing.T) {
	for e := cuda.Bool; e <= cuda.F64; e++ {
		if got, err := parseElementType(e.String()); err != nil || got != e {
			t.Errorf("parseElementType(%q): got (%v, %v), want (%v, nil)", e, got, err, e)
		}
	}
	if _, err := parseElementType("f128"); !errors.Is(err, cuda.ErrElementType) {
		t.Errorf("parseElementType(f128): got err %v, want one wrapping cuda.ErrElementType", err)
	}
}
