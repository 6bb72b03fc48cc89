// Driving the steps: one tenant at a time with a window of steps in flight
// (eager against replayed), and every tenant at once from their first
// steps, each tenant's next step submitted from the end of one before it
// (SubmitNotify).

package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/lanes"
)

// stepStats is what the receipts of timed steps say.
type stepStats struct {
	steps  int           // timed steps
	wall   time.Duration // their wall time, first submitted to last ended
	device []time.Duration
	// whole counts the steps replayed whole: every entry replayed, in one
	// segment, as one graph launch.
	whole              int
	lastWhole          bool // the last step recorded was replayed whole
	rowsReplayed, rows int
	launches           int // launches of the last step
	lanes              map[int]bool
	// eager counts why entries ran eagerly, by reason.
	eager map[cache.Reason]int
}

// record adds one step's receipt.
func (st *stepStats) record(rc lanes.Receipt) {
	st.steps++
	if rc.DeviceTime > 0 {
		st.device = append(st.device, rc.DeviceTime)
	}
	a := rc.Attribution
	replayed := 0
	for _, r := range a.Rows {
		if r.Replayed {
			replayed++
			continue
		}
		if st.eager == nil {
			st.eager = map[cache.Reason]int{}
		}
		st.eager[r.Reason]++
	}
	st.rowsReplayed += replayed
	st.rows += len(a.Rows)
	st.lastWhole = replayed == len(a.Rows) && len(a.Segments) == 1 && a.Launches == 1
	if st.lastWhole {
		st.whole++
	}
	st.launches = a.Launches
	if st.lanes == nil {
		st.lanes = map[int]bool{}
	}
	st.lanes[rc.Lane] = true
}

// merge adds o's steps to st's (its wall time is the caller's to set).
func (st *stepStats) merge(o *stepStats) {
	st.steps += o.steps
	st.device = append(st.device, o.device...)
	st.whole += o.whole
	st.rowsReplayed += o.rowsReplayed
	st.rows += o.rows
	st.launches = o.launches
	for l := range o.lanes {
		if st.lanes == nil {
			st.lanes = map[int]bool{}
		}
		st.lanes[l] = true
	}
	for r, n := range o.eager {
		if st.eager == nil {
			st.eager = map[cache.Reason]int{}
		}
		st.eager[r] += n
	}
}

// perStep is the wall time per timed step.
func (st *stepStats) perStep() time.Duration {
	return st.wall / time.Duration(max(st.steps, 1))
}

// medianDevice is the median of the steps' device times (0 untimed).
func (st *stepStats) medianDevice() time.Duration { return quantile(st.device, 0.5) }

// why says why entries ran eagerly ("" when none did): each reason
// with its count of entries.
func (st *stepStats) why() string {
	var out []string
	for r, n := range st.eager {
		out = append(out, fmt.Sprintf("%s ×%d", r, n))
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// laneList is the lanes the steps ran on, in order.
func (st *stepStats) laneList() []int {
	var out []int
	for l := range st.lanes {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// solo runs all of t's steps on path, alone on the scheduler: the first on
// its own (on the adaptive path it captures the step), then the rest with
// up to window in flight, timed, each with its device time.
func solo(ctx context.Context, s *actors.Scheduler, t *tenant, steps, window int, path lanes.Path) (*stepStats, error) {
	step := t.step
	step.Path, step.Timing = path, lanes.TimingCompletion
	if _, err := s.Submit(ctx, t.name, step); err != nil {
		return nil, fmt.Errorf("%s, step 1: %w", t.name, err)
	}
	st := &stepStats{}
	var inFlight []lanes.Pending
	wait := func(p lanes.Pending) error {
		rc, err := p.Result()
		if err == nil {
			st.record(rc)
		}
		return err
	}
	start := time.Now()
	for i := 1; i < steps; i++ {
		if len(inFlight) == window {
			if err := wait(inFlight[0]); err != nil {
				return nil, err
			}
			inFlight = inFlight[1:]
		}
		p, err := s.SubmitAsync(ctx, t.name, step)
		if err != nil {
			return nil, fmt.Errorf("%s, step %d: %w", t.name, i+1, err)
		}
		inFlight = append(inFlight, p)
	}
	for _, p := range inFlight {
		if err := wait(p); err != nil {
			return nil, err
		}
	}
	st.wall = time.Since(start)
	return st, nil
}

// together runs every tenant's steps at once on the adaptive path, all
// timed, each tenant keeping up to window in flight from its first step
// on, its next step submitted when one ends, by the goroutine that ended
// it (most often its lane's own thread). Tenants sharing a lane meet each
// other's work from the start: a lane captures only while its stream is
// quiescent, so it lets its stream drain once for a tenant whose capture
// waited (actors), and from then on the tenant's steps replay.
func together(ctx context.Context, s *actors.Scheduler, ts []*tenant, steps, window int) (*stepStats, error) {
	chains := make([]*chain, len(ts))
	start := time.Now()
	for i, t := range ts {
		c := &chain{ctx: ctx, s: s, t: t, done: make(chan struct{})}
		c.left.Store(int64(steps))
		c.pending.Store(int64(steps))
		chains[i] = c
		for range min(window, steps) {
			c.submit()
		}
	}
	all := &stepStats{}
	var firstErr error
	for _, c := range chains {
		<-c.done
		if c.err != nil && firstErr == nil {
			firstErr = fmt.Errorf("%s: %w", c.t.name, c.err)
		}
		c.mu.Lock()
		all.merge(&c.stats)
		if !c.stats.lastWhole && firstErr == nil {
			firstErr = fmt.Errorf("%s: its last step did not replay as one graph launch (eager entries: %s)", c.t.name, c.stats.why())
		}
		c.mu.Unlock()
	}
	all.wall = time.Since(start)
	return all, firstErr
}

// chain is one tenant's steps in flight: each that ends submits the next.
type chain struct {
	ctx     context.Context
	s       *actors.Scheduler
	t       *tenant
	left    atomic.Int64 // steps not yet submitted
	pending atomic.Int64 // steps not yet ended
	mu      sync.Mutex
	stats   stepStats
	err     error // set once, before done is closed
	once    sync.Once
	done    chan struct{}
}

// submit submits the tenant's next step, if it has one left.
func (c *chain) submit() {
	if c.left.Add(-1) < 0 {
		return
	}
	if _, err := c.s.SubmitNotify(c.ctx, c.t.name, c.t.step, c.ended); err != nil {
		c.finish(err)
	}
}

// ended records a step's receipt and submits the next: it runs on the
// goroutine that ended the step, so it only records and submits.
func (c *chain) ended(p lanes.Pending) {
	rc, err := p.Result()
	if err != nil {
		c.finish(err)
		return
	}
	c.mu.Lock()
	c.stats.record(rc)
	c.mu.Unlock()
	c.submit()
	if c.pending.Add(-1) == 0 {
		c.finish(nil)
	}
}

// finish ends the chain with err (nil: every step ended well).
func (c *chain) finish(err error) {
	c.once.Do(func() {
		c.err = err
		close(c.done)
	})
}
