// The thread dispatcher: one OS thread per lane actor, bound to its device,
// that runs the actor's mailbox.

package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/cuda"
)

// threadDispatcher runs every mailbox run of one lane actor on one goroutine
// that is locked to its OS thread with the device's context current
// (cuda.Device.BindThread), so the lane's Receive never runs anywhere else.
//
// It also keeps the lane's fence-poll timer. Waking a goroutine locked to
// its thread costs a thread hand-off in the Go runtime (the runtime's most
// contended path under load), so the dispatcher avoids wake-ups where it
// can: it fires the poll itself rather than through a timer goroutine and a
// message from outside, and, when configured with a spin window, it spins
// for work instead of parking while a poll is due within the window, and
// for the window after each mailbox run (like CUDA's spin-wait scheduling
// policy, for the same reason). A lane host's lane is woken by its data
// plane's reader, which keeps its own core spinning: waking a parked lane
// from there took 19 µs a step on average on the H200 at 2 steps in
// flight per tenant (the scheduler latency of Go's execution trace), and
// spinning after a run made that loop 16-24% faster.
type threadDispatcher struct {
	work       chan func()
	quit       chan struct{}
	done       chan struct{}
	throughput int
	spin       time.Duration // spin window; 0 parks at once
	parks      atomic.Int64  // times the loop blocked in its select
	stopOnce   sync.Once

	// The poll request: read and written only on the dispatcher's
	// goroutine (the lane's Receive runs there too), so it needs no lock.
	epoch  time.Time
	pollAt int64  // when the lane wants a poll (ns since epoch); 0: none
	ranAt  int64  // when the last mailbox run ended (ns since epoch)
	poll   func() // sends the lane its poll message; set before the first request
}

var _ actor.Dispatcher = (*threadDispatcher)(nil)

// newThreadDispatcher starts the goroutine, binds it to the device, and
// returns once the binding succeeded or failed.
func newThreadDispatcher(dev cuda.Device, throughput int, spin time.Duration) (*threadDispatcher, error) {
	d := &threadDispatcher{work: make(chan func(), 16), quit: make(chan struct{}), done: make(chan struct{}),
		throughput: throughput, spin: spin, epoch: time.Now()}
	bound := make(chan error, 1)
	go func() {
		defer close(d.done)
		unbind, err := dev.BindThread()
		bound <- err
		if err != nil {
			return
		}
		defer unbind()
		d.loop()
	}()
	if err := <-bound; err != nil {
		return nil, err
	}
	return d, nil
}

func (d *threadDispatcher) now() int64 { return int64(time.Since(d.epoch)) }

// loop runs mailbox runs and polls until quit.
func (d *threadDispatcher) loop() {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case fn := <-d.work:
			d.run(fn)
			continue
		case <-d.quit:
			return
		default:
		}
		due, now := d.pollAt, d.now()
		switch {
		case due != 0 && now >= due:
			d.pollAt = 0
			d.poll()
			continue
		case due != 0 && time.Duration(due-now) <= d.spin:
			d.spinUntil(due)
			continue
		case now-d.ranAt < int64(d.spin):
			d.spinUntil(d.ranAt + int64(d.spin)) // new work is likely soon: a parked lane's wake costs a thread hand-off
			continue
		case due != 0:
			timer.Reset(time.Duration(due - now))
		}
		d.parks.Add(1)
		select {
		case fn := <-d.work:
			d.run(fn)
		case <-timer.C:
		case <-d.quit:
			return
		}
		timer.Stop()
	}
}

// run runs a mailbox run and notes when it ended: the spin window after
// it counts from there.
func (d *threadDispatcher) run(fn func()) {
	fn()
	d.ranAt = d.now()
}

// spinUntil returns once work is queued, the poll is due, or quit.
func (d *threadDispatcher) spinUntil(due int64) {
	for len(d.work) == 0 && d.now() < due {
		select {
		case <-d.quit:
			return
		default:
		}
	}
}

// requestPoll asks for a poll after delay, unless one is due sooner. It is
// called from the lane's Receive, so on the dispatcher's own goroutine.
func (d *threadDispatcher) requestPoll(delay time.Duration) {
	due := d.now() + int64(delay)
	if d.pollAt == 0 || due < d.pollAt {
		d.pollAt = due
	}
}

// cancelPoll drops the requested poll (on the dispatcher's goroutine).
func (d *threadDispatcher) cancelPoll() { d.pollAt = 0 }

// Schedule hands a mailbox run to the bound goroutine.
func (d *threadDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	case <-d.quit:
	}
}

// Throughput is how many messages one run processes before yielding.
func (d *threadDispatcher) Throughput() int { return d.throughput }

// stop ends the goroutine (after the run in progress) and waits for it.
func (d *threadDispatcher) stop() {
	d.stopOnce.Do(func() { close(d.quit) })
	<-d.done
}
