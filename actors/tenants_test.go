package actors

import (
	"math"
	"testing"
	"unicode"
	"unicode/utf8"
)

// FuzzTenantName: the name validator never panics, and a name it accepts
// is non-empty, short, UTF-8 and free of control characters.
func FuzzTenantName(f *testing.F) {
	for _, s := range []string{"", "a", "tenant-a", "\x00", "\xff", "日本", string(make([]byte, 300)), "a\u202eb", " a", "a\u00a0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if checkTenant(name) != nil {
			return
		}
		if name == "" || len(name) > MaxTenantName || !utf8.ValidString(name) || name[0] == ' ' || name[len(name)-1] == ' ' {
			t.Fatalf("checkTenant(%q): got nil (%d bytes, valid UTF-8 %v), want an error: the name is empty, over %d bytes, not UTF-8, or has a space at either end",
				name, len(name), utf8.ValidString(name), MaxTenantName)
		}
		for _, r := range name {
			if !unicode.IsPrint(r) {
				t.Fatalf("checkTenant(%q): got nil, want an error: it holds %U, not printable", name, r)
			}
		}
	})
}

// TestPoissonTail against values worked out by hand.
func TestPoissonTail(t *testing.T) {
	for _, c := range []struct {
		k      int
		lambda float64
		want   float64
	}{
		{1, 0, 0},
		{0, 3, 1},
		{1, 0.5, 1 - math.Exp(-0.5)},
		{3, 0.2, 1 - math.Exp(-0.2)*(1+0.2+0.02)},
		{3, 0.0015, math.Exp(-0.0015) * 0.0015 * 0.0015 * 0.0015 / 6 * (1 + 0.0015/4 + 0.0015*0.0015/20)},
		{5, 9, 1},
	} {
		got := poissonTail(c.k, c.lambda)
		if math.Abs(got-c.want) > 1e-9*math.Max(c.want, 1e-9) && math.Abs(got-c.want) > 1e-15 {
			t.Errorf("P(X >= %d; %v) = %v, want %v", c.k, c.lambda, got, c.want)
		}
	}
}
