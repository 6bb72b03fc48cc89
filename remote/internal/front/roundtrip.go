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

// RoundTrip is where sampled calls to a host spent their time, as means
// since the host last registered. Wire is measured on the front's clock
// less the host's own time, so it holds across machines whose clocks
// differ; the rest are on the host's clock.
type RoundTrip struct {
	// Samples is how many sampled calls the means hold: 0 while none
	// ended, or with a host that sets no times (one older than the
	// front), when every field is 0.
	Samples uint64
	// Total is from the front queuing the submission to the front
	// taking its receipt off the wire.
	Total time.Duration
	// Wire is both ways through the remote (the front's sender queue, the
	// front's and the host's endpoints and actors' mailboxes, gRPC and the
	// network): Total less the host's time.
	Wire time.Duration
	// HostQueue is from the host's actor taking the submission off the
	// wire to its scheduler admitting it.
	HostQueue time.Duration
	// Lane is from admission to the end on its lane: what the same
	// submission costs in one process.
	Lane time.Duration
	// HostReply is from the end to the receipt handed to the remote.
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
