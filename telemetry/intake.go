// The recorder's intake: work handed over and not yet recorded, a queue
// per tenant served in turns, so that one tenant's flood costs its own
// telemetry first and no one else's.

package telemetry

import (
	"sync"

	"github.com/lanesched/lanes/cuda"
)

// intake holds what the scheduler handed over until the recording
// goroutine takes it: lane quarantines first (they are few, and each is
// what an operator must see), then the tenants' work in turns, one item
// each. It holds limit items at most; when full, the tenant with the most
// waiting loses its oldest (or, when the new work's own tenant would hold
// as many, the new work is dropped), so a flood drops its own work, never
// a quiet tenant's. A refusal handed over while the same tenant's previous
// refusal of the same kind still waits is summarised into that one. Safe
// for concurrent use.
type intake struct {
	limit int
	drops *dropCounts
	wake  chan struct{} // a token: there is work, or the intake closed

	mu          sync.Mutex
	waiting     int
	seq         uint64 // of the last item put
	quarantines []item
	queues      map[string]*tenantItems // by label(tenant)
	turns       []*tenantItems          // the tenants with work waiting, in turn
	turn        int
	closed      bool
	flushMark   uint64 // a flush waits for the items put up to this one
	flushLeft   int    // of those, the ones still waiting
}

// tenantItems is one tenant's waiting work, oldest first. Positions are
// absolute (items[i] is position off+i), so a refusal's place survives
// the slice's compaction.
type tenantItems struct {
	key      string
	items    []item
	head     int // items[:head] are taken
	off      uint64
	refusals map[cuda.Code]uint64 // the position of the newest waiting refusal of each kind
}

func (q *tenantItems) len() int { return len(q.items) - q.head }

// at is the waiting item at absolute position p, or nil.
func (q *tenantItems) at(p uint64) *item {
	if p < q.off+uint64(q.head) || p >= q.off+uint64(len(q.items)) {
		return nil
	}
	return &q.items[p-q.off]
}

// pop removes the oldest item, keeping the slice from growing without
// bound under a queue that never empties.
func (q *tenantItems) pop() item {
	it := q.items[q.head]
	q.items[q.head] = item{}
	q.head++
	if q.head >= 256 && 2*q.head >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.off, q.head = q.items[:n], q.off+uint64(q.head), 0
	}
	return it
}

func newIntake(limit int, drops *dropCounts) *intake {
	return &intake{limit: limit, drops: drops, wake: make(chan struct{}, 1), queues: map[string]*tenantItems{}}
}

// signal wakes the recording goroutine, if it sleeps.
func (in *intake) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// put queues an item, summarises it into its tenant's waiting refusal of
// the same kind, or drops and counts it (or another tenant's oldest, to
// make room). After close it drops and counts everything.
func (in *intake) put(it item) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.seq++
	it.seq = in.seq
	if in.closed {
		in.dropBehind(it)
		return
	}
	if it.quarantine != nil {
		in.quarantines = append(in.quarantines, it)
		in.waiting++
		if in.waiting > in.limit {
			in.evictFrom(in.largest())
		}
		in.signal()
		return
	}
	key := label(it.sub.Tenant)
	q := in.queues[key]
	code, refusal := summarisable(&it)
	if refusal && q != nil {
		if p, ok := q.refusals[code]; ok {
			if last := q.at(p); last != nil {
				last.refusals = max(last.refusals, 1) + 1
				last.sub.End = it.sub.End
				in.drops.add(it.sub.Tenant, func(d *TenantDrops) { d.Summarised++ })
				return
			}
		}
	}
	if in.waiting >= in.limit {
		big, mine := in.largest(), 0
		if q != nil {
			mine = q.len()
		}
		if big == nil || big == q || big.len() <= mine+1 {
			// Making room would leave the new work's tenant with as many as
			// the largest: the new work is the one dropped.
			in.dropBehind(it)
			return
		}
		in.evictFrom(big)
	}
	if q == nil {
		q = &tenantItems{key: key, refusals: map[cuda.Code]uint64{}}
		in.queues[key] = q
		in.turns = append(in.turns, q)
	}
	q.items = append(q.items, it)
	if refusal {
		q.refusals[code] = q.off + uint64(len(q.items)-1)
	}
	in.waiting++
	in.signal()
}

// summarisable reports whether an item is a refusal that may be
// summarised, and its kind: refused at admission (no lane took it), not
// under a caller's span (that one is its caller's to see).
func summarisable(it *item) (cuda.Code, bool) {
	s := &it.sub
	if !it.isSub || s.Lane >= 0 || s.Err == nil || s.Parent.IsValid() {
		return 0, false
	}
	return cuda.Classify(s.Err).Code, true
}

// largest is the tenant with the most waiting; of those that hold as
// many, the one that came last (its oldest is the newest): a burst of new
// names loses to the tenants that waited. nil: none waits.
func (in *intake) largest() *tenantItems {
	var big *tenantItems
	for _, q := range in.turns {
		if big == nil || q.len() > big.len() || (q.len() == big.len() && q.items[q.head].seq > big.items[big.head].seq) {
			big = q
		}
	}
	return big
}

// evictFrom drops and counts a tenant's oldest item (nil: nothing to
// drop, the intake holds one over its limit until the next take).
func (in *intake) evictFrom(q *tenantItems) {
	if q == nil || q.len() == 0 {
		return
	}
	in.dropBehind(q.pop())
	in.waiting--
	in.tidy(q)
}

// dropBehind counts an item dropped unrecorded, as the submissions it
// stands for, and as settled for a flush waiting on it.
func (in *intake) dropBehind(it item) {
	n := uint64(max(it.refusals, 1))
	tenant := it.sub.Tenant
	if it.quarantine != nil {
		tenant = ""
	}
	in.settled(it)
	in.drops.add(tenant, func(d *TenantDrops) { d.Behind += n })
}

// settled counts an item taken or dropped for a flush that waits on it.
func (in *intake) settled(it item) {
	if in.flushLeft > 0 && it.seq <= in.flushMark {
		in.flushLeft--
	}
}

// tidy forgets a tenant whose queue emptied.
func (in *intake) tidy(q *tenantItems) {
	if q.len() > 0 {
		return
	}
	delete(in.queues, q.key)
	for i, t := range in.turns {
		if t == q {
			in.turns = append(in.turns[:i], in.turns[i+1:]...)
			if in.turn > i {
				in.turn--
			}
			break
		}
	}
}

// take returns the next item to record: a quarantine, else the next
// tenant's oldest in turn; ok is false when nothing waits.
func (in *intake) take() (it item, ok bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.quarantines) > 0 {
		it = in.quarantines[0]
		in.quarantines[0] = item{}
		in.quarantines = in.quarantines[1:]
	} else {
		if len(in.turns) == 0 {
			return item{}, false
		}
		if in.turn >= len(in.turns) {
			in.turn = 0
		}
		q := in.turns[in.turn]
		it = q.pop()
		in.turn++
		in.tidy(q)
	}
	in.waiting--
	in.settled(it)
	return it, true
}

// markFlush makes the items waiting now the ones a flush waits for.
func (in *intake) markFlush() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.flushMark, in.flushLeft = in.seq, in.waiting
}

// flushed reports whether every item a flush waits for was taken or
// dropped.
func (in *intake) flushed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.flushLeft == 0
}

// close makes every later put drop and count, and wakes the recording
// goroutine to record what waits.
func (in *intake) close() {
	in.mu.Lock()
	in.closed = true
	in.mu.Unlock()
	in.signal()
}

// isClosed reports whether close was called.
func (in *intake) isClosed() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.closed
}
