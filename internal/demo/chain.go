// The closed loop whose next step the lane issues itself: a client's step
// is submitted from its previous step's end, on the goroutine that ended it.

package demo

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/lanes"
)

// NextStep values: who submits a closed-loop client's next step.
const (
	// NextStepLane submits it from the previous step's end (the
	// SubmitNotify callback, on the lane's thread): the loop a hand-written
	// driver program runs, with no hand-off to a client goroutine per step.
	NextStepLane = "lane"
	// NextStepCaller has a goroutine per client wait for each step's end
	// (Pending.Result) and submit the next: what a caller that blocks on
	// its receipt meets.
	NextStepCaller = "caller"
)

// chain is one closed-loop client of NextStepLane: its tenant, its staging
// slot, and the step it has in flight (one at a time).
type chain struct {
	ctx    context.Context
	cfg    Config
	s      *actors.Scheduler
	tn     *tenant
	slot   int
	timing lanes.TimingMode
	agg    *aggregate
	issued *atomic.Int64 // the tenant's steps issued (Config.Steps bounds them)
	gen    *sync.Mutex   // the tenant's input generator
	stop   func(error)   // called once, when the chain stops

	// sent is when the step in flight was submitted: written before its
	// submission, read at its end.
	sent time.Time
	// retry is a step refused at admission, submitted again after a
	// back-off (tries refusals in a row) rather than built again.
	retry *lanes.Batch
	tries int
	// state settles who goes on when a step ends while its submission is
	// still returning (a re-entrant or very fast end): the submitter, not
	// a nested call, so the stack never grows with the steps.
	state  atomic.Int32
	onEnd  func(lanes.Pending)
	closed atomic.Bool
}

// Chain states.
const (
	chainIdle       = iota // no submission returning
	chainSubmitting        // next is inside SubmitNotify
	chainEndedEarly        // ...and the step it submitted has ended already
)

// runChains drives the closed loop with NextStepLane and returns once
// every client has stopped: at ctx's end, after its step in flight ended,
// or at the first error building a step.
func runChains(ctx context.Context, cfg Config, s *actors.Scheduler, served []*tenant, timing lanes.TimingMode, agg *aggregate) error {
	var wg sync.WaitGroup
	var first error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, tn := range served {
		issued, gen := new(atomic.Int64), new(sync.Mutex)
		for w := range cfg.Concurrency {
			c := &chain{ctx: ctx, cfg: cfg, s: s, tn: tn, slot: w, timing: timing, agg: agg, issued: issued, gen: gen}
			c.onEnd = c.ended
			c.stop = func(err error) {
				if err != nil {
					once.Do(func() { first = err; cancel() })
				}
				wg.Done()
			}
			wg.Add(1)
			c.next()
		}
	}
	wg.Wait()
	return first
}

// next submits the client's next step, or stops the client. A refused
// step is submitted again, the same batch, from a timer after a back-off
// (retryDelay): the goroutine that ended the last step may be a lane's
// thread.
func (c *chain) next() {
	for {
		var b lanes.Batch
		if c.retry != nil {
			if c.ctx.Err() != nil {
				c.finish(nil)
				return
			}
			b, c.retry = *c.retry, nil
		} else {
			if c.ctx.Err() != nil || c.cfg.Steps > 0 && c.issued.Add(1) > int64(c.cfg.Steps) {
				c.finish(nil)
				return
			}
			c.gen.Lock()
			var err error
			b, err = c.tn.step(c.timing, c.slot)
			c.gen.Unlock()
			if err != nil {
				c.finish(err)
				return
			}
		}
		c.state.Store(chainSubmitting)
		c.sent = time.Now()
		c.agg.accepted.Add(1) // counted before it can end
		if _, err := c.s.SubmitNotify(context.Background(), c.tn.name, b, c.onEnd); err != nil {
			c.state.Store(chainIdle)
			c.agg.accepted.Add(-1)
			c.agg.refused(c.tn, err)
			if clientStops(c.s, err) {
				c.finish(nil)
				return
			}
			c.retry, c.tries = &b, c.tries+1
			time.AfterFunc(retryDelay(err, c.tries-1), c.next)
			return
		}
		c.tries = 0
		if c.state.CompareAndSwap(chainSubmitting, chainIdle) {
			return // the step's end submits the next one
		}
		c.state.Store(chainIdle) // it ended already: go on here
	}
}

// ended records a step's end and submits the client's next step, unless
// the step's submission is still returning: then that goes on.
func (c *chain) ended(p lanes.Pending) {
	r, err := p.Result()
	c.agg.ended(laneOf(p), c.tn, time.Since(c.sent), r, err)
	if c.state.CompareAndSwap(chainSubmitting, chainEndedEarly) {
		return
	}
	c.next()
}

// finish stops the client once.
func (c *chain) finish(err error) {
	if c.closed.CompareAndSwap(false, true) {
		c.stop(err)
	}
}

// retryDelay is how long a client refused err waits before trying again,
// after tries refusals in a row before this one (backOff's rule).
func retryDelay(err error, tries int) time.Duration {
	var se *actors.SuspendedError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 100 * time.Microsecond << min(tries, 6)
}

// laneOf is the lane an in-process submission was routed to (-1 while it
// waits to move, or for a submission of a front's).
func laneOf(p lanes.Pending) int {
	if l, ok := p.(interface{ Lane() int }); ok {
		return l.Lane()
	}
	return -1
}
