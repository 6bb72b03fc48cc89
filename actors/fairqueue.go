package actors

// The lane's fair queue: how a lane shares its stream among its tenants.
//
// A lane keeps at most Config.StreamDepth submissions enqueued on its
// stream. The batches it receives beyond that wait here, one queue per
// tenant in the order the lane received them (so a tenant's order holds),
// and the lane takes the next by deficit round robin: each visit gives a
// tenant Config.Quantum entries of credit per unit of its weight, and the
// tenant's oldest batches go while their entries fit its credit. A tenant
// with many batches, or large ones, waits for its turn behind tenants with
// few, and a light tenant's batch waits for at most one round of the
// others' work plus what the stream already holds.

// fairQueue is a lane's waiting batches, per tenant.
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
	items    []*SubmitRequest
	head     int
	deficit  int
	credited bool // this visit's credit was given
}

// cost is what a batch takes of its tenant's credit: its entries.
func cost(m *SubmitRequest) int { return max(1, len(m.Batch.Entries)) }

// len is the number of waiting batches.
func (q *fairQueue) len() int { return q.n }

// push queues a batch behind its tenant's earlier ones.
func (q *fairQueue) push(m *SubmitRequest) {
	if q.queues == nil {
		q.queues = map[string]*tenantQueue{}
	}
	t := q.queues[m.Tenant]
	if t == nil {
		t = &tenantQueue{name: m.Tenant, weight: max(1, m.weight)}
		q.queues[m.Tenant] = t
		q.ring = append(q.ring, t)
	}
	t.items = append(t.items, m)
	q.n++
}

// pop takes the next batch by deficit round robin, or nil when none waits.
func (q *fairQueue) pop() *SubmitRequest {
	if q.n == 0 {
		return nil
	}
	for {
		if q.next >= len(q.ring) {
			q.next = 0
		}
		t := q.ring[q.next]
		if !t.credited {
			t.credited = true
			t.deficit += t.weight * max(q.quantum, 1)
		}
		m := t.items[t.head]
		if c := cost(m); c <= t.deficit {
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

// drain takes every waiting batch, each tenant's in order.
func (q *fairQueue) drain() []*SubmitRequest {
	all := make([]*SubmitRequest, 0, q.n)
	for _, t := range q.ring {
		all = append(all, t.items[t.head:]...)
	}
	clear(q.queues)
	clear(q.ring)
	q.ring, q.next, q.n = q.ring[:0], 0, 0
	return all
}
