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
// waiting loses its oldest (or, being the one that hands more, the new
// one), so a flood drops its own work, never a quiet tenant's. A refusal
// handed while the same tenant's previous refusal of the same kind still
// waits is summarised into it. Safe for concurrent use.
type intake struct {
	limit int
	drops *dropCounts
	wake  chan struct{} // a token: there is work, or the intake closed

	mu          sync.Mutex
	waiting     int
	quarantines []*Quarantine
	queues      map[string]*tenantItems
	turns       []*tenantItems // the tenants with work waiting, in turn
	turn        int
	closed      bool
}

// tenantItems is one tenant's waiting work, oldest first.
type tenantItems struct {
	tenant string
	items  []item
	head   int
}

func (q *tenantItems) len() int { return len(q.items) - q.head }

// pop removes the oldest item, keeping the slice from growing without
// bound under a queue that never empties.
func (q *tenantItems) pop() item {
	it := q.items[q.head]
	q.items[q.head] = item{}
	q.head++
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head >= 256 && 2*q.head >= len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
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

// put queues an item, summarises it into its tenant's last refusal, or
// drops and counts it (or another tenant's oldest, to make room). After
// close it drops and counts everything.
func (in *intake) put(it item) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		in.dropBehind(it)
		return
	}
	if it.quarantine != nil {
		in.quarantines = append(in.quarantines, it.quarantine)
		in.waiting++
		if in.waiting > in.limit {
			in.evictFrom(in.largest())
		}
		in.signal()
		return
	}
	q := in.queues[it.sub.Tenant]
	if q != nil && q.len() > 0 && summarises(&q.items[len(q.items)-1], &it) {
		last := &q.items[len(q.items)-1]
		last.refusals = max(last.refusals, 1) + 1
		last.sub.End = it.sub.End
		in.drops.add(it.sub.Tenant, func(d *TenantDrops) { d.Summarised++ })
		return
	}
	if in.waiting >= in.limit {
		big, mine := in.largest(), 0
		if q != nil {
			mine = q.len()
		}
		if big == nil || big.len() <= mine {
			in.dropBehind(it) // the one that hands the most loses the new work
			return
		}
		in.evictFrom(big)
	}
	if q == nil {
		q = &tenantItems{tenant: it.sub.Tenant}
		in.queues[it.sub.Tenant] = q
		in.turns = append(in.turns, q)
	}
	q.items = append(q.items, it)
	in.waiting++
	in.signal()
}

// summarises reports whether a refusal summarises into the one before it:
// both refused at admission (no lane took them), for the same reason,
// neither under a caller's span (that one is its caller's to see).
func summarises(last, next *item) bool {
	a, b := &last.sub, &next.sub
	if !last.isSub || !next.isSub || a.Lane >= 0 || b.Lane >= 0 || a.Err == nil || b.Err == nil || a.Parent.IsValid() || b.Parent.IsValid() {
		return false
	}
	return cuda.Classify(a.Err).Code == cuda.Classify(b.Err).Code
}

// largest is the tenant with the most waiting (nil: none waits).
func (in *intake) largest() *tenantItems {
	var big *tenantItems
	for _, q := range in.turns {
		if big == nil || q.len() > big.len() {
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
// stands for.
func (in *intake) dropBehind(it item) {
	n := uint64(max(it.refusals, 1))
	tenant := it.sub.Tenant
	if it.quarantine != nil {
		tenant = ""
	}
	in.drops.add(tenant, func(d *TenantDrops) { d.Behind += n })
}

// tidy forgets a tenant whose queue emptied.
func (in *intake) tidy(q *tenantItems) {
	if q.len() > 0 {
		return
	}
	delete(in.queues, q.tenant)
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
		q := in.quarantines[0]
		in.quarantines = in.quarantines[1:]
		in.waiting--
		return item{quarantine: q}, true
	}
	if len(in.turns) == 0 {
		return item{}, false
	}
	if in.turn >= len(in.turns) {
		in.turn = 0
	}
	q := in.turns[in.turn]
	it = q.pop()
	in.waiting--
	in.turn++
	in.tidy(q)
	return it, true
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
