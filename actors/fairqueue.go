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

// fairQueue is a lane's waiting work, per tenant. Its tenants with work
// waiting form a ring in visiting order, linked through their queues, so
// that a tenant joins and leaves it in constant time however many wait.
type fairQueue struct {
	quantum int
	queues  map[string]*tenantQueue
	first   *tenantQueue // the ring's first tenant (nil: none waits)
	cur     *tenantQueue // the tenant visited next (nil: first)
	size    int          // tenants in the ring
	n       int          // waiting batches
}

// tenantQueue is one tenant's waiting batches and its credit.
type tenantQueue struct {
	name       string
	weight     int
	items      []work
	head       int
	deficit    int
	credited   bool         // this visit's credit was given
	prev, next *tenantQueue // the ring's neighbours
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
		q.join(t)
	}
	t.items = append(t.items, m)
	q.n++
}

// join adds a tenant at the ring's end (just before its first).
func (q *fairQueue) join(t *tenantQueue) {
	if q.first == nil {
		t.prev, t.next = t, t
		q.first = t
	} else {
		last := q.first.prev
		t.prev, t.next = last, q.first
		last.next, q.first.prev = t, t
	}
	q.size++
}

// leave takes a tenant out of the ring; the tenant after it is visited
// next if it was.
func (q *fairQueue) leave(t *tenantQueue) {
	delete(q.queues, t.name)
	q.size--
	if q.size == 0 {
		q.first, q.cur = nil, nil
	} else {
		t.prev.next, t.next.prev = t.next, t.prev
		if q.cur == t {
			q.cur = t.next
			if q.cur == q.first {
				q.cur = nil // t was the last: the next visit starts the ring over
			}
		}
		if q.first == t {
			q.first = t.next
		}
	}
	t.prev, t.next = nil, nil
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
		if q.cur == nil {
			q.cur = q.first
		}
		t := q.cur
		if ready != nil && !ready(t.name) {
			if skipped++; skipped >= q.size {
				return nil
			}
			q.advance()
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
		q.advance()
	}
}

// advance moves the visit to the next tenant of the ring (past the last:
// the first again).
func (q *fairQueue) advance() {
	if q.cur = q.cur.next; q.cur == q.first {
		q.cur = nil
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
	q.leave(t)
}

// remove takes the first waiting work that match says is it, wherever it
// waits, or returns nil; the rest keep their order, and their tenants their
// credit (a tenant left with nothing waiting leaves the ring, as in take).
func (q *fairQueue) remove(match func(work) bool) work {
	for t, i := q.first, 0; i < q.size; t, i = t.next, i+1 {
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
				q.leave(t)
			}
			return m
		}
	}
	return nil
}

// drain takes all waiting work, each tenant's in order.
func (q *fairQueue) drain() []work {
	all := make([]work, 0, q.n)
	for t, i := q.first, 0; i < q.size; t, i = t.next, i+1 {
		all = append(all, t.items[t.head:]...)
	}
	clear(q.queues)
	q.first, q.cur, q.size, q.n = nil, nil, 0, 0
	return all
}
