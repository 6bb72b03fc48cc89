// Package recording is what the scheduler hands the telemetry recorder:
// each ended or refused submission and each quarantine, and the meter its
// gauges register on. A user configures telemetry (package telemetry) and
// never hands a recorder anything itself.
package recording

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/lanesched/lanes/lanes"
)

// Submission is one ended (or refused) submission, as the scheduler hands
// it over.
type Submission struct {
	Tenant     string
	Lane       int // -1: refused before any lane took it
	Device     int
	DeviceName string
	Entries    int
	Path       lanes.Path
	Timing     lanes.TimingMode
	// Parent is the caller's span (from Submit's context), if any: the
	// submission's span is its child (or linked, with Config.LinkParent).
	Parent trace.SpanContext
	// Start: submitted; Taken: the lane took it from its queue; Enqueued:
	// the lane had planned it and enqueued its work; End: its receipt was
	// observed. Taken and Enqueued are zero for a submission no lane took.
	Start, Taken, Enqueued, End time.Time
	// Anchor maps the lane clock's durations (Receipt.HostStart) to host
	// time: the lane clock's origin.
	Anchor  time.Time
	Receipt lanes.Receipt
	Err     error
	// SegmentNodes is each replayed segment's plan-node range, [first, one
	// past the last), in Receipt.Attribution.Segments' order; {-1, -1}
	// (or a missing range) where the entries carry no plan nodes.
	SegmentNodes [][2]int
}

// Quarantine is a lane leaving routing because it failed, whether it then
// recovers onto a fresh stream or stays out for good (the scheduler's
// HealthRecovering and HealthQuarantined): when, which lane of which
// device, and why.
type Quarantine struct {
	At         time.Time
	Lane       int
	Device     int
	DeviceName string
	Cause      error
}

// Sink is a recorder as the scheduler drives it. Every method is safe on
// the sink of a nil recorder (it records nothing).
type Sink interface {
	// Submission hands one ended or refused submission over. It never
	// blocks.
	Submission(ctx context.Context, s Submission)
	// Quarantine hands a lane's quarantine over. It never blocks.
	Quarantine(ctx context.Context, q Quarantine)
	// Meter is the meter for the scheduler's gauges (nil for a nil
	// recorder).
	Meter() metric.Meter
}

var sinkOf func(recorder any) Sink

// Register sets how a recorder becomes a Sink: package telemetry calls it
// once, at init.
func Register(of func(recorder any) Sink) { sinkOf = of }

// Of is recorder (a *telemetry.Recorder, nil included) as a Sink.
func Of(recorder any) Sink { return sinkOf(recorder) }
