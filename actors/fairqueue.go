// The lane's fair queue: how a lane shares its stream among its tenants.
//
// A lane keeps at most Config.StreamDepth of one tenant's submissions
// enqueued on its stream (a tenant alone on the lane is exempt). The batches it receives beyond that wait here, one queue per
// tenant in the order the lane received them (so a tenant's order holds),
// and the lane takes the next by deficit round robin: each visit gives a
// tenant Config.Quantum entries of credit per unit of its weight, and the
// tenant's oldest batches go while their entries fit its credit. A tenant
// with many batches, or large ones, waits for its turn behind tenants with
// few, and a light tenant's batch waits for at most one round of the
// others' work plus what the stream already holds.

package actors

import "slices"

// work is what a lane's fair queue holds: a batch (*submitRequest) or a
// staged replay (*stagedRequest).
type work interface {
	owner() string // the tenant
	cost() int     // what it takes of the tenant's credit
	share() int    // the tenant's weight
}

func (m *submitRequest) owner() string { return m.Tenant }

// cost is a batch's commands (an invocation counts its segment's; see
// Scheduler.checkSize).
func (m *submitRequest) cost() int  { return max(1, m.commands, len(m.Batch.Entries)) }
func (m *submitRequest) share() int { return m.weight }

func (m *stagedRequest) owner() string { return m.tenant }

// cost is a staged replay's inputs in 64 KiB units (about an eager
// launch's time each on an H200), and one for its program.
func (m *stagedRequest) cost() int {
	n := 0
	for _, in := range m.Inputs {
		n += len(in)
	}
	return 1 + n>>16
}
func (m *stagedRequest) share() int { return m.weight }

// fairQueue is a lane's waiting work, per tenant.
type fairQueue struct {
	quantum int
	queues  map[string]*tenantQueue
	ring    []*tenantQueue // tenants with waiting batches, in visiting order
	next    int            // the ring position visited next
	n       int            // waiting batches
}

// tenantQueue is one tenant's waiting batches and its credit.
type tenantQueue struct {
	name     string
	weight   int
	items    []work
	head     int
	deficit  int
	credited bool // this visit's credit was given
}

// len is the number of waiting batches.
func (q *fairQueue) len() int { return q.n }

// has reports whether a tenant has work waiting.
func (q *fairQueue) has(tenant string) bool { return q.queues[tenant] != nil }

// push queues work behind its tenant's earlier work.
func (q *fairQueue) push(m work) {
	if q.queues == nil {
		q.queues = map[string]*tenantQueue{}
	}
	t := q.queues[m.owner()]
	if t == nil {
		t = &tenantQueue{name: m.owner(), weight: max(1, m.share())}
		q.queues[m.owner()] = t
		q.ring = append(q.ring, t)
	}
	t.items = append(t.items, m)
	q.n++
}

// pop takes the next work by deficit round robin, or nil when none waits.
func (q *fairQueue) pop() work { return q.popFor(nil) }

// popFor takes the next work by deficit round robin among the tenants
// ready says may go now (nil: all), or nil when none of them waits. A
// tenant that may not go keeps its place and its credit.
func (q *fairQueue) popFor(ready func(tenant string) bool) work {
	if q.n == 0 {
		return nil
	}
	for skipped := 0; ; {
		if q.next >= len(q.ring) {
			q.next = 0
		}
		t := q.ring[q.next]
		if ready != nil && !ready(t.name) {
			if skipped++; skipped >= len(q.ring) {
				return nil
			}
			q.next++
			continue
		}
		skipped = 0
		if !t.credited {
			t.credited = true
			t.deficit += t.weight * max(q.quantum, 1)
		}
		m := t.items[t.head]
		if c := m.cost(); c <= t.deficit {
			t.deficit -= c
			q.take(t)
			return m
		}
		// Not enough credit for its next batch: the next tenant's turn.
		t.credited = false
		q.next++
	}
}

// take removes a tenant's oldest batch; a tenant left with none leaves
// the ring and forgets its credit.
func (q *fairQueue) take(t *tenantQueue) {
	t.items[t.head] = nil
	t.head++
	q.n--
	if t.head < len(t.items) {
		return
	}
	delete(q.queues, t.name)
	last := len(q.ring) - 1
	copy(q.ring[q.next:], q.ring[q.next+1:])
	q.ring[last] = nil
	q.ring = q.ring[:last]
}

// remove takes the first waiting work that match says is it, wherever it
// waits, or returns nil; the rest keep their order, and their tenants their
// credit (a tenant left with nothing waiting leaves the ring, as in take).
func (q *fairQueue) remove(match func(work) bool) work {
	for i, t := range q.ring {
		for j := t.head; j < len(t.items); j++ {
			if !match(t.items[j]) {
				continue
			}
			m := t.items[j]
			copy(t.items[j:], t.items[j+1:])
			t.items[len(t.items)-1] = nil
			t.items = t.items[:len(t.items)-1]
			q.n--
			if t.head == len(t.items) {
				delete(q.queues, t.name)
				q.ring = slices.Delete(q.ring, i, i+1)
				if q.next > i {
					q.next--
				}
			}
			return m
		}
	}
	return nil
}

// drain takes all waiting work, each tenant's in order.
func (q *fairQueue) drain() []work {
	all := make([]work, 0, q.n)
	for _, t := range q.ring {
		all = append(all, t.items[t.head:]...)
	}
	clear(q.queues)
	clear(q.ring)
	q.ring, q.next, q.n = q.ring[:0], 0, 0
	return all
}
