// The free fence: work issued after Free began is refused, never run over
// freed memory.

package cuda

import (
	"sync"
	"sync/atomic"
)

// FreeFence orders a device's frees against its streams' enqueues and
// launches, the same way on every backend. Each stream checks a command's
// handles and issues its work holding its own use lock (one user: its
// owner, so the lock is uncontended, unlike one lock every stream would
// share); a free marks its buffer as going while holding every stream's use
// lock. So every enqueue that found the buffer live has issued its work
// before the free waits for the device, and every later one is refused:
// work issued after the wait would touch freed memory, which on a GPU
// poisons the context. Its zero value is ready.
type FreeFence struct {
	mu      sync.Mutex // the registry; held while marking, so no stream joins meanwhile
	streams map[*sync.Mutex]struct{}
	frees   atomic.Uint64
}

// AddStream registers a stream's use lock.
func (f *FreeFence) AddStream(use *sync.Mutex) {
	f.mu.Lock()
	if f.streams == nil {
		f.streams = map[*sync.Mutex]struct{}{}
	}
	f.streams[use] = struct{}{}
	f.mu.Unlock()
}

// RemoveStream forgets a destroyed stream's use lock.
func (f *FreeFence) RemoveStream(use *sync.Mutex) {
	f.mu.Lock()
	delete(f.streams, use)
	f.mu.Unlock()
}

// MarkGoing records buffer or host buffer id as being freed (in going,
// a table of the device guarded by its lock) while no stream is halfway
// through an enqueue or launch, and counts a free. It refuses, with
// GoingError, an id present says is gone or that is already going.
func (f *FreeFence) MarkGoing(op string, lock sync.Locker, going map[uint64]bool, present func() bool, id uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for use := range f.streams {
		use.Lock()
	}
	defer func() {
		for use := range f.streams {
			use.Unlock()
		}
	}()
	lock.Lock()
	defer lock.Unlock()
	if !present() || going[id] {
		return GoingError(op, id)
	}
	going[id] = true
	f.frees.Add(1)
	return nil
}

// Frees counts the frees marked: a handle found live stays live while it
// is unchanged (Device.Frees).
func (f *FreeFence) Frees() uint64 { return f.frees.Load() }

// CheckExec checks, before a launch (under the stream's use lock), that
// every buffer and host buffer an executable's graph names is live, by the
// device's live(id, host): replaying a graph over freed memory would poison
// the device, and a caller that freed a buffer is refused instead. checked
// is the executable's record of the free count when its handles were last
// found live (plus one, so its zero means never): it looks only when
// something was freed since.
func (f *FreeFence) CheckExec(op string, h *Handles, checked *atomic.Uint64, live func(id uint64, host bool) bool) error {
	epoch := f.frees.Load() + 1
	if checked.Load() == epoch {
		return nil
	}
	err := h.Each(func(id uint64) error {
		if !live(id, false) {
			return contractf(op, ErrStaleHandle, "the executable's graph names buffer %d, which was freed; capture it again", id)
		}
		return nil
	}, func(id uint64) error {
		if !live(id, true) {
			return contractf(op, ErrStaleHandle, "the executable's graph names host buffer %d, which was freed; capture it again", id)
		}
		return nil
	})
	if err == nil {
		checked.Store(epoch)
	}
	return err
}

// GoingError is the error of a buffer freed twice, or while its free runs.
func GoingError(op string, id uint64) error {
	return contractf(op, ErrStaleHandle, "buffer %d was already freed, or is being freed", id)
}
