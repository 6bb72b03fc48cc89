package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/cuda"
)

// threadDispatcher runs every mailbox run of one lane actor on one goroutine
// that is locked to its OS thread with the device's context current
// (cuda.Device.BindThread), so the lane's Receive never runs anywhere else.
type threadDispatcher struct {
	work       chan func()
	quit       chan struct{}
	done       chan struct{}
	throughput int
	stopOnce   sync.Once
}

var _ actor.Dispatcher = (*threadDispatcher)(nil)

// newThreadDispatcher starts the goroutine, binds it to the device, and
// returns once the binding succeeded or failed.
func newThreadDispatcher(dev cuda.Device, throughput int) (*threadDispatcher, error) {
	d := &threadDispatcher{work: make(chan func(), 16), quit: make(chan struct{}), done: make(chan struct{}), throughput: throughput}
	bound := make(chan error, 1)
	go func() {
		defer close(d.done)
		unbind, err := dev.BindThread()
		bound <- err
		if err != nil {
			return
		}
		defer unbind()
		for {
			select {
			case fn := <-d.work:
				fn()
			case <-d.quit:
				return
			}
		}
	}()
	if err := <-bound; err != nil {
		return nil, err
	}
	return d, nil
}

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
