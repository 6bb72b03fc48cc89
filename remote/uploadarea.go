// A data plane's upload area: the part of the segment after its rings
// where a front writes a large upload's bytes, once, and the host reads
// them from, so they do not cross the ring (where a tenant's megabytes
// would hold up every other tenant's records behind them) nor get copied
// in and out of it and of the message.

package remote

import (
	"fmt"
	"slices"
	"sync"
)

// DefaultUploadAreaBytes is a data plane's upload area unless
// HostConfig.UploadAreaBytes says otherwise.
const DefaultUploadAreaBytes = 16 << 20

// areaMinUpload is the smallest upload that goes through the area: a
// smaller one crosses in its message, whose copies cost less than the
// area's bookkeeping.
const areaMinUpload = 4 << 10

// areaGrain is the area's unit of allocation: each span starts on it.
const areaGrain = 256

// maxUploadArea bounds HostConfig.UploadAreaBytes.
const maxUploadArea = 1 << 30

// checkUploadArea says what is wrong with an upload area's size, if
// anything (0 is none; HostConfig's -1 is none too).
func checkUploadArea(n int) error {
	if n < 0 || n > maxUploadArea || n%4096 != 0 {
		return fmt.Errorf("%w: UploadAreaBytes %d: give whole 4096-byte pages, at most %d (0 for the default %d; -1 for none)", ErrConfig, n, maxUploadArea, DefaultUploadAreaBytes)
	}
	return nil
}

// span is a run of the area, [off, off+n).
type span struct{ off, n uint64 }

// areaSpans hands out spans of an area of size bytes, first fit, and
// takes them back in any order, merging free neighbours: a span freed is
// free for the next call at once. It never waits: a call that finds no
// room sends its bytes in its message instead.
type areaSpans struct {
	mu   sync.Mutex
	size uint64
	free []span // by offset, none adjacent
	used uint64
}

func newAreaSpans(size uint64) *areaSpans {
	a := &areaSpans{size: size}
	if size > 0 {
		a.free = []span{{0, size}}
	}
	return a
}

// alloc takes a span of at least n bytes (rounded up to areaGrain): its
// offset, or false when no free span is that long.
func (a *areaSpans) alloc(n uint64) (span, bool) {
	if n == 0 || n > a.size {
		return span{}, false
	}
	n = (n + areaGrain - 1) &^ (areaGrain - 1)
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.free {
		if f.n < n {
			continue
		}
		if f.n == n {
			a.free = slices.Delete(a.free, i, i+1)
		} else {
			a.free[i] = span{f.off + n, f.n - n}
		}
		a.used += n
		return span{f.off, n}, true
	}
	return span{}, false
}

// release gives a span alloc handed out back.
func (a *areaSpans) release(s span) {
	a.mu.Lock()
	defer a.mu.Unlock()
	i, _ := slices.BinarySearchFunc(a.free, s.off, func(f span, off uint64) int {
		switch {
		case f.off < off:
			return -1
		case f.off > off:
			return 1
		}
		return 0
	})
	a.free = slices.Insert(a.free, i, s)
	a.used -= s.n
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = slices.Delete(a.free, i+1, i+2)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = slices.Delete(a.free, i, i+1)
	}
}

// inUse is the bytes handed out and not given back.
func (a *areaSpans) inUse() uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.used
}
