// When a lane looks at its fences: what it has measured of how long its
// submissions hold the stream, when its oldest fence is due, and how many
// of the process's lanes may spin for a fence at once.

package actors

import (
	"runtime"
	"sync/atomic"
	"time"
)

// fencePacer learns how long one submission holds the lane's stream, from
// the ends the lane sees, so that the lane looks at its oldest fence when
// it is due rather than on a fixed back-off. When a poll before found the
// fence not yet ended, the end lies between that poll and the one that
// found it, and the pacer learns the middle of the two (spinning, they are
// microseconds apart). When the first look found it ended, the lane only
// knows it looked late, perhaps much later than asked (a timer under a
// millisecond may fire a millisecond late: timerSlack), so the pacer
// shortens what it learned by an eighth and looks earlier next time. The
// two meet at the first look just before the end. Several ends seen at
// once share the time.
type fencePacer struct {
	est     time.Duration // the learned time one submission holds the stream; 0: nothing learned
	emptyAt time.Time     // the last poll that found nothing ended, since the last progress
}

// pacerWeight is the weight of the newest sample: 1/8.
const pacerWeight = 8

// maxPaced bounds a sample: longer holds are polled on the back-off.
const maxPaced = time.Second

// observe learns from a poll at now that found ended submissions ended
// since the lane's last progress at since (a poll that found none passes
// 0 and is remembered as the bracket's start).
func (p *fencePacer) observe(since, now time.Time, ended int) {
	if ended == 0 {
		p.emptyAt = now
		return
	}
	looked := p.emptyAt.After(since)
	from := p.emptyAt
	p.emptyAt = time.Time{}
	switch {
	case looked:
		end := from.Add(now.Sub(from) / 2)
		sample := min(end.Sub(since)/time.Duration(ended), maxPaced)
		if p.est == 0 {
			p.est = sample
		} else {
			p.est += (sample - p.est) / pacerWeight
		}
	case p.est == 0:
		p.est = min(now.Sub(since)/time.Duration(2*ended), maxPaced) // a first guess: the middle
	default:
		p.est -= p.est / pacerWeight
	}
}

// forget drops what was learned (a rebuilt lane's stream starts afresh).
func (p *fencePacer) forget() { *p = fencePacer{} }

// spinLead is how long before a fence is due a lane that may spin starts
// spinning for it (besides timerSlack): the learned time is a mean.
const spinLead = 50 * time.Microsecond

// timerSlack is how late a parked lane's timer may fire: when nothing else
// in the process runs, Go's runtime waits for its next timer in the
// network poller, whose wait is in whole milliseconds, so a timer under a
// millisecond fires up to a millisecond late. A lane that may spin spins
// for a fence due within it rather than park: on an H100 a step of 67 µs
// of device time, one in flight, was seen ended 1.2 ms after its
// submission by a lane that parked between timed polls (issue 56).
const timerSlack = time.Millisecond

// spinGrace bounds how long past its due time a lane spins for a fence
// (at least spinLead, at most the learned time itself) before it falls
// back to timed polls.
func (p *fencePacer) spinGrace() time.Duration { return max(spinLead, p.est/2) }

// quickBelow is the learned time under which a lane polls through its
// mailbox right after progress (Config.QuickPolls): a submission that
// holds the stream for less than a timer's resolution.
const quickBelow = 10 * time.Microsecond

// spinBudget is how many lanes of the process may spin for a due fence at
// once when Config.Spin is 0: a quarter of the CPUs, none on fewer than 4
// (a spinning lane takes the core its callers, and the simulated device's
// workers, need).
var spinBudget = int64(runtime.NumCPU() / 4)

// spinning counts the lanes spinning for a due fence now.
var spinning atomic.Int64

// takeSpin takes a place among the spinning lanes, if one is free.
func takeSpin() bool {
	if spinning.Add(1) <= spinBudget {
		return true
	}
	spinning.Add(-1)
	return false
}

// giveSpin gives back a place takeSpin took.
func giveSpin() { spinning.Add(-1) }
