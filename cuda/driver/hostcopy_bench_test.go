//go:build cuda

package driver_test

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/lanesched/lanes/internal/backend"
)

// BenchmarkHostBytes times what the host alone does with the bytes of a
// staged replay at n=1M float32 (4 MiB per buffer): copies between Go
// memory and pinned host memory, and an exact comparison, on one
// goroutine and split across four and eight: the yardstick for the
// host's share of a staged replay and of an output-cache hit.
func BenchmarkHostBytes(b *testing.B) {
	const size = 4 << 20
	dev := bindOpen(b)
	h, err := dev.AllocHost(size)
	if err != nil {
		b.Fatalf("AllocHost: got err %v, want nil", err)
	}
	pinned, err := dev.(backend.HostView).HostBytes(h.Whole())
	if err != nil {
		b.Fatalf("HostBytes: got err %v, want nil", err)
	}
	goA, goB := make([]byte, size), make([]byte, size)
	cases := []struct {
		name string
		op   func(dst, src []byte)
		dst  []byte
		src  []byte
	}{
		{"copy-go-to-go", func(d, s []byte) { copy(d, s) }, goB, goA},
		{"copy-go-to-pinned", func(d, s []byte) { copy(d, s) }, pinned, goA},
		{"copy-pinned-to-go", func(d, s []byte) { copy(d, s) }, goA, pinned},
		{"equal-go-go", func(d, s []byte) { _ = bytes.Equal(d, s) }, goB, goA},
		{"equal-go-pinned", func(d, s []byte) { _ = bytes.Equal(d, s) }, pinned, goA},
		{"clone-go", func(_, s []byte) { _ = bytes.Clone(s) }, nil, goA},
	}
	for _, c := range cases {
		for _, parts := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("%s/parts=%d", c.name, parts), func(b *testing.B) {
				b.SetBytes(size)
				for range b.N {
					if parts == 1 || c.dst == nil {
						c.op(c.dst, c.src)
						continue
					}
					var wg sync.WaitGroup
					step := size / parts
					for p := range parts {
						wg.Go(func() { c.op(c.dst[p*step:(p+1)*step], c.src[p*step:(p+1)*step]) })
					}
					wg.Wait()
				}
			})
		}
	}
}
