// Recording: a submission becomes a lanes.submit span whose children show
// where its time went; a refusal a lanes.submit span of its own; a
// quarantine a span linked to the submissions that failed the lane.

package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/lanes"
)

// item is one piece of work for the recording goroutine.
type item struct {
	sub        recording.Submission // when isSub
	isSub      bool
	refusals   int    // refusals summarised into sub (0 and 1: sub alone)
	seq        uint64 // its place in the order things were handed over
	quarantine *recording.Quarantine
}

// handSubmission hands one ended or refused submission to the recorder. It
// never blocks: when the recorder is behind by 8192 items, the tenant
// with the most waiting loses its oldest (or this one, if it is that
// tenant's), counted (Stats.Behind, Stats.ByTenant).
func (t *Recorder) handSubmission(_ context.Context, s recording.Submission) {
	if t != nil {
		t.hand(item{sub: s, isSub: true})
	}
}

// handQuarantine hands a lane's quarantine to the recorder (never
// blocking, as handSubmission).
func (t *Recorder) handQuarantine(_ context.Context, q recording.Quarantine) {
	if t != nil {
		if q.At.IsZero() {
			q.At = time.Now()
		}
		t.hand(item{quarantine: &q})
	}
}

// quarantineWait is how long a quarantine waits for the failed submission
// it is linked to: a lane can leave routing before its caller's
// submission ends.
const quarantineWait = time.Second

func (t *Recorder) recordItem(it item) {
	switch {
	case it.isSub:
		t.submission(it.sub, max(it.refusals, 1))
		if q, ok := t.waitingQ[it.sub.Lane]; ok && it.sub.Err != nil {
			delete(t.waitingQ, it.sub.Lane)
			t.quarantined(q)
		}
	case it.quarantine != nil:
		q := *it.quarantine
		if len(t.failing[q.Lane]) == 0 && t.pipe != nil {
			if old, ok := t.waitingQ[q.Lane]; ok {
				t.quarantined(old)
			}
			t.waitingQ[q.Lane] = q
		} else {
			t.quarantined(q)
		}
	}
	t.settle(false)
}

// settle records the quarantines that waited long enough for their
// submission (all of them when all is set).
func (t *Recorder) settle(all bool) {
	for lane, q := range t.waitingQ {
		if all || time.Since(q.At) > quarantineWait {
			delete(t.waitingQ, lane)
			t.quarantined(q)
		}
	}
}

// outcome names how a submission ended.
func outcome(s *recording.Submission) string {
	switch {
	case s.Err == nil:
		return "succeeded"
	case s.Receipt.Outcome == lanes.OutcomeIndeterminate:
		return "indeterminate"
	}
	return "refused"
}

// byDesign are the reasons a compute command runs eagerly because the
// batch asked for it (no key, an eager path or boundary): no fallback.
var byDesign = map[cache.Reason]bool{cache.ReasonProviderKeyMissing: true, cache.ReasonEagerPath: true, cache.ReasonEagerBoundary: true}

// keep decides whether a submission gets spans: every failure,
// fallback and cache event, what the caller's sampled span asks for, and
// successes by Config.SuccessRatio.
func (t *Recorder) keep(s *recording.Submission, fallbacks int) bool {
	if s.Err != nil || fallbacks > 0 || len(s.Receipt.Attribution.Events) > 0 {
		return true
	}
	if s.Parent.IsValid() && !t.cfg.LinkParent {
		return s.Parent.IsSampled()
	}
	t.sampleAt += t.cfg.SuccessRatio
	if t.sampleAt >= 1 {
		t.sampleAt--
		return true
	}
	return false
}

// submission records one submission, or refusals summarised into one
// (n of them, refused alike): every one counted in the metrics, one span.
func (t *Recorder) submission(s recording.Submission, n int) {
	r := s.Receipt
	out := outcome(&s)
	replayed, eager, fallbacks := len(r.Attribution.Segments), 0, 0
	for _, row := range r.Attribution.Rows {
		if !row.Replayed {
			eager++
			if row.Phase == cache.PhaseCompute {
				if !byDesign[row.Reason] {
					fallbacks++
				}
				t.m.gaps.Add(context.Background(), 1, t.attrs(attrKey{reason: row.Reason, lane: noLane}).add...)
			}
		}
	}
	t.count(&s, out, replayed, eager, n)
	t.recorded.Add(uint64(n))
	if t.pipe == nil {
		return
	}
	if !t.keep(&s, fallbacks) {
		t.sampledOut.Add(1)
		return
	}
	t.traced.Add(1)
	attrs := []attribute.KeyValue{
		attribute.String("lanes.tenant", label(s.Tenant)), attribute.Int("lanes.lane.id", s.Lane),
		attribute.Int("lanes.device.ordinal", s.Device), attribute.String("lanes.device.name", s.DeviceName),
		attribute.Int("lanes.batch.entries", s.Entries), attribute.String("lanes.compute_path", s.Path.String()),
		attribute.String("lanes.timing_mode", s.Timing.String()), attribute.Int("lanes.replayed_segments", replayed),
		attribute.Int("lanes.eager_commands", eager), attribute.String("lanes.outcome", out),
	}
	if r.DeviceTime > 0 {
		attrs = append(attrs, attribute.Float64("lanes.device.time", r.DeviceTime.Seconds()))
	}
	if n > 1 {
		attrs = append(attrs, attribute.Int("lanes.refusals", n))
	}
	ctx, opts := context.Background(), []trace.SpanStartOption{trace.WithTimestamp(s.Start), trace.WithSpanKind(trace.SpanKindInternal)}
	if s.Parent.IsValid() {
		if t.cfg.LinkParent {
			opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: s.Parent}))
		} else {
			ctx = trace.ContextWithRemoteSpanContext(ctx, s.Parent)
		}
	}
	ctx, span := t.tracer.Start(ctx, "lanes.submit", append(opts, trace.WithAttributes(attrs...))...)
	if s.Err != nil {
		c := cuda.Classify(s.Err)
		span.SetAttributes(semconv.ErrorTypeKey.String(c.Code.String()), attribute.String("lanes.error.blame", c.Blame.String()))
		span.SetStatus(codes.Error, s.Err.Error())
		if s.Lane >= 0 {
			links := append(t.failing[s.Lane], trace.Link{SpanContext: span.SpanContext()})
			t.failing[s.Lane] = links[max(0, len(links)-8):]
		}
	}
	at := s.Enqueued
	if at.IsZero() {
		at = s.Start
	}
	for _, ev := range r.Attribution.Events {
		ea := []attribute.KeyValue{attribute.String("lanes.segment.fingerprint", ev.Key)}
		if ev.Detail != "" {
			ea = append(ea, attribute.String("lanes.reason", ev.Detail))
		}
		span.AddEvent("lanes."+ev.Kind, trace.WithTimestamp(at), trace.WithAttributes(ea...))
	}
	t.preparation(ctx, &s)
	t.stages(ctx, &s)
	t.children(ctx, &s)
	span.End(trace.WithTimestamp(s.End))
	t.pipe.commit(s.Tenant, false)
}

// count records a submission's metrics (every submission's, traced or
// not).
func (t *Recorder) count(s *recording.Submission, out string, replayed, eager, n int) {
	ctx := context.Background()
	tenant := t.names.of(s.Tenant)
	t.m.submissions.Add(ctx, int64(n), t.attrs(attrKey{outcome: out, tenant: tenant, lane: s.Lane}).add...)
	if s.Lane < 0 {
		return
	}
	byLane := t.attrs(attrKey{lane: s.Lane})
	t.m.replayed.Add(ctx, int64(replayed), byLane.add...)
	t.m.eager.Add(ctx, int64(eager), byLane.add...)
	for _, ev := range s.Receipt.Attribution.Events {
		t.m.cacheEvents.Add(ctx, 1, t.attrs(attrKey{event: ev.Kind, lane: s.Lane}).add...)
		switch ev.Kind {
		case "updated":
			t.m.graphUpdates.Add(ctx, 1, t.attrs(attrKey{how: ev.Reason, lane: s.Lane}).add...)
		case "rebind_refused":
			t.m.rebindRefusals.Add(ctx, 1, t.attrs(attrKey{refusal: ev.Reason, lane: s.Lane}).add...)
		}
	}
	for _, tm := range s.Receipt.Attribution.Preparation {
		t.m.prepareTime.Record(ctx, tm.Took.Seconds(), t.attrs(attrKey{stage: tm.Stage.String(), lane: s.Lane}).record...)
	}
	t.m.fenceLatency.Record(ctx, s.End.Sub(s.Start).Seconds(), t.attrs(attrKey{tenant: tenant, lane: s.Lane}).record...)
	if d := s.Receipt.DeviceTime; d > 0 {
		t.m.deviceTime.Record(ctx, d.Seconds(), byLane.record...)
	}
}

// stages records the host's part of a submission's time: waiting for its
// lane (admission, mailbox and the lane's fair queue), then planning and
// enqueueing its work, and, when device events timed it, the wait between
// the device finishing and the fence being seen.
func (t *Recorder) stages(ctx context.Context, s *recording.Submission) {
	span := func(name string, from, to time.Time, attrs ...attribute.KeyValue) {
		if from.IsZero() || to.Before(from) {
			return
		}
		_, sp := t.tracer.Start(ctx, name, trace.WithTimestamp(from), trace.WithAttributes(attrs...))
		sp.End(trace.WithTimestamp(to))
	}
	span("lanes.queue", s.Start, s.Taken)
	span("lanes.enqueue", s.Taken, s.Enqueued)
	if r := s.Receipt; r.HostTimed && r.DeviceTime > 0 {
		span("lanes.fence_wait", s.Anchor.Add(r.HostStart+r.DeviceTime), s.End)
	}
}

// children records the replayed segments and timed eager commands: at
// device time when events timed them, else across the interval in which
// the device ran them (enqueued to receipt), marked untimed.
func (t *Recorder) children(ctx context.Context, s *recording.Submission) {
	r := s.Receipt
	timed := map[[2]int]lanes.SpanTiming{}
	for _, st := range r.Spans {
		key := [2]int{st.Index, 0}
		if st.Segment {
			key[1] = 1
		}
		timed[key] = st
	}
	from := s.Enqueued
	if from.IsZero() {
		from = s.Start
	}
	start := func(name string, key [2]int, attrs ...attribute.KeyValue) {
		st, ok := timed[key]
		b, e, how := from, s.End, "unavailable"
		if ok && r.HostTimed {
			b = s.Anchor.Add(r.HostStart + st.Offset)
			e, how = b.Add(st.Duration), "events"
		}
		_, sp := t.tracer.Start(ctx, name, trace.WithTimestamp(b), trace.WithAttributes(append(attrs, attribute.String("lanes.device_timing", how))...))
		if s.Err != nil && how == "unavailable" {
			sp.SetStatus(codes.Error, "the submission failed; this work's own end is unknown")
		}
		sp.End(trace.WithTimestamp(e))
	}
	for i, seg := range r.Attribution.Segments {
		attrs := []attribute.KeyValue{
			attribute.String("lanes.segment.fingerprint", seg.Fingerprint),
			attribute.Int("lanes.segment.entry_start", seg.Start), attribute.Int("lanes.segment.entry_end", seg.End),
			attribute.Int("lanes.segment.logical_commands", seg.Commands), attribute.Int("lanes.segment.graph_nodes", seg.GraphNodes),
		}
		if seg.Program != nil {
			attrs = append(attrs, attribute.String("lanes.program.id", seg.Program.String()), attribute.Int("lanes.segment.ordinal", seg.Ordinal))
		}
		if i < len(s.SegmentNodes) && s.SegmentNodes[i][0] >= 0 {
			attrs = append(attrs, attribute.Int("lanes.segment.node_start", s.SegmentNodes[i][0]), attribute.Int("lanes.segment.node_end", s.SegmentNodes[i][1]))
		}
		start("lanes.replay", [2]int{i, 1}, attrs...)
	}
	for _, st := range r.Spans {
		if st.Segment || st.Index >= len(r.Attribution.Rows) {
			continue
		}
		var row lanes.Row // rows are in entry order: row i is entry i
		if rows := r.Attribution.Rows; rows[st.Index].Index == st.Index {
			row = rows[st.Index]
		}
		start("lanes.eager", [2]int{st.Index, 0}, attribute.Int("lanes.command.index", st.Index),
			attribute.String("lanes.command.op", row.Op), attribute.String("lanes.command.reason", row.Reason.String()))
	}
}

// quarantined records a lane leaving routing, linked to the submissions
// that failed on it since its last quarantine.
func (t *Recorder) quarantined(q recording.Quarantine) {
	c := cuda.Classify(q.Cause)
	reason := "unknown"
	if q.Cause != nil {
		reason = q.Cause.Error()
	}
	attrs := []attribute.KeyValue{attribute.Int("lanes.lane.id", q.Lane), attribute.Int("lanes.device.ordinal", q.Device),
		attribute.String("lanes.device.name", q.DeviceName), semconv.ErrorTypeKey.String(c.Code.String()),
		attribute.String("lanes.error.blame", c.Blame.String())}
	t.m.quarantines.Add(context.Background(), 1, metric.WithAttributes(attrs[0], attrs[3]))
	if t.pipe == nil {
		return
	}
	_, sp := t.tracer.Start(context.Background(), "lanes.lane.quarantine", trace.WithTimestamp(q.At),
		trace.WithAttributes(attrs...), trace.WithLinks(t.failing[q.Lane]...))
	delete(t.failing, q.Lane)
	sp.AddEvent("lanes.quarantined", trace.WithTimestamp(q.At), trace.WithAttributes(attribute.String("lanes.reason", reason)))
	sp.SetStatus(codes.Error, reason)
	sp.End(trace.WithTimestamp(q.At))
	t.pipe.commit("", true)
}

// preparation records each capture, instantiation, upload, update and
// rebind the submission's preparation made as a child span
// "lanes.prepare" with its stage and node count, laid end to end from
// when the lane took the batch (the lane times each step, not where it
// began; they ran one after another, after validation and discovery).
func (t *Recorder) preparation(ctx context.Context, s *recording.Submission) {
	at := s.Taken
	if at.IsZero() {
		return
	}
	for _, tm := range s.Receipt.Attribution.Preparation {
		_, span := t.tracer.Start(ctx, "lanes.prepare", trace.WithTimestamp(at), trace.WithAttributes(
			attribute.String("lanes.stage", tm.Stage.String()), attribute.Int("lanes.graph.nodes", tm.Nodes)))
		at = at.Add(tm.Took)
		span.End(trace.WithTimestamp(at))
	}
}
