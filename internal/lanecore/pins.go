// The caller's input buffers pinned in place: a staged replay of new inputs
// that arrive in the same buffers replay after replay uploads them straight
// from there, with no copy into the staging first.

package lanecore

import (
	"os"
	"slices"
	"unsafe"

	"github.com/lanesched/lanes/internal/backend"
)

// Pinning the caller's inputs, by default: inputs of at least
// MinPinnedInput bytes, up to DefaultPinBytes pinned per lane.
const (
	// MinPinnedInput is the smallest input a staged replay pins in place:
	// below it, the copy into the staging costs less than pinning pays back.
	MinPinnedInput = 1 << 20
	// DefaultPinBytes is how many bytes of the callers' input buffers a lane
	// keeps pinned when Config.PinBytes is 0.
	DefaultPinBytes = 256 << 20
)

// pinnedInput is a caller's buffer the lane pinned: the lane keeps it
// reachable (so its memory is neither freed nor reused) until it unpins it.
type pinnedInput struct {
	mem   []byte
	unpin func() error
	used  uint64 // the pin clock when a replay last uploaded from it
}

// contains reports whether b lies within the pinned buffer.
func (p *pinnedInput) contains(b []byte) bool {
	start, end := addr(p.mem), addr(p.mem)+uintptr(len(p.mem))
	return addr(b) >= start && addr(b)+uintptr(len(b)) <= end
}

// inputPins are the callers' buffers a lane pinned, least recently used
// first out when a new one would pass the budget.
type inputPins struct {
	budget  int64 // bytes; negative: pin nothing
	bytes   int64
	clock   uint64
	pinned  []*pinnedInput
	refused map[uintptr]bool // addresses the device would not pin (bounded)
	recent  [recentInputs]uintptr
	next    int
	failed  error // the last unpin that failed, for UnpinInputs
}

// pinBudget is Config.PinBytes with its default.
func pinBudget(n int64) int64 {
	if n == 0 {
		return DefaultPinBytes
	}
	return n
}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// pinned returns the pinned buffer holding in, a caller's buffer (callers)
// or the lane's own copy, pinning a caller's buffer that one of the last
// recentInputs inputs of a staged replay on this lane was in already: a
// buffer used once is copied, as pinning costs more than a copy. It
// returns nil when in is not to be uploaded in place.
func (l *Lane) pinned(in []byte, callers bool) *pinnedInput {
	ps := &l.pins
	if ps.budget < 0 || len(in) < MinPinnedInput || int64(len(in)) > ps.budget {
		return nil
	}
	ps.clock++
	for _, p := range ps.pinned {
		if p.contains(in) {
			p.used = ps.clock
			return p
		}
	}
	pinner, ok := l.dev.(backend.HostPinner)
	if !ok || !callers || !ps.reused(in) || ps.refused[addr(in)] {
		return nil
	}
	target, ok := ps.makeWay(in)
	if !ok {
		return nil
	}
	for ps.bytes+int64(len(target)) > ps.budget {
		if !ps.evictIdle() {
			// What is pinned was all used lately: copy this one rather
			// than unpin a buffer that comes back next (a working set
			// larger than the budget would pin and unpin every replay).
			return nil
		}
	}
	unpin, err := pinner.PinHost(target)
	if err != nil {
		// Its pages overlap a pinned buffer, or pinned memory ran out: it
		// is copied, as before.
		if len(ps.refused) >= 64 {
			clear(ps.refused)
		}
		if ps.refused == nil {
			ps.refused = map[uintptr]bool{}
		}
		ps.refused[addr(in)] = true
		return nil
	}
	p := &pinnedInput{mem: target, unpin: unpin, used: ps.clock}
	ps.pinned = append(ps.pinned, p)
	ps.bytes += int64(len(target))
	return p
}

// makeWay returns what to pin for in when pins share its pages (pinning
// is by whole pages, so a second pin of a page fails): with windows of one
// allocation (a shorter input pinned before, or overlapping windows used
// in turn), one pin spanning them all, in place of theirs; with separate
// allocations sharing a page, in alone once those pins went idle, and
// false (copy in) while one was used lately.
func (ps *inputPins) makeWay(in []byte) ([]byte, bool) {
	lo, end, lately := in, addr(in)+uintptr(len(in)), false
	for _, p := range ps.pinned {
		if !pagesOverlap(p.mem, in) {
			continue
		}
		if addr(p.mem) < addr(lo) {
			lo = p.mem
		}
		end = max(end, addr(p.mem)+uintptr(len(p.mem)))
		lately = lately || p.used+recentInputs >= ps.clock
	}
	target := in
	if span := end - addr(lo); span <= uintptr(cap(lo)) {
		// One allocation holds them all (lo's capacity reaches their
		// end): pin it across, once.
		target = lo[:span]
	} else if lately {
		return nil, false
	}
	for i := len(ps.pinned) - 1; i >= 0; i-- {
		if pagesOverlap(ps.pinned[i].mem, target) {
			ps.release(i)
		}
	}
	return target, true
}

// recentInputs is how many of the last large inputs a lane remembers to
// tell a buffer passed again from a fresh one: a few programs' worth, each
// double-buffered.
const recentInputs = 16

// reused reports whether one of the last recentInputs inputs not pinned
// yet began where in does, and remembers in.
func (ps *inputPins) reused(in []byte) bool {
	a := addr(in)
	seen := slices.Contains(ps.recent[:], a)
	ps.recent[ps.next%recentInputs] = a
	ps.next++
	return seen
}

// evictIdle unpins the least recently used buffer that no upload of the
// last recentInputs pinned inputs used; false when there is none.
func (ps *inputPins) evictIdle() bool {
	oldest := -1
	for i, p := range ps.pinned {
		if p.used+recentInputs < ps.clock && (oldest < 0 || p.used < ps.pinned[oldest].used) {
			oldest = i
		}
	}
	if oldest < 0 {
		return false
	}
	ps.release(oldest)
	return true
}

// pagesOverlap reports whether a and b share a page of memory: pinning is
// by whole pages, so a second pin of a shared page fails.
func pagesOverlap(a, b []byte) bool {
	page := uintptr(os.Getpagesize())
	aStart, aEnd := addr(a)&^(page-1), (addr(a)+uintptr(len(a))+page-1)&^(page-1)
	bStart, bEnd := addr(b)&^(page-1), (addr(b)+uintptr(len(b))+page-1)&^(page-1)
	return aStart < bEnd && bStart < aEnd
}

// release unpins buffer i and lets it go.
func (ps *inputPins) release(i int) {
	p := ps.pinned[i]
	if err := p.unpin(); err != nil {
		ps.failed = err
	}
	ps.bytes -= int64(len(p.mem))
	ps.pinned = slices.Delete(ps.pinned, i, i+1)
}

// UnpinInputs unpins every caller's buffer the lane pinned for staged
// replays (see Replay) and lets go of them; the next replays pin again as
// they need. Nothing may still copy from them: no staged replay in flight
// (a lane's replays block, so none is between its calls), and a stream
// that hung may still run the copies it was given (an actors scheduler
// unpins a lane abandoned after a hang once an event recorded behind its
// work completes; until then, through Stop, the buffers stay pinned). It
// returns the last unpin that failed since the last call, if any (the
// device failed, or was closed).
func (l *Lane) UnpinInputs() error {
	ps := &l.pins
	for len(ps.pinned) > 0 {
		ps.release(len(ps.pinned) - 1)
	}
	clear(ps.refused)
	err := ps.failed
	ps.failed = nil
	return err
}

// PinnedInputs reports how many of the callers' buffers the lane keeps
// pinned, and their bytes.
func (l *Lane) PinnedInputs() (buffers int, bytes int64) {
	return len(l.pins.pinned), l.pins.bytes
}
