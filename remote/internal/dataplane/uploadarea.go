// A data plane's upload area: the part of the segment after its rings
// where a front writes a large upload's bytes, once, and the host reads
// them from, so they do not cross the ring (where a tenant's megabytes
// would hold up every other tenant's records behind them) nor get copied
// in and out of it and of the message.

package dataplane

import (
	"fmt"
	"slices"
	"sync"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// DefaultUploadAreaBytes is a data plane's upload area unless
// HostConfig.UploadAreaBytes says otherwise.
const DefaultUploadAreaBytes = 16 << 20

// AreaMinUpload is the smallest upload that goes through the area: a
// smaller one crosses in its message, whose copies cost less than the
// area's bookkeeping.
const AreaMinUpload = 4 << 10

// AreaGrain is the area's unit of allocation: each span starts on it.
const AreaGrain = 256

// maxUploadArea bounds HostConfig.UploadAreaBytes.
const maxUploadArea = 1 << 30

// CheckUploadArea says what is wrong with an upload area's size, if
// anything (0 is none; HostConfig's -1 is none too).
func CheckUploadArea(n int) error {
	if n < 0 || n > maxUploadArea || n%4096 != 0 {
		return fmt.Errorf("%w: UploadAreaBytes %d: give whole 4096-byte pages, at most %d (0 for the default %d; -1 for none)", wire.ErrConfig, n, maxUploadArea, DefaultUploadAreaBytes)
	}
	return nil
}

// Span is a run of the area, [off, off+n).
type Span struct{ Off, N uint64 }

// areaSpans hands out spans of an area of size bytes, first fit, and
// takes them back in any order, merging free neighbours: a span freed is
// free for the next call at once. It never waits: a call that finds no
// room sends its bytes in its message instead.
type areaSpans struct {
	mu   sync.Mutex
	size uint64
	Free []Span // by offset, none adjacent
	used uint64
}

// NewAreaSpans hands out spans of an area of size bytes.
func NewAreaSpans(size uint64) *areaSpans {
	a := &areaSpans{size: size}
	if size > 0 {
		a.Free = []Span{{0, size}}
	}
	return a
}

// Alloc takes a span of at least n bytes (rounded up to areaGrain): its
// offset, or false when no free span is that long.
func (a *areaSpans) Alloc(n uint64) (Span, bool) {
	if n == 0 || n > a.size {
		return Span{}, false
	}
	n = (n + AreaGrain - 1) &^ (AreaGrain - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.Free {
		if f.N < n {
			continue
		}
		if f.N == n {
			a.Free = slices.Delete(a.Free, i, i+1)
		} else {
			a.Free[i] = Span{f.Off + n, f.N - n}
		}
		a.used += n
		return Span{f.Off, n}, true
	}
	return Span{}, false
}

// Release gives a span alloc handed out back.
func (a *areaSpans) Release(s Span) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.Free, s.Off, func(f Span, off uint64) int {
		switch {
		case f.Off < off:
			return -1
		case f.Off > off:
			return 1
		}
		return 0
	})
	a.Free = slices.Insert(a.Free, i, s)
	a.used -= s.N
	if i+1 < len(a.Free) && a.Free[i].Off+a.Free[i].N == a.Free[i+1].Off {
		a.Free[i].N += a.Free[i+1].N
		a.Free = slices.Delete(a.Free, i+1, i+2)
	}
	if i > 0 && a.Free[i-1].Off+a.Free[i-1].N == a.Free[i].Off {
		a.Free[i-1].N += a.Free[i].N
		a.Free = slices.Delete(a.Free, i, i+1)
	}
}

// InUse is the bytes handed out and not given back.
func (a *areaSpans) InUse() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}
