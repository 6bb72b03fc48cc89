// A run's phases (warm-up, measured, draining) and why a run ended early:
// what the report and the progress line say about time.

package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
)

// Phases of a run, as the progress line and an interruption name them.
const (
	phaseSetup int32 = iota
	phaseWarmup
	phaseMeasured
	phaseDraining
)

var phaseNames = [...]string{"the set-up", "the warm-up", "the measured phase", "the draining"}

// lifecycle is when each phase began and ended, and why the run ended
// early, if it did. The measured phase's end freezes the counts its rates
// are made of (aggregate.freeze).
type lifecycle struct {
	phase                atomic.Int32
	signalPhase          atomic.Int32 // the phase the run's context ended in, plus one (0: it has not)
	runCtx               context.Context
	warmDone, warmTotal  atomic.Int64 // warm-up steps submitted, and planned
	mu                   sync.Mutex
	warmStart, measStart time.Time
	measEnd, drainEnd    time.Time
	endedEarly           string
}

// beginMeasured ends the warm-up and starts the measured phase.
func (lc *lifecycle) beginMeasured() {
	lc.mu.Lock()
	lc.measStart = time.Now()
	lc.mu.Unlock()
	lc.phase.Store(phaseMeasured)
}

// endMeasured ends the measured phase once (later calls change nothing)
// and freezes the aggregate's counts; the run drains from here.
func (lc *lifecycle) endMeasured(agg *aggregate) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if !lc.measEnd.IsZero() || lc.measStart.IsZero() {
		return
	}
	lc.measEnd = time.Now()
	agg.freeze()
	if lc.runCtx != nil && lc.runCtx.Err() != nil { // the signal ended the measured phase: say so before draining
		lc.signalPhase.CompareAndSwap(0, phaseMeasured+1)
	}
	lc.phase.Store(phaseDraining)
}

// endEarly records why the run stopped before its end (the first reason
// wins).
func (lc *lifecycle) endEarly(format string, args ...any) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.endedEarly == "" {
		lc.endedEarly = fmt.Sprintf(format, args...)
	}
}

// watch records the phase the run's context ends in (a signal arrives
// during the set-up, the warm-up, the measured phase or the draining); its
// stop function ends the watch.
func (lc *lifecycle) watch(ctx context.Context) (stop func() bool) {
	lc.runCtx = ctx
	return context.AfterFunc(ctx, func() { lc.signalPhase.CompareAndSwap(0, lc.phase.Load()+1) })
}

// interrupted records a cancelled run context as an early end, naming the
// phase it came in, and reports whether it was one.
func (lc *lifecycle) interrupted(ctx context.Context) bool {
	if ctx.Err() == nil {
		return false
	}
	cause := context.Cause(ctx)
	if errors.Is(cause, context.Canceled) || cause == nil {
		cause = errors.New("interrupted")
	}
	during := phaseNames[lc.phase.Load()]
	if p := lc.signalPhase.Load(); p > 0 {
		during = phaseNames[p-1]
	}
	lc.endEarly("%v during %s", cause, during)
	return true
}

// durations are the phases' lengths: warm-up, measured, draining.
func (lc *lifecycle) durations() (warm, measured, drain time.Duration) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	end := lc.drainEnd
	if end.IsZero() {
		end = time.Now()
	}
	switch {
	case lc.warmStart.IsZero(): // it never got past the set-up
		return 0, 0, 0
	case lc.measStart.IsZero(): // it never got past warm-up
		return end.Sub(lc.warmStart), 0, 0
	case lc.measEnd.IsZero():
		return lc.measStart.Sub(lc.warmStart), end.Sub(lc.measStart), 0
	}
	return lc.measStart.Sub(lc.warmStart), lc.measEnd.Sub(lc.measStart), end.Sub(lc.measEnd)
}

// noteAllOut records a measured phase that ended because every lane was
// out for good, with the first lane's cause.
func (lc *lifecycle) noteAllOut(s *actors.Scheduler, cfg Config) {
	if !allOut(s) {
		return
	}
	lc.mu.Lock()
	at := time.Since(lc.measStart)
	lc.mu.Unlock()
	cause := ""
	for _, l := range s.Lanes() {
		if l.Cause != nil {
			cause = fmt.Sprintf("; lane %d: %v", l.ID, l.Cause)
			break
		}
	}
	policy := "--no-rebuild"
	if !cfg.Recovery.Disabled {
		n := cfg.Recovery.MaxFailures
		if n <= 0 {
			n = 5
		}
		policy = fmt.Sprintf("a lane leaves after %d failures within --rebuild-window, or at once on a device-wide fault", n)
	}
	lc.endEarly("every lane was out for good %.1fs into the measured phase (%s)%s", at.Seconds(), policy, cause)
}
