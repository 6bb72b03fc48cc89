// Recording: a submission becomes a lanes.submit span with a lanes.replay
// child per replayed segment; a quarantine a span of its own.

package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// Submission is one ended submission, as the scheduler hands it over.
type Submission struct {
	Tenant     string
	Lane       int
	Device     int
	DeviceName string
	Entries    int
	Path       lanes.Path
	Timing     lanes.TimingMode
	Start, End time.Time // host: submitted, receipt observed
	// Anchor maps the lane clock's durations (Receipt.HostStart) to host
	// time: the lane clock's origin.
	Anchor  time.Time
	Receipt lanes.Receipt
	Err     error
	Nodes   []int // each entry's plan node, for segments' node ranges; may be nil
}

// Submission hands one ended submission to the recorder, which makes its
// span with a child span per replayed segment and timed eager command, and
// the metrics. It never blocks: when the recorder is behind by 8192
// submissions, this one is dropped and counted (lanes.telemetry.dropped).
func (t *Recorder) Submission(ctx context.Context, s Submission) {
	if t == nil {
		return
	}
	select {
	case t.queue <- s:
	default:
		t.dropped.Add(ctx, 1)
	}
}

func (t *Recorder) submission(ctx context.Context, s Submission) {
	r := s.Receipt
	outcome := "succeeded"
	switch {
	case s.Err != nil && r.Outcome == lanes.OutcomeIndeterminate:
		outcome = "indeterminate"
	case s.Err != nil:
		outcome = "refused"
	}
	replayed, eager := len(r.Attribution.Segments), 0
	gaps := map[string]int64{}
	for _, row := range r.Attribution.Rows {
		if !row.Replayed {
			eager++
			if row.Phase == cache.PhaseCompute {
				gaps[row.Reason.String()]++
			}
		}
	}
	attrs := []attribute.KeyValue{
		attribute.String("lanes.tenant", s.Tenant), attribute.Int("lanes.lane.id", s.Lane),
		attribute.Int("lanes.device.ordinal", s.Device), attribute.String("lanes.device.name", s.DeviceName),
		attribute.Int("lanes.batch.entries", s.Entries), attribute.String("lanes.compute_path", s.Path.String()),
		attribute.String("lanes.timing_mode", s.Timing.String()), attribute.Int("lanes.replayed_segments", replayed),
		attribute.Int("lanes.eager_commands", eager), attribute.String("lanes.outcome", outcome),
	}
	if r.DeviceTime > 0 {
		attrs = append(attrs, attribute.Int64("lanes.device_time_ns", r.DeviceTime.Nanoseconds()))
	}
	ctx, span := t.tracer.Start(ctx, "lanes.submit", trace.WithTimestamp(s.Start), trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindInternal))
	if s.Err != nil {
		c := cuda.Classify(s.Err)
		span.SetAttributes(attribute.String("lanes.error.code", c.Code.String()), attribute.String("lanes.error.blame", c.Blame.String()))
		span.SetStatus(codes.Error, s.Err.Error())
	}
	for _, ev := range r.Attribution.Events {
		span.AddEvent("lanes."+ev.Kind, trace.WithTimestamp(s.Start), trace.WithAttributes(
			attribute.String("lanes.segment.fingerprint", ev.Key), attribute.String("lanes.reason", ev.Detail)))
		t.m.cacheEvents.Add(ctx, 1, metric.WithAttributes(attribute.String("lanes.event", ev.Kind)))
	}
	t.children(ctx, s)
	span.End(trace.WithTimestamp(s.End))

	t.m.submissions.Add(ctx, 1, metric.WithAttributes(attribute.String("lanes.outcome", outcome)))
	t.m.replayed.Add(ctx, int64(replayed))
	t.m.eager.Add(ctx, int64(eager))
	for reason, n := range gaps {
		t.m.gaps.Add(ctx, n, metric.WithAttributes(attribute.String("lanes.reason", reason)))
	}
	t.m.fenceLatency.Record(ctx, s.End.Sub(s.Start).Seconds())
	if r.DeviceTime > 0 {
		t.m.deviceTime.Record(ctx, r.DeviceTime.Seconds())
	}
}

// children records the replayed segments and timed eager commands.
func (t *Recorder) children(ctx context.Context, s Submission) {
	r := s.Receipt
	timed := map[[2]int]lanes.SpanTiming{}
	for _, st := range r.Spans {
		key := [2]int{st.Index, 0}
		if st.Segment {
			key[1] = 1
		}
		timed[key] = st
	}
	place := func(key [2]int) (time.Time, time.Time, string) {
		st, ok := timed[key]
		if !ok || !r.HostTimed {
			return s.Start, s.End, "unavailable"
		}
		start := s.Anchor.Add(r.HostStart + st.Offset)
		return start, start.Add(st.Duration), "events"
	}
	for i, seg := range r.Attribution.Segments {
		start, end, how := place([2]int{i, 1})
		attrs := []attribute.KeyValue{
			attribute.String("lanes.device_timing", how), attribute.String("lanes.segment.fingerprint", seg.Fingerprint),
			attribute.Int("lanes.segment.entry_start", seg.Start), attribute.Int("lanes.segment.entry_end", seg.End),
			attribute.Int("lanes.segment.logical_commands", seg.Commands), attribute.Int("lanes.segment.graph_nodes", seg.GraphNodes),
		}
		if seg.Program != nil {
			attrs = append(attrs, attribute.String("lanes.program.id", seg.Program.String()), attribute.Int("lanes.segment.ordinal", seg.Ordinal))
		}
		if lo, hi, ok := nodeRange(s.Nodes, seg.Start, seg.End); ok {
			attrs = append(attrs, attribute.Int("lanes.segment.node_start", lo), attribute.Int("lanes.segment.node_end", hi))
		}
		_, sp := t.tracer.Start(ctx, "lanes.replay", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		sp.End(trace.WithTimestamp(end))
	}
	for _, st := range r.Spans {
		if st.Segment || st.Index >= len(r.Attribution.Rows) {
			continue
		}
		var row lanes.Row // rows are in entry order: row i is entry i
		if rows := r.Attribution.Rows; st.Index < len(rows) && rows[st.Index].Index == st.Index {
			row = rows[st.Index]
		}
		start, end, how := place([2]int{st.Index, 0})
		_, sp := t.tracer.Start(ctx, "lanes.eager", trace.WithTimestamp(start), trace.WithAttributes(
			attribute.String("lanes.device_timing", how), attribute.Int("lanes.command.index", st.Index),
			attribute.String("lanes.command.op", row.Op), attribute.String("lanes.command.reason", row.Reason.String())))
		sp.End(trace.WithTimestamp(end))
	}
}

// nodeRange is the plan-node range of entries [from, to), when they carry
// nodes.
func nodeRange(nodes []int, from, to int) (int, int, bool) {
	if to > len(nodes) || from >= to {
		return 0, 0, false
	}
	lo, hi := nodes[from], nodes[to-1]
	if lo < 0 || hi < lo {
		return 0, 0, false
	}
	return lo, hi + 1, true
}

// Quarantine records a lane leaving routing, with its cause.
func (t *Recorder) Quarantine(ctx context.Context, lane int, cause error) {
	if t == nil {
		return
	}
	reason := "unknown"
	if cause != nil {
		reason = cause.Error()
	}
	_, sp := t.tracer.Start(ctx, "lanes.lane.quarantine", trace.WithAttributes(attribute.Int("lanes.lane.id", lane)))
	sp.AddEvent("lanes.quarantined", trace.WithAttributes(attribute.Int("lanes.lane.id", lane), attribute.String("lanes.reason", reason)))
	sp.SetStatus(codes.Error, reason)
	sp.End()
	t.m.quarantines.Add(ctx, 1, metric.WithAttributes(attribute.Int("lanes.lane.id", lane)))
}
