// Aggregating a run's receipts as they end: per lane and per tenant
// counts and latency histograms.

package demo

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// aggregate collects every ended submission while the load runs, as the
// clients see it. Each lane's figures have a lock
// of their own, so clients of different lanes never contend on the way
// back; the totals are merged when the report is made.
type aggregate struct {
	mu       sync.Mutex // refusals
	lanes    []*laneAgg
	refusals map[string]int64

	accepted, endedN  atomic.Int64
	replayedN, eagerN atomic.Int64
	elapsed           time.Duration // the measured phase
	// measuredEnded is how many submissions had ended when the measured
	// phase ended (freeze): its rates' numerator.
	measuredEnded int64
	tenants       []*tenant
	// The warm-up's submissions, counted apart from the load's.
	warmAccepted, warmEndedN, warmFailed atomic.Int64
}

// warmEnded counts a warm-up submission's end (it waits for it).
func (a *aggregate) warmEnded(p lanes.Pending) {
	if _, err := p.Result(); err != nil {
		a.warmFailed.Add(1)
	}
	a.warmEndedN.Add(1)
}

type laneAgg struct {
	mu                              sync.Mutex
	hist                            *hdrhistogram.Histogram
	subs, ok, indeterminate, failed int64
	measured                        int64 // subs when the measured phase ended
	replayed, eager                 int64
	gaps                            map[cache.Reason]int64
}

// Latencies are recorded in microseconds, from 1 µs to 10 minutes, to three
// significant digits.
func newHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

// A tenant's latencies are recorded to two significant digits (within
// 1%): a twelfth of the memory of three, which thousands of tenants'
// histograms would otherwise spread every record over (the lanes' and
// the run's keep three).
func newTenantHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 2)
}

func newAggregate(lanes int) *aggregate {
	a := &aggregate{refusals: map[string]int64{}}
	for range lanes + 1 { // one per lane, then the submissions no lane took
		a.lanes = append(a.lanes, &laneAgg{hist: newHist(), gaps: map[cache.Reason]int64{}})
	}
	return a
}

// tenantAgg is what one tenant's clients saw.
type tenantAgg struct {
	mu                    sync.Mutex
	hist                  *hdrhistogram.Histogram
	subs, failed, refused int64
	measured              int64 // subs when the measured phase ended
	replayed, eager       int64
	lane                  int // the lane its last step ran on (-1: none)
}

func newTenantAgg() *tenantAgg { return &tenantAgg{hist: newTenantHist(), lane: -1} }

func (a *aggregate) refused(tn *tenant, err error) {
	a.mu.Lock()
	a.refusals[cuda.Classify(err).Code.String()]++
	a.mu.Unlock()
	if tn != nil && tn.stats != nil {
		tn.stats.mu.Lock()
		tn.stats.refused++
		tn.stats.mu.Unlock()
	}
}

// ended records one ended submission: its lane, latency, outcome and rows.
func (a *aggregate) ended(lane int, tn *tenant, lat time.Duration, r lanes.Receipt, err error) {
	us := max(lat.Microseconds(), 1)
	var replayed, eager int64
	if lane < 0 || lane >= len(a.lanes) {
		lane = len(a.lanes) - 1 // never routed (it waited to move and was refused): the last row is the unrouted one
	}
	l := a.lanes[lane]
	l.mu.Lock()
	for _, row := range r.Attribution.Rows {
		if row.Replayed {
			replayed++
			continue
		}
		eager++
		if row.Phase == cache.PhaseCompute {
			l.gaps[row.Reason]++
		}
	}
	l.subs++
	switch {
	case err == nil:
		l.ok++
	case errors.Is(err, actors.ErrIndeterminate):
		l.indeterminate++
	default:
		l.failed++
	}
	_ = l.hist.RecordValue(us)
	l.replayed += replayed
	l.eager += eager
	l.mu.Unlock()
	a.replayedN.Add(replayed)
	a.eagerN.Add(eager)
	a.endedN.Add(1)
	if tn != nil && tn.stats != nil {
		t := tn.stats
		t.mu.Lock()
		t.subs++
		if err != nil {
			t.failed++
		}
		_ = t.hist.RecordValue(us)
		t.replayed += replayed
		t.eager += eager
		if r.Lane >= 0 && err == nil {
			t.lane = r.Lane
		}
		t.mu.Unlock()
	}
}

// freeze records the counts the measured phase's rates are made of: every
// lane's and tenant's ended submissions at its end.
func (a *aggregate) freeze() {
	for _, l := range a.lanes {
		l.mu.Lock()
		l.measured = l.subs
		l.mu.Unlock()
	}
	for _, tn := range a.tenants {
		if t := tn.stats; t != nil {
			t.mu.Lock()
			t.measured = t.subs
			t.mu.Unlock()
		}
	}
	a.measuredEnded = a.endedN.Load()
}

// waitEnded waits (bounded) until every accepted submission has ended.
func (a *aggregate) waitEnded(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for (a.endedN.Load() < a.accepted.Load() || a.warmEndedN.Load() < a.warmAccepted.Load()) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
}
