//go:build cuda

// Events of the real device: pooled CUDA events, fence queries on them,
// and their timing.

package driver

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
)

type eventHandle struct {
	dev *device
	ev  cEvent
}

// destroyEvent runs from the garbage collector's cleanup: it destroys the
// event unless the device was closed (its context, and with it the event,
// may be gone), holding ctxMu so Close cannot release the context meanwhile.
func (d *device) destroyEvent(ev cEvent) {
	d.ctxMu.RLock()
	defer d.ctxMu.RUnlock()
	if !d.ctxReleased {
		destroyEvent(d.ctx, ev)
	}
}

// event is a handle on one recording of an event slot.
type event struct {
	s    *stream // its device is s.dev
	slot *eventSlot
	gen  uint64 // the slot's generation when recorded: stale once it moves on
}

// stale is the error of a handle used after Release.
func (e *event) stale(op string) error { return backend.CheckEvent(op, e.slot.gen.Load() != e.gen) }

// Query reports the event's state (cuEventQuery).
func (e *event) Query() backend.FenceQuery {
	const op = "event query"
	if err := errors.Join(e.stale(op), e.s.dev.live(op)); err != nil {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
	}
	q := e.s.dev.fence(op, queryEvent(e.s.dev.ctx, e.slot.ev))
	runtime.KeepAlive(e.slot)
	return q
}

// Synchronize blocks until the event completes.
func (e *event) Synchronize() error {
	const op = "event synchronize"
	if err := errors.Join(e.stale(op), e.s.dev.live(op)); err != nil {
		return err
	}
	err := e.s.dev.check(op, syncEvent(e.s.dev.ctx, e.slot.ev), "cuEventSynchronize")
	runtime.KeepAlive(e.slot)
	return err
}

// Elapsed is the device time from start to e (cuEventElapsedTime).
func (e *event) Elapsed(start backend.Event) (time.Duration, error) {
	const op = "event elapsed"
	st, ok := start.(*event)
	if !ok || st.s.dev.ctx != e.s.dev.ctx {
		return 0, cuda.Contractf(op, cuda.ErrForeignHandle, "the start event belongs to another device")
	}
	if err := errors.Join(st.stale(op), e.stale(op)); err != nil {
		return 0, err
	}
	d, r := elapsed(e.s.dev.ctx, st.slot.ev, e.slot.ev)
	runtime.KeepAlive(st.slot)
	runtime.KeepAlive(e.slot)
	return d, e.s.dev.check(op, r, "cuEventElapsedTime")
}

// Release hands the event's slot back to its stream for the next record.
func (e *event) Release() {
	if e.slot.gen.CompareAndSwap(e.gen, e.gen+1) {
		e.s.events.put(e.slot)
	}
}

// eventSlot is one CUDA event, shared by the stream's free list and the
// handles of its recordings; the collector destroys it once neither holds
// it.
type eventSlot struct {
	ev    cEvent
	timed bool
	gen   atomic.Uint64 // advanced by each Release
}

// eventPool is a stream's released events, by kind. Release may come from
// any goroutine, hence the lock; it is uncontended on a lane.
type eventPool struct {
	mu     sync.Mutex
	free   [2][]*eventSlot // [0] fences, [1] timing events
	closed bool
}

func kindIndex(timed bool) int {
	if timed {
		return 1
	}
	return 0
}

func (p *eventPool) take(timed bool) *eventSlot {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := kindIndex(timed)
	n := len(p.free[k])
	if n == 0 {
		return nil
	}
	slot := p.free[k][n-1]
	p.free[k] = p.free[k][:n-1]
	return slot
}

func (p *eventPool) put(slot *eventSlot) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := kindIndex(slot.timed)
	if !p.closed && len(p.free[k]) < maxPooledEvents {
		p.free[k] = append(p.free[k], slot)
	}
}

// close drops the free lists (the collector destroys their events) and
// keeps later releases out.
func (p *eventPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free, p.closed = [2][]*eventSlot{}, true
}
