package bulk

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestCopyAndEqualMatchTheBuiltins checks Copy and Equal against copy and
// bytes.Equal at lengths around every split point, with a difference at
// the first, a middle and the last byte.
func TestCopyAndEqualMatchTheBuiltins(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, probe - 1, probe, Threshold - 1, Threshold, Threshold + 1, 3*minPart + 7, 9*minPart + 3} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(rng.IntN(256))
		}
		for _, dstLen := range []int{n, n / 2, n + 5} {
			got, want := make([]byte, dstLen), make([]byte, dstLen)
			if g, w := Copy(got, src), copy(want, src); g != w || !bytes.Equal(got, want) {
				t.Fatalf("Copy(len %d, len %d): copied %d bytes, equal to copy: %v; want %d bytes, equal", dstLen, n, g, bytes.Equal(got, want), w)
			}
		}
		same := bytes.Clone(src)
		if !Equal(src, same) {
			t.Fatalf("Equal of two copies of %d bytes: got false, want true", n)
		}
		for _, at := range []int{0, n / 2, probe + (n-probe)/3, n - 1} {
			if n == 0 || at < 0 || at >= n {
				continue
			}
			other := bytes.Clone(src)
			other[at] ^= 0x80
			if Equal(src, other) {
				t.Fatalf("Equal of %d bytes differing at byte %d: got true, want false", n, at)
			}
		}
		if n > 0 && Equal(src, src[:n-1]) {
			t.Fatalf("Equal of %d and %d bytes: got true, want false", n, n-1)
		}
	}
}

// BenchmarkBulk compares Copy and Equal with the built-ins at 4 MiB.
func BenchmarkBulk(b *testing.B) {
	const n = 4 << 20
	src, dst := make([]byte, n), make([]byte, n)
	for _, c := range []struct {
		name string
		do   func()
	}{
		{"copy", func() { copy(dst, src) }},
		{"bulk.Copy", func() { Copy(dst, src) }},
		{"bytes.Equal", func() { bytes.Equal(dst, src) }},
		{"bulk.Equal", func() { Equal(dst, src) }},
	} {
		b.Run(fmt.Sprintf("%s/n=%d", c.name, n), func(b *testing.B) {
			b.SetBytes(n)
			for range b.N {
				c.do()
			}
		})
	}
}
