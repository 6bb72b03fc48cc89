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
// nor the reverse, and Stats says what was dropped and why.
type pipeline struct {
	exp     sdktrace.SpanExporter
	queue   chan []sdktrace.ReadOnlySpan
	flushes chan chan struct{}
	done    chan struct{}
	limit   int64 // spans queued at most
	timeout time.Duration
	batch   int
	onError func(error)

	mu      sync.Mutex
	pending []sdktrace.ReadOnlySpan // ended, not yet committed

	queued        atomic.Int64 // spans in queue
	failing       atomic.Bool  // the last export failed
	closing       atomic.Bool  // Shutdown began
	exported      atomic.Uint64
	droppedFull   atomic.Uint64
	droppedExport atomic.Uint64
	exportErrors  atomic.Uint64
	lastError     atomic.Pointer[string]
}

func newPipeline(exp sdktrace.SpanExporter, c Config) *pipeline {
	p := &pipeline{exp: exp, queue: make(chan []sdktrace.ReadOnlySpan, c.QueueSpans), flushes: make(chan chan struct{}),
		done: make(chan struct{}), limit: int64(c.QueueSpans), timeout: c.ExportTimeout, batch: c.BatchSpans, onError: c.OnError}
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

// commit queues the spans ended since the last commit as one group, or
// drops and counts them when the queue would hold more than its limit.
func (p *pipeline) commit() {
	p.mu.Lock()
	group := p.pending
	p.pending = nil
	p.mu.Unlock()
	if len(group) == 0 {
		return
	}
	n := int64(len(group))
	if p.queued.Add(n) > p.limit {
		p.queued.Add(-n)
		p.droppedFull.Add(uint64(n))
		return
	}
	select {
	case p.queue <- group:
	default:
		p.queued.Add(-n)
		p.droppedFull.Add(uint64(n))
	}
}

// run batches groups and exports them until the queue closes.
func (p *pipeline) run() {
	defer close(p.done)
	var batch []sdktrace.ReadOnlySpan
	timer := time.NewTimer(lingerTime)
	timer.Stop()
	send := func() {
		if len(batch) > 0 {
			p.export(batch)
			batch = batch[:0:0]
		}
	}
	add := func(g []sdktrace.ReadOnlySpan) {
		p.queued.Add(-int64(len(g)))
		if len(batch) > 0 && len(batch)+len(g) > p.batch {
			send()
		}
		if len(batch) == 0 {
			timer.Reset(lingerTime)
		}
		batch = append(batch, g...)
		if len(batch) >= p.batch {
			send()
		}
	}
	for {
		select {
		case g, ok := <-p.queue:
			if !ok {
				send()
				return
			}
			add(g)
		case <-timer.C:
			send()
		case done := <-p.flushes:
			for len(p.queue) > 0 {
				add(<-p.queue)
			}
			send()
			close(done)
		}
	}
}

// export sends one batch, counting it as exported or dropped. Once
// shutting down after a failed export, it drops without trying: a
// collector that is not there does not hold the exit for a timeout per
// batch.
func (p *pipeline) export(batch []sdktrace.ReadOnlySpan) {
	if p.closing.Load() && p.failing.Load() {
		p.droppedExport.Add(uint64(len(batch)))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.timeout+time.Second)
	defer cancel()
	if err := p.exp.ExportSpans(ctx, batch); err != nil {
		p.droppedExport.Add(uint64(len(batch)))
		p.failing.Store(true)
		p.failed(fmt.Errorf("telemetry: export of %d spans failed: %w", len(batch), err))
		return
	}
	p.failing.Store(false)
	p.exported.Add(uint64(len(batch)))
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
	p.commit()
	p.closing.Store(true)
	close(p.queue)
	select {
	case <-p.done:
	case <-ctx.Done():
		// What is still queued will not be exported: count it.
		n := max(p.queued.Swap(0), 0)
		p.droppedExport.Add(uint64(n))
		p.failed(fmt.Errorf("telemetry: %d spans still queued when shutdown's deadline passed (%w): is the collector there?", n, ctx.Err()))
		return ctx.Err()
	}
	return p.exp.Shutdown(ctx)
}
