// Where a call's round trip to its host goes: one call in SampleEvery
// carries times both ways, and the front keeps their means per host.

package front

import (
	"sync"
	"time"

	"github.com/lanesched/lanes/internal/wirepb"
)

// SampleEvery is how often a front samples a call's round trip: one
// submission in this many carries times to its host and back.
const SampleEvery = 64

// RoundTrip is remote.RoundTrip as this package makes it: see there for
// what each field means.
type RoundTrip struct {
	Samples   uint64
	Total     time.Duration
	Wire      time.Duration
	HostQueue time.Duration
	Lane      time.Duration
	HostReply time.Duration
}

// roundTrips sums a host's sampled round trips.
type roundTrips struct {
	mu  sync.Mutex
	n   uint64
	sum [5]time.Duration // total, wire, host queue, lane, host reply
}

// note adds one sampled call: the front's times (queued, receipt taken)
// and the host's.
func (r *roundTrips) note(sent, received int64, t *wirepb.Timing) {
	if t == nil || sent == 0 || t.Received == 0 || t.Admitted < t.Received || t.Ended < t.Admitted || t.Sent < t.Ended || received < sent {
		return // not sampled, or times that cannot be (a host that sets none, a clock stepped)
	}
	total, host := received-sent, t.Sent-t.Received
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	for i, d := range []int64{total, max(total-host, 0), t.Admitted - t.Received, t.Ended - t.Admitted, t.Sent - t.Ended} {
		r.sum[i] += time.Duration(d)
	}
}

// reset starts over (a new registration).
func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n, r.sum = 0, [5]time.Duration{}
}

// means is the means so far.
func (r *roundTrips) means() RoundTrip {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == 0 {
		return RoundTrip{}
	}
	n := time.Duration(r.n)
	return RoundTrip{Samples: r.n, Total: r.sum[0] / n, Wire: r.sum[1] / n, HostQueue: r.sum[2] / n, Lane: r.sum[3] / n, HostReply: r.sum[4] / n}
}
