package actors

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda/sim"
)

func newTestDispatcher(t *testing.T, spin time.Duration) (*threadDispatcher, *atomic.Int64) {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	d, err := newThreadDispatcher(dev, 8, spin)
	if err != nil {
		t.Fatalf("newThreadDispatcher: got err %v, want nil", err)
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
			t.Fatalf("after 5s: got %d polls fired, want %d", polls.Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// advance moves the dispatcher's clock forward by dt: its poll times count
// from its epoch, which only its own goroutine reads, so moving the epoch
// back there is a virtual clock. A poll due within dt is due at once.
func advance(d *threadDispatcher, dt time.Duration) {
	on(d, func() { d.epoch = d.epoch.Add(-dt) })
}

// goroutineID is the id of the goroutine that calls it, from its stack's
// header ("goroutine 18 [running, locked to thread]:").
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	return strings.Fields(string(buf))[1]
}

// waitParked waits until the dispatcher's goroutine, gid, is blocked in its
// loop's select. Its loop parks nowhere else (it takes work and looks at
// the poll without blocking, and spins without blocking), and it parks only
// after it has looked at the poll since the last work it ran, firing it if
// due: so once it is parked, whatever that look was to fire has fired.
// (A message through the dispatcher proves nothing of the kind: the loop
// takes queued work before it looks at the poll.)
func waitParked(t *testing.T, gid string) {
	t.Helper()
	header := "goroutine " + gid + " [select"
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.Stack(buf, true)
		for g := range strings.SplitSeq(string(buf[:n]), "\n\n") {
			if strings.HasPrefix(g, header) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher goroutine %s after 5s: got it still busy, want it parked in its select", gid)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestDispatcherPolls: a requested poll fires once, whether the dispatcher
// spins for it or parks on its timer; a cancelled one never fires; work
// queued while spinning runs at once. "Never" is checked on the
// dispatcher's own clock moved past the time in question (advance), once
// the dispatcher has looked at its poll and parked (waitParked).
func TestDispatcherPolls(t *testing.T) {
	for _, spin := range []time.Duration{0, 50 * time.Millisecond} {
		t.Run(map[bool]string{true: "parked", false: "spinning"}[spin == 0], func(t *testing.T) {
			d, polls := newTestDispatcher(t, spin)
			var gid string
			on(d, func() { gid = goroutineID() })
			on(d, func() { d.requestPoll(2*time.Millisecond, false) })
			waitPolls(t, polls, 1)
			advance(d, 5*time.Millisecond)
			waitParked(t, gid)
			if n := polls.Load(); n != 1 {
				t.Fatalf("5ms after the poll fired: got %d polls for one request, want 1", n)
			}

			// A sooner request wins over a later one.
			on(d, func() {
				d.requestPoll(time.Hour, false)
				d.requestPoll(time.Millisecond, false)
			})
			waitPolls(t, polls, 2)

			// Work while a poll is due: it runs long before the poll.
			on(d, func() { d.requestPoll(30*time.Millisecond, false) })
			start := time.Now()
			on(d, func() {})
			if waited := time.Since(start); waited > 20*time.Millisecond {
				t.Fatalf("work behind a poll due in 30ms: got it run after %v, want within 20ms", waited)
			}
			waitPolls(t, polls, 3)

			on(d, func() {
				d.requestPoll(time.Millisecond, false)
				d.cancelPoll()
			})
			advance(d, 10*time.Millisecond)
			waitParked(t, gid)
			if n := polls.Load(); n != 3 {
				t.Fatalf("10ms after a poll due in 1ms was cancelled: got %d polls, want 3 (the cancelled one never fires)", n)
			}
		})
	}
}

// TestDispatcherSpinsForWorkAfterARun: with a spin window, the dispatcher
// keeps spinning for new work for the window after each mailbox run
// instead of parking (a lane host's lane is woken by a reader that holds a
// core of its own: a parked lane's wake was most of a step's cost there);
// without one it parks once the run is done.
func TestDispatcherSpinsForWorkAfterARun(t *testing.T) {
	d, _ := newTestDispatcher(t, time.Second)
	on(d, func() {})
	before := d.parks.Load()
	for range 100 {
		on(d, func() {})
	}
	if n := d.parks.Load() - before; n != 0 {
		t.Fatalf("100 runs back to back with a 1 s spin window: got %d parks between them, want none", n)
	}

	var gid string
	p, _ := newTestDispatcher(t, 0)
	on(p, func() { gid = goroutineID() })
	waitParked(t, gid)
	before = p.parks.Load()
	on(p, func() {})
	waitParked(t, gid)
	if n := p.parks.Load() - before; n != 1 {
		t.Fatalf("a run with no spin window: got %d parks after it, want 1", n)
	}
}
