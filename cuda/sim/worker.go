// A simulated stream's worker: the goroutine that runs its work in order,
// charging the clock, and the waits on it.

package sim

import (
	"errors"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// contended stretches a device duration while more streams are busy at
// start than the device runs at full speed.
func (d *device) contended(self *stream, start, dur time.Duration) time.Duration {
	if d.cost.StreamParallelism <= 1 || dur == 0 {
		return dur
	}
	d.mu.Lock()
	busy := 1
	for _, o := range d.streams {
		if o != self && time.Duration(o.tail.Load()) > start {
			busy++
		}
	}
	d.mu.Unlock()
	if f := float64(busy) / d.cost.StreamParallelism; f > 1 {
		return time.Duration(float64(dur) * f)
	}
	return dur
}

// work is the stream's worker: it executes items in order, one at a time.
func (s *stream) work() {
	d := s.dev
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.stopped && !s.destroyed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 || s.stopped {
			s.mu.Unlock()
			if s.destroyed || s.stopped {
				d.mu.Lock()
				delete(d.streams, s.id)
				d.mu.Unlock()
			}
			return
		}
		it := s.queue[0]
		s.mu.Unlock()

		if it.fault == FaultHang {
			s.mu.Lock()
			s.stalled = true
			s.cond.Broadcast()
			s.mu.Unlock()
			<-d.closed
			return
		}
		d.run(s, it)

		s.mu.Lock()
		// Done with it: the queue's array keeps no reference to it (the
		// array outlives the items popped off its front), and an emptied
		// queue that grew under a long batch gives its array back.
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if len(s.queue) == 0 && cap(s.queue) > 256 {
			s.queue = nil
		}
		s.doneSeq = it.seq
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// run executes an item's bytes, unless the device was already dead when it
// started, and poisons the device on a sticky fault. Any other error fails
// the item on its stream s (see stream.failure).
func (d *device) run(s *stream, it *item) {
	d.mu.Lock()
	dead := d.poison != nil && d.poison.at <= it.start
	d.mu.Unlock()
	if dead {
		return
	}
	if it.fault == FaultSticky {
		d.poisonAt(it.finish, backend.DriverError("kernel", codes.IllegalAddress, "injected sticky fault in "+it.op+"; the device is poisoned, open a new one"))
		return
	}
	if d.noData {
		return
	}
	d.execMu.Lock()
	err := d.execute(it.nodes)
	d.execMu.Unlock()
	var ce *cuda.Error
	switch {
	case errors.As(err, &ce) && ce.Sticky:
		d.poisonAt(it.finish, ce)
	case err != nil:
		s.mu.Lock()
		if s.failure.seq == 0 {
			s.failure = failure{seq: it.seq, err: err}
			s.failed.Store(true)
		}
		s.mu.Unlock()
	}
}

// failure is the error of the work item seq of a stream, one that is not
// sticky (a read of memory never written, under Config.InitCheck): the
// stream's fences at and after it report it until a Synchronize or a
// Readback of the stream has returned it (see Config.InitCheck).
type failure struct {
	seq uint64 // 0: none
	err error
}

// failedBy returns the stream's failure when it lies at or before item
// seq, and with take resets it: it has been reported. A stream that has
// none (every stream, unless InitCheck reported something) answers
// without its lock.
func (s *stream) failedBy(seq uint64, take bool) error {
	if !s.failed.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.failure
	if f.seq == 0 || f.seq > seq {
		return nil
	}
	if take {
		s.failure = failure{}
		s.failed.Store(false)
	}
	return f.err
}

// settle waits until the worker has finished every item due by time t.
func (s *stream) settle(t time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && s.queue[0].finish <= t && !s.stopped {
		s.cond.Wait()
	}
}

// waitSeq blocks until the worker has finished item seq, which is due at
// device time at. In the virtual mode the clock moves to at first, as the
// host waited that long. Work that never finishes blocks until Close.
func (s *stream) waitSeq(op string, seq uint64, at time.Duration) error {
	d := s.dev
	if d.clock.mode == ClockVirtual && at != never {
		d.clock.virtual.AdvanceTo(at)
	}
	s.mu.Lock()
	for s.doneSeq < seq && !s.stopped {
		s.cond.Wait()
	}
	done := s.doneSeq >= seq // read under the lock: the worker writes it
	s.mu.Unlock()
	if done {
		d.clock.sleepUntil(at, d.closed) // the real-time mode: the host waits the work's device time
	}
	if err := d.Err(); err != nil {
		return err
	}
	if !done {
		return backend.DriverError(op, codes.Deinitialized, "the device was closed while the work was still running (a hung kernel?)")
	}
	return nil
}

// wait blocks until all work enqueued so far has finished.
func (s *stream) wait(op string) error {
	s.mu.Lock()
	seq := s.enqSeq
	s.mu.Unlock()
	return s.waitSeq(op, seq, time.Duration(s.tail.Load()))
}

func (s *stream) hung() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled || (len(s.queue) > 0 && s.queue[len(s.queue)-1].finish == never)
}

// stop wakes every waiter after the device closed.
func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
}
