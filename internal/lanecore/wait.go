// The calls that block: Wait, Synchronize and Readback wait on the device,
// paced by a Waiter when the owner gives one.

package lanecore

import (
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"

	lanes "github.com/lanesched/lanes/lanes"
)

// Wait blocks until one fence is terminal and returns its receipt. Receipts
// of other submissions that ended meanwhile are kept for the next Poll.
func (l *Lane) Wait(fence uint64) (lanes.Receipt, error) {
	if r, ok := l.takeReady(fence); ok {
		return r, nil
	}
	var target *pending
	for _, p := range l.pending {
		if p.fence == fence {
			target = p
		}
	}
	if target == nil {
		return lanes.Receipt{}, rejected("wait", fmt.Errorf("%w: fence %d is not pending (already received, or never issued)", lanes.ErrUnknownFence, fence))
	}
	// One speculative non-blocking query first: a finished fence needs no
	// blocking call. While it waits, await retires finished submissions,
	// the target among them (its events then go back to the stream): from
	// then on the target is answered as ended, and its events are not
	// touched again.
	retired := func() bool { return !slices.Contains(l.pending, target) }
	query := func() backend.FenceQuery {
		if retired() {
			return backend.FenceQuery{State: backend.FenceComplete}
		}
		return target.end.Query()
	}
	block := func() error {
		if retired() {
			return nil
		}
		return target.end.Synchronize()
	}
	if q := target.end.Query(); q.State == backend.FenceComplete {
		l.counters.SpeculativeHits++
	} else if err := l.await(query, block); err != nil {
		l.fail(err)
		l.endIndeterminate(err)
	}
	l.collect()
	if r, ok := l.takeReady(fence); ok {
		return r, nil
	}
	return lanes.Receipt{}, rejected("wait", fmt.Errorf("%w: fence %d did not end", lanes.ErrUnknownFence, fence))
}

// Synchronize blocks until the stream is idle. On success every pending
// submission ends and the held batches are released: the returned buffers are
// free to reuse. On failure the lane fails and every pending submission
// ends indeterminate; the held batches stay.
func (l *Lane) Synchronize() ([]lanes.Receipt, []cuda.Buffer, error) {
	if err := l.awaitStream(); err != nil {
		return l.drain(nil), nil, failed("synchronize", err)
	}
	l.collect()
	var released []cuda.Buffer
	for _, p := range l.held {
		released = append(released, p.retain...)
	}
	l.held = nil
	return l.drain(nil), released, nil
}

// awaitStream waits until the stream is idle. On failure the lane fails
// and every pending submission ends indeterminate.
func (l *Lane) awaitStream() error {
	q := l.s.Query()
	if q.State == backend.FenceComplete && q.Err == nil {
		l.counters.SpeculativeHits++
		return nil
	}
	err := q.Err
	if err == nil {
		err = l.await(l.s.Query, l.s.Synchronize)
	}
	if err != nil {
		l.fail(err)
		l.endIndeterminate(err)
	}
	return err
}

// await waits for a fence (an event's or the stream's tail) to be terminal:
// with no Waiter, in the device's blocking call; with one, by querying
// without blocking and pausing in the Waiter between queries, retiring
// finished submissions as it goes (which is the progress the Waiter sees).
// It counts one sync point either way.
func (l *Lane) await(query func() backend.FenceQuery, block func() error) error {
	l.counters.SyncPoints++
	if l.waiter == nil {
		return block()
	}
	l.waiter.Begin()
	for {
		q := query()
		switch {
		case q.Err != nil:
			return q.Err
		case q.State != backend.FencePending:
			return nil
		}
		before := len(l.ready)
		if err := l.collect(); err != nil {
			return err
		}
		if err := l.waiter.Pause(len(l.ready) > before); err != nil {
			return err
		}
	}
}

// Waiter paces a lane's waits on the device. A lane without one blocks in
// the device's own synchronize calls, which never return if a kernel hangs;
// with one, the lane waits by querying without blocking and calls the
// waiter between queries, so the waiter decides how long is too long.
type Waiter interface {
	// Begin starts a wait.
	Begin()
	// Pause is called while the wait is not over, between non-blocking
	// queries; progressed reports whether a submission of the lane ended
	// since the previous call. It sleeps or spins as it likes; an error
	// ends the wait: the lane fails with it, and every submission in
	// flight ends Indeterminate.
	Pause(progressed bool) error
}

// Readback synchronizes the stream and copies src into dst, after checking
// that the region holds exactly the layout and dst has room for it.
func (l *Lane) Readback(src cuda.Region, layout ReadbackLayout, dst []byte) error {
	const op = "readback"
	if err := src.Validate(); err != nil {
		return rejected(op, err)
	}
	switch {
	case src.Buffer.Device != l.dev.Info().Instance:
		return rejected(op, fmt.Errorf("%w: the region's buffer belongs to device instance %d", lanes.ErrReadback, src.Buffer.Device))
	case layout.Elem != src.Buffer.Elem:
		return rejected(op, fmt.Errorf("%w: layout says %v, the buffer holds %v", lanes.ErrReadback, layout.Elem, src.Buffer.Elem))
	case layout.Count*layout.Elem.Size() != src.Length:
		return rejected(op, fmt.Errorf("%w: layout of %d %v is %d bytes; the region is %d", lanes.ErrReadback, layout.Count, layout.Elem, layout.Count*layout.Elem.Size(), src.Length))
	case uint64(len(dst)) != src.Length:
		return rejected(op, fmt.Errorf("%w: destination holds %d bytes for %d", lanes.ErrReadback, len(dst), src.Length))
	}
	if err := l.awaitStream(); err != nil {
		return failed(op, err)
	}
	l.tailFence = 0 // the copy comes after the last fence
	if err := l.s.Readback(src, dst); err != nil {
		l.fail(err)
		l.collect()
		return failed(op, err)
	}
	l.collect()
	return nil
}

// ReadbackLayout is what a readback expects to find: Count elements of Elem.
type ReadbackLayout struct {
	Elem  cuda.ElementType
	Count uint64
}
