// Package bulk copies and compares large byte slices on several cores at
// once. One core moves host memory at a fraction of what the memory
// system can: a copy or comparison of megabytes, split into parts run
// side by side, ends several times sooner. Small slices (below Threshold)
// stay on the calling goroutine, where starting helpers would cost more
// than it saves.
package bulk

import (
	"bytes"
	"runtime"
	"sync"
)

const (
	// Threshold is the smallest length split across goroutines.
	Threshold = 2 << 20
	// minPart is the smallest part a helper takes.
	minPart = 1 << 20
	// maxParts bounds the parts: a few cores saturate the memory system.
	maxParts = 4
	// probe is the prefix Equal compares before it splits: inputs that
	// differ mostly differ early, and then no helper starts.
	probe = 64 << 10
)

// parts is how many pieces n bytes split into: at most maxParts, at most
// GOMAXPROCS, and each at least minPart.
func parts(n int) int {
	if n < Threshold {
		return 1
	}
	p := min(maxParts, runtime.GOMAXPROCS(0), n/minPart)
	return max(p, 1)
}

// each runs do over p contiguous pieces of [0, n), the first on the
// calling goroutine.
func each(n, p int, do func(lo, hi int)) {
	step := (n + p - 1) / p
	var wg sync.WaitGroup
	for lo := step; lo < n; lo += step {
		wg.Go(func() { do(lo, min(lo+step, n)) })
	}
	do(0, min(step, n))
	wg.Wait()
}

// Copy copies min(len(dst), len(src)) bytes from src to dst, as the
// built-in copy does, and returns how many. The slices must not overlap.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if p := parts(n); p > 1 {
		each(n, p, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
		return n
	}
	return copy(dst, src)
}

// Equal reports whether a and b hold the same bytes, as bytes.Equal does.
func Equal(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	n := len(a)
	p := parts(n)
	if p == 1 {
		return bytes.Equal(a, b)
	}
	if !bytes.Equal(a[:probe], b[:probe]) {
		return false
	}
	a, b = a[probe:], b[probe:]
	n -= probe
	diff := make([]bool, p)
	step := (n + p - 1) / p
	each(n, p, func(lo, hi int) { diff[lo/step] = !bytes.Equal(a[lo:hi], b[lo:hi]) })
	for _, d := range diff {
		if d {
			return false
		}
	}
	return true
}
