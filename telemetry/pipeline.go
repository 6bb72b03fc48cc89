// The span pipeline: a submission's spans leave together or not at all,
// and every span that does not leave is counted.

package telemetry

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// lingerTime is how long a batch waits to fill.
const lingerTime = 100 * time.Millisecond

// pipeline is the tracer provider's span processor. The recorder ends a
// submission's spans (children, then the root) and then commits them: the
// group is queued whole, or dropped whole when the queue is full, and an
// export sends whole groups. So no parent leaves without its children,
// nor the reverse, and Stats says what was dropped and why. The queue is
// kept per tenant and exported in turns, lane quarantines first: when it
// is full, the tenant holding the most of it loses its oldest groups (or
// the new one, if it is that tenant's), so a flood's spans go before a
// quiet tenant's, and a quarantine's never for a tenant's.
type pipeline struct {
	exp     sdktrace.SpanExporter
	flushes chan chan struct{}
	done    chan struct{}
	wake    chan struct{} // a token: a group was queued, or Shutdown began
	limit   int           // spans queued at most
	timeout time.Duration
	batch   int
	onError func(error)
	drops   *dropCounts

	mu      sync.Mutex
	pending []sdktrace.ReadOnlySpan // ended, not yet committed
	queue   spanQueue

	failing       atomic.Bool // the last export failed
	stuck         atomic.Bool // an export has not returned past its deadline
	closing       atomic.Bool // Shutdown began
	exported      atomic.Uint64
	droppedFull   atomic.Uint64
	droppedExport atomic.Uint64
	exportErrors  atomic.Uint64
	lastError     atomic.Pointer[string]
}

// group is one committed submission's (or quarantine's) spans.
type group struct {
	tenant string // "" for a lane quarantine
	spans  []sdktrace.ReadOnlySpan
	seq    uint64 // its place in the order of commits
}

// spanQueue is the groups waiting for export: lane quarantines, and each
// tenant's groups oldest first, taken in turns. Guarded by pipeline.mu.
type spanQueue struct {
	quarantines []group
	tenants     map[string]*tenantGroups
	turns       []*tenantGroups
	turn        int
	spans       int
	seq         uint64 // of the last group committed
}

// tenantGroups is one tenant's queued groups.
type tenantGroups struct {
	tenant string
	groups []group
	spans  int
}

func newPipeline(exp sdktrace.SpanExporter, c Config, drops *dropCounts) *pipeline {
	p := &pipeline{exp: exp, flushes: make(chan chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1),
		limit: c.QueueSpans, timeout: c.ExportTimeout, batch: c.BatchSpans, onError: c.OnError, drops: drops,
		queue: spanQueue{tenants: map[string]*tenantGroups{}}}
	go p.run()
	return p
}

// OnStart is part of sdktrace.SpanProcessor.
func (p *pipeline) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd holds an ended span until its group is committed.
func (p *pipeline) OnEnd(s sdktrace.ReadOnlySpan) {
	p.mu.Lock()
	p.pending = append(p.pending, s)
	p.mu.Unlock()
}

// commit queues the spans ended since the last commit as one group of the
// tenant's ("" and quarantine set: a lane quarantine's), making room by
// dropping the largest tenant's oldest groups, or drops and counts the
// group when the tenant is the largest itself (or it fits nowhere). A nil
// pipeline commits nothing.
func (p *pipeline) commit(tenant string, quarantine bool) {
	if p == nil {
		return
	}
	p.mu.Lock()
	g := group{tenant: tenant, spans: p.pending}
	p.pending = nil
	if len(g.spans) == 0 {
		p.mu.Unlock()
		return
	}
	q := &p.queue
	n := len(g.spans)
	if n > p.limit {
		p.mu.Unlock()
		p.dropFull(g) // fits nowhere: empty no one else's turn for it
		return
	}
	mine, held := q.tenants[tenant], 0
	if mine != nil {
		held = mine.spans
	}
	q.seq++
	g.seq = q.seq
	for q.spans+n > p.limit {
		// Room is made from the tenant holding the most, unless that would
		// leave the new group's tenant holding as much: then the new group
		// is the one dropped. A quarantine takes room from any tenant.
		big := q.largest()
		if big == nil || (!quarantine && (big == mine || big.spans <= held+n)) {
			p.mu.Unlock()
			p.dropFull(g)
			return
		}
		p.dropFull(q.evictOldest(big))
	}
	if quarantine {
		g.tenant = ""
		q.quarantines = append(q.quarantines, g)
	} else {
		if mine == nil {
			mine = &tenantGroups{tenant: tenant}
			q.tenants[tenant] = mine
			q.turns = append(q.turns, mine)
		}
		mine.groups = append(mine.groups, g)
		mine.spans += n
	}
	q.spans += n
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// dropFull counts a group dropped from a full queue, as its tenant's.
func (p *pipeline) dropFull(g group) {
	n := uint64(len(g.spans))
	p.droppedFull.Add(n)
	p.drops.add(g.tenant, func(d *TenantDrops) { d.SpansQueueFull += n })
}

// largest is the tenant holding the most queued spans; of those that hold
// as many, the one whose oldest group came last (nil: none).
func (q *spanQueue) largest() *tenantGroups {
	var big *tenantGroups
	for _, tg := range q.turns {
		if big == nil || tg.spans > big.spans || (tg.spans == big.spans && tg.groups[0].seq > big.groups[0].seq) {
			big = tg
		}
	}
	return big
}

// evictOldest removes a tenant's oldest group.
func (q *spanQueue) evictOldest(tg *tenantGroups) group {
	g := tg.groups[0]
	tg.groups[0] = group{}
	tg.groups = tg.groups[1:]
	tg.spans -= len(g.spans)
	q.spans -= len(g.spans)
	q.forgetEmpty(tg)
	return g
}

// forgetEmpty removes a tenant with nothing queued from the turns.
func (q *spanQueue) forgetEmpty(tg *tenantGroups) {
	if len(tg.groups) > 0 {
		return
	}
	delete(q.tenants, tg.tenant)
	for i, t := range q.turns {
		if t == tg {
			q.turns = append(q.turns[:i], q.turns[i+1:]...)
			if q.turn > i {
				q.turn--
			}
			return
		}
	}
}

// next takes the next group to export: a quarantine's, else the next
// tenant's oldest in turn; ok is false when the queue is empty.
func (q *spanQueue) next() (group, bool) {
	if len(q.quarantines) > 0 {
		g := q.quarantines[0]
		q.quarantines[0] = group{}
		q.quarantines = q.quarantines[1:]
		q.spans -= len(g.spans)
		return g, true
	}
	if len(q.turns) == 0 {
		return group{}, false
	}
	if q.turn >= len(q.turns) {
		q.turn = 0
	}
	tg := q.turns[q.turn]
	q.turn++
	return q.evictOldest(tg), true
}

// take moves the next queued group out of the queue.
func (p *pipeline) take() (group, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queue.next()
}

// run batches groups and exports them until Shutdown, then exports what
// is left.
func (p *pipeline) run() {
	defer close(p.done)
	var batch []group
	spans := 0
	timer := time.NewTimer(lingerTime)
	timer.Stop()
	send := func() {
		if spans > 0 {
			p.export(batch, spans)
			batch, spans = nil, 0
		}
	}
	// fill takes queued groups into the batch, sending each time it is
	// full; a batch left part full waits lingerTime for more.
	fill := func() {
		for g, ok := p.take(); ok; g, ok = p.take() {
			if spans > 0 && spans+len(g.spans) > p.batch {
				send()
			}
			if spans == 0 {
				timer.Reset(lingerTime)
			}
			batch, spans = append(batch, g), spans+len(g.spans)
			if spans >= p.batch {
				send()
			}
		}
	}
	for {
		select {
		case <-p.wake:
			fill()
			if p.closing.Load() {
				fill()
				send()
				return
			}
		case <-timer.C:
			send()
		case done := <-p.flushes:
			fill()
			send()
			close(done)
		}
	}
}

// export sends one batch, counting it as exported or dropped (each
// group's spans as its tenant's). Once shutting down after a failed
// export, it drops without trying: a collector that is not there does not
// hold the exit for a timeout per batch.
func (p *pipeline) export(batch []group, n int) {
	dropped := func() {
		p.droppedExport.Add(uint64(n))
		for _, g := range batch {
			k := uint64(len(g.spans))
			p.drops.add(g.tenant, func(d *TenantDrops) { d.SpansExport += k })
		}
	}
	if p.closing.Load() && p.failing.Load() {
		dropped()
		return
	}
	spans := make([]sdktrace.ReadOnlySpan, 0, n)
	for _, g := range batch {
		spans = append(spans, g.spans...)
	}
	if p.stuck.Load() {
		dropped() // the exporter has not returned from an earlier export
		p.failing.Store(true)
		p.failed(fmt.Errorf("telemetry: export of %d spans dropped: the exporter has not returned from an export %v past its deadline", n, p.timeout))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout+time.Second)
	defer cancel()
	// An exporter that ignores its context would hold every later export
	// (and Flush) for as long as it hangs: past the deadline the export
	// has failed, and later ones are dropped, counted, until it returns.
	done := make(chan error, 1)
	go func() { done <- p.exp.ExportSpans(ctx, spans) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(p.timeout + 2*time.Second):
		p.stuck.Store(true)
		go func() { <-done; p.stuck.Store(false) }()
		err = fmt.Errorf("the exporter did not return %v past its deadline (it ignores its context)", 2*time.Second)
	}
	if err != nil {
		dropped()
		p.failing.Store(true)
		p.failed(fmt.Errorf("telemetry: export of %d spans failed: %w", n, err))
		return
	}
	p.failing.Store(false)
	p.exported.Add(uint64(n))
}

// failed counts an export failure and tells Config.OnError.
func (p *pipeline) failed(err error) {
	p.exportErrors.Add(1)
	msg := err.Error()
	p.lastError.Store(&msg)
	if p.onError != nil {
		p.onError(err)
	}
}

// flush exports everything committed so far.
func (p *pipeline) flush(ctx context.Context) error {
	done := make(chan struct{})
	select {
	case p.flushes <- done:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ForceFlush is part of sdktrace.SpanProcessor.
func (p *pipeline) ForceFlush(ctx context.Context) error { return p.flush(ctx) }

// Shutdown exports what is queued and shuts the exporter down.
func (p *pipeline) Shutdown(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	p.commit("", false) // spans ended outside any submission, if any
	p.closing.Store(true)
	select {
	case p.wake <- struct{}{}:
	default:
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		// What is still queued will not be exported: count it.
		n := p.abandon()
		p.failed(fmt.Errorf("telemetry: %d spans still queued when shutdown's deadline passed (%w): is the collector there?", n, ctx.Err()))
		return ctx.Err()
	}
	return p.exp.Shutdown(ctx)
}

// abandon empties the queue, counting its spans as not exported, and
// returns how many there were.
func (p *pipeline) abandon() int {
	p.mu.Lock()
	var gone []group
	for g, ok := p.queue.next(); ok; g, ok = p.queue.next() {
		gone = append(gone, g)
	}
	p.mu.Unlock()
	n := 0
	for _, g := range gone {
		k := uint64(len(g.spans))
		n += len(g.spans)
		p.drops.add(g.tenant, func(d *TenantDrops) { d.SpansExport += k })
	}
	p.droppedExport.Add(uint64(n))
	return n
}
