package actors

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda/sim"
)

func newTestDispatcher(t *testing.T, spin time.Duration) (*threadDispatcher, *atomic.Int64) {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	d, err := newThreadDispatcher(dev, 8, spin)
	if err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int64
	d.poll = func() { polls.Add(1) }
	t.Cleanup(func() {
		d.stop()
		_ = dev.Close()
	})
	return d, &polls
}

// on runs fn on the dispatcher's goroutine, as the lane's Receive would,
// and waits for it.
func on(d *threadDispatcher, fn func()) {
	done := make(chan struct{})
	d.Schedule(func() { fn(); close(done) })
	<-done
}

func waitPolls(t *testing.T, polls *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for polls.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls fired, want %d", polls.Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestDispatcherPolls: a requested poll fires once, whether the dispatcher
// spins for it or parks on its timer; a cancelled one never fires; work
// queued while spinning runs at once.
func TestDispatcherPolls(t *testing.T) {
	for _, spin := range []time.Duration{0, 50 * time.Millisecond} {
		t.Run(map[bool]string{true: "parked", false: "spinning"}[spin == 0], func(t *testing.T) {
			d, polls := newTestDispatcher(t, spin)
			on(d, func() { d.requestPoll(2 * time.Millisecond) })
			waitPolls(t, polls, 1)
			time.Sleep(5 * time.Millisecond)
			if n := polls.Load(); n != 1 {
				t.Fatalf("%d polls for one request", n)
			}

			// A sooner request wins over a later one.
			on(d, func() {
				d.requestPoll(time.Hour)
				d.requestPoll(time.Millisecond)
			})
			waitPolls(t, polls, 2)

			// Work while a poll is due: it runs long before the poll.
			on(d, func() { d.requestPoll(30 * time.Millisecond) })
			start := time.Now()
			on(d, func() {})
			if waited := time.Since(start); waited > 20*time.Millisecond {
				t.Fatalf("work waited %v behind a pending poll", waited)
			}
			waitPolls(t, polls, 3)

			on(d, func() {
				d.requestPoll(time.Millisecond)
				d.cancelPoll()
			})
			time.Sleep(10 * time.Millisecond)
			if n := polls.Load(); n != 3 {
				t.Fatalf("a cancelled poll fired: %d polls, want 3", n)
			}
		})
	}
}
