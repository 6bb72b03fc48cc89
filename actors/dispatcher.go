// The thread dispatcher: one goroutine per lane actor that runs the
// actor's mailbox, each run bound to the device on its thread.

package actors

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/cuda"
)

// threadDispatcher runs every mailbox run and every fence poll of one lane
// actor on one goroutine, one at a time, each with the goroutine locked to
// its OS thread and the device's context current there for the run
// (cuda.Device.BindThread), so the lane's Receive always runs bound.
//
// Between runs the goroutine is not locked. It was, from the lane's start
// to its stop, until issue 56 measured what that cost: waking a goroutine
// locked to its thread hands the waker's P to the locked thread and parks
// the waker's thread (a thread hand-off each way, two futex calls each),
// and it is the runtime's most contended path under load. On a 2-core
// machine 42-44% of the CPU of a lane host and of one process went to
// those futex calls, and binding per run (a LockOSThread and, on the GPU,
// a cuCtxSetCurrent: well under a microsecond) served 1.4x the steps in
// one process and 1.7x through a lane host
// (docs/measurements/2026-12-07-fast-by-default.txt).
//
// It also keeps the lane's fence-poll timer, and fires the poll itself
// rather than through a timer goroutine and a message from outside. When
// configured with a spin window, or asked to spin for a due fence
// (pacer.go), it spins instead of parking while the poll is due, and, with
// a spin window, for the window after each mailbox run (like CUDA's
// spin-wait scheduling policy, for the same reason): a lane host's lane is
// woken by its data plane's reader, and spinning after a run made that
// loop 16-24% faster on the H200.
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
	pollAt int64 // when the lane wants a poll (ns since epoch); 0: none
	// spinPoll: the lane holds a place among the spinning lanes (pacer.go)
	// and wants its thread to spin until the poll rather than park.
	spinPoll bool
	ranAt    int64  // when the last mailbox run ended (ns since epoch)
	poll     func() // sends the lane its poll message; set before the first request
	bind     func() (func(), error)
}

var _ actor.Dispatcher = (*threadDispatcher)(nil)

// newThreadDispatcher starts the goroutine, binds it to the device once,
// and returns once that binding succeeded or failed.
func newThreadDispatcher(dev cuda.Device, throughput int, spin time.Duration) (*threadDispatcher, error) {
	d := &threadDispatcher{work: make(chan func(), 16), quit: make(chan struct{}), done: make(chan struct{}),
		throughput: throughput, spin: spin, epoch: time.Now(), bind: dev.BindThread}
	bound := make(chan error, 1)
	go func() {
		defer close(d.done)
		unbind, err := dev.BindThread()
		bound <- err
		if err != nil {
			return
		}
		unbind()
		d.loop()
	}()
	if err := <-bound; err != nil {
		return nil, err
	}
	return d, nil
}

// bound runs fn with the goroutine bound to the device. A binding that
// fails (a device closed under the lane) still runs fn: its device calls
// fail, and the lane classifies their errors as it does any other.
func (d *threadDispatcher) bound(fn func()) {
	unbind, err := d.bind()
	if err != nil {
		fn()
		return
	}
	defer unbind()
	fn()
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
			d.pollAt, d.spinPoll = 0, false
			d.bound(d.poll)
			continue
		case due != 0 && (d.spinPoll || time.Duration(due-now) <= d.spin):
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
	d.bound(fn)
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

// requestPoll asks for a poll after delay, unless one is due sooner; with
// spin, the thread spins until then instead of parking. It is called from
// the lane's Receive, so on the dispatcher's own goroutine.
func (d *threadDispatcher) requestPoll(delay time.Duration, spin bool) {
	due := d.now() + int64(delay)
	if d.pollAt == 0 || due < d.pollAt {
		d.pollAt, d.spinPoll = due, spin
	}
}

// cancelPoll drops the requested poll (on the dispatcher's goroutine).
func (d *threadDispatcher) cancelPoll() { d.pollAt, d.spinPoll = 0, false }

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
