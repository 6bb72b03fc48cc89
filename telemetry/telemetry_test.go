package telemetry_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanesched/lanes/internal/recording"
	"go.opentelemetry.io/otel/attribute"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type rig struct {
	t      *testing.T
	dev    sim.Device
	buf    cuda.Buffer
	exp    *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
	s      *actors.Scheduler
	tel    *telemetry.Recorder
}

func newRig(t *testing.T, faults ...sim.Fault) *rig {
	dev, err := sim.New(sim.Config{Clock: sim.ClockRealTime, Faults: faults})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	buf, _ := dev.Alloc(cuda.BufferSpec{Size: 4 * 256, Elem: cuda.I32})
	testdev.Zero(t, dev, buf)
	r := &rig{t: t, dev: dev, buf: buf, exp: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	tel, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: r.exp, MetricReader: r.reader, ServiceName: "test"})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	r.tel = tel
	r.s, err = actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, Telemetry: tel})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	t.Cleanup(func() {
		_ = r.s.Stop(context.Background())
		_ = tel.Shutdown(context.Background())
	})
	return r
}

// batch is k increments at nodes 0..k-1, replayable when keyed.
func (r *rig) batch(k int, keyed bool, timing lanes.TimingMode) lanes.Batch {
	b := lanes.Batch{Timing: timing}
	for n := range k {
		c, _ := cuda.Launch(r.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(256, 128), cuda.BufferArg(r.buf.Whole()), cuda.I32Arg(256))
		e := lanes.Entry{Phase: cache.PhaseCompute, Node: n, Command: c}
		if keyed {
			e.Replay = lanes.Replayable(c, cache.LaunchKey("telemetry-test", c), cache.PlanScope())
		}
		b.Entries = append(b.Entries, e)
	}
	return b
}

func (r *rig) submit(b lanes.Batch) error {
	_, err := r.s.Submit(context.Background(), "tenant-a", b)
	return err
}

func attr(kv []attribute.KeyValue, key string) (attribute.Value, bool) {
	for _, a := range kv {
		if string(a.Key) == key {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func (r *rig) spans(name string) []tracetest.SpanStub {
	r.tel.Flush()
	var out []tracetest.SpanStub
	for _, s := range r.exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func TestReplayedSegmentSpanAtDeviceTime(t *testing.T) {
	r := newRig(t)
	for range 2 {
		if err := r.submit(r.batch(4, true, lanes.TimingReplay)); err != nil {
			t.Fatalf("Submit: got err %v, want nil", err)
		}
	}
	subs, reps := r.spans("lanes.submit"), r.spans("lanes.replay")
	if len(subs) != 2 || len(reps) != 2 {
		t.Fatalf("got %d submit spans and %d replay spans, want 2 and 2", len(subs), len(reps))
	}
	parent, child := subs[1], reps[1]
	if child.Parent.SpanID() != parent.SpanContext.SpanID() || child.SpanContext.TraceID() != parent.SpanContext.TraceID() {
		t.Fatalf("replay span: got parent %v in trace %v, want its submission %v in trace %v",
			child.Parent.SpanID(), child.SpanContext.TraceID(), parent.SpanContext.SpanID(), parent.SpanContext.TraceID())
	}
	for key, want := range map[string]string{"lanes.device_timing": "events", "lanes.tenant": "", "lanes.outcome": ""} {
		kv := child.Attributes
		if key != "lanes.device_timing" {
			kv = parent.Attributes
		}
		v, ok := attr(kv, key)
		if !ok || (want != "" && v.AsString() != want) {
			if want == "" {
				want = "any value"
			}
			t.Fatalf("attribute %s: got %q (present %v), want %s", key, v.AsString(), ok, want)
		}
	}
	for key, want := range map[string]int64{"lanes.segment.node_start": 0, "lanes.segment.node_end": 4, "lanes.segment.logical_commands": 4, "lanes.segment.graph_nodes": 4} {
		if v, ok := attr(child.Attributes, key); !ok || v.AsInt64() != want {
			t.Fatalf("attribute %s: got %v (present %v), want %d", key, v.AsInt64(), ok, want)
		}
	}
	if v, _ := attr(child.Attributes, "lanes.segment.fingerprint"); len(v.AsString()) != 64 {
		t.Fatalf("attribute lanes.segment.fingerprint: got %q, want 64 hex digits", v.AsString())
	}
	// Device time: at least 1.3 µs launch + 4 × 0.9 µs nodes on the
	// simulated H200 (more when the host stalls between the launch and the
	// closing event, as on a GPU), placed inside its submission.
	if d := child.EndTime.Sub(child.StartTime); d < 4*time.Microsecond {
		t.Fatalf("replay span: got duration %v, want at least 4µs", d)
	}
	if child.StartTime.Before(parent.StartTime) || child.EndTime.After(parent.EndTime) {
		t.Fatalf("device span: got [%v, %v], want it inside its submission [%v, %v]", child.StartTime, child.EndTime, parent.StartTime, parent.EndTime)
	}
}

func TestEagerCommandsAndUntimedReplay(t *testing.T) {
	r := newRig(t)
	if err := r.submit(r.batch(3, false, lanes.TimingKernel)); err != nil {
		t.Fatalf("Submit: got err %v, want nil", err)
	}
	eager := r.spans("lanes.eager")
	if len(eager) != 3 {
		t.Fatalf("got %d eager spans, want 3", len(eager))
	}
	if v, _ := attr(eager[0].Attributes, "lanes.command.reason"); v.AsString() != "provider_key_missing" {
		t.Fatalf("eager span attribute lanes.command.reason: got %q, want %q", v.AsString(), "provider_key_missing")
	}
	for range 2 {
		if err := r.submit(r.batch(2, true, lanes.TimingOff)); err != nil {
			t.Fatalf("Submit of a keyed batch: got err %v, want nil", err)
		}
	}
	reps := r.spans("lanes.replay")
	if v, _ := attr(reps[len(reps)-1].Attributes, "lanes.device_timing"); v.AsString() != "unavailable" {
		t.Fatalf("untimed replay attribute lanes.device_timing: got %q, want %q", v.AsString(), "unavailable")
	}
}

func TestRejectedAndQuarantinedWork(t *testing.T) {
	r := newRig(t, sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1}, sim.Fault{Kind: sim.FaultLaunch, Nth: 3})
	if err := r.submit(r.batch(2, true, lanes.TimingReplay)); err != nil {
		t.Fatalf("Submit: got err %v, want nil (the rejected capture falls back eagerly)", err)
	}
	sub := r.spans("lanes.submit")[0]
	found := false
	for _, ev := range sub.Events {
		if ev.Name == "lanes.capture_rejected" {
			found = true
		}
	}
	if !found {
		t.Fatalf("submit span events: got %+v, want a lanes.capture_rejected event", sub.Events)
	}
	if err := r.submit(r.batch(2, false, lanes.TimingOff)); err == nil {
		t.Fatal("Submit with an injected launch failure: got err nil, want an error")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(r.spans("lanes.lane.quarantine")) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	q := r.spans("lanes.lane.quarantine")
	if len(q) != 1 || len(q[0].Events) != 1 || q[0].Events[0].Name != "lanes.quarantined" {
		t.Fatalf("got quarantine spans %+v (polled up to 5 s), want one with one lanes.quarantined event", q)
	}
	failed := r.spans("lanes.submit")[1]
	stages := 0
	for _, sp := range r.exp.GetSpans() {
		if sp.Parent.SpanID() == failed.SpanContext.SpanID() && (sp.Name == "lanes.queue" || sp.Name == "lanes.enqueue") {
			stages++
		}
	}
	if stages != 2 {
		t.Errorf("a submission that failed at enqueue: got %d of its queue and enqueue spans, want both", stages)
	}
	if v, _ := attr(failed.Attributes, "error.type"); v.AsString() != "cuda_launch_out_of_resources" {
		t.Fatalf("failed submit span attribute error.type: got %q, want %q", v.AsString(), "cuda_launch_out_of_resources")
	}
	if links := q[0].Links; len(links) != 1 || links[0].SpanContext.SpanID() != failed.SpanContext.SpanID() {
		t.Fatalf("quarantine span links: got %+v, want one, to the failed submission %v", links, failed.SpanContext.SpanID())
	}
	for key, want := range map[string]string{"error.type": "cuda_launch_out_of_resources", "lanes.device.name": r.dev.Info().Name} {
		if v, _ := attr(q[0].Attributes, key); v.AsString() != want {
			t.Errorf("quarantine span attribute %s: got %q, want %q", key, v.AsString(), want)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: got err %v, want nil", err)
	}
	names := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names[m.Name] = true
		}
	}
	for _, n := range []string{"lanes.submissions", "lanes.fence.latency", "lanes.quarantines", "lanes.lanes", "lanes.lane.in_flight", "lanes.cache.events"} {
		if !names[n] {
			t.Errorf("metrics: got %v, want %s among them", names, n)
		}
	}
}

func TestNilTelemetryRecordsNothing(t *testing.T) {
	var tel *telemetry.Recorder
	recording.Of(tel).Submission(context.Background(), recording.Submission{})
	tel.Flush()
	recording.Of(tel).Quarantine(context.Background(), recording.Quarantine{})
	if m := recording.Of(tel).Meter(); m != nil {
		t.Fatalf("nil Recorder's Meter: got %v, want nil", m)
	}
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatalf("nil Recorder's Shutdown: got err %v, want nil", err)
	}
	got, err := telemetry.New(context.Background(), telemetry.Config{})
	if got != nil || err != nil {
		t.Fatalf("telemetry.New(zero Config): got (%v, %v), want (nil, nil)", got, err)
	}
	if _, err := telemetry.New(context.Background(), telemetry.Config{Traces: "carrier-pigeon"}); err == nil {
		t.Fatal("telemetry.New with exporter carrier-pigeon: got err nil, want an error")
	}
	attrs, err := telemetry.ParseAttributes("a=1, b = two")
	if err != nil || attrs["b"] != "two" {
		t.Fatalf(`ParseAttributes("a=1, b = two"): got (%v, %v), want b=two and err nil`, attrs, err)
	}
	if _, err := telemetry.ParseAttributes("novalue"); err == nil {
		t.Fatal(`ParseAttributes("novalue"): got err nil, want an error`)
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)

// TestWhereTheTimeWent: a timed submission's trace shows its wait for the
// lane, its enqueue, its device work and the wait for its fence, in order
// and inside it; a refused submission is traced too, with its error type.
func TestWhereTheTimeWent(t *testing.T) {
	r := newRig(t)
	for range 2 {
		if err := r.submit(r.batch(4, true, lanes.TimingReplay)); err != nil {
			t.Fatalf("Submit: got err %v, want nil", err)
		}
	}
	subs := r.spans("lanes.submit")
	last := subs[len(subs)-1]
	byName := map[string]tracetest.SpanStub{}
	for _, sp := range r.exp.GetSpans() {
		if sp.Parent.SpanID() == last.SpanContext.SpanID() {
			byName[sp.Name] = sp
		}
	}
	order := []string{"lanes.queue", "lanes.enqueue", "lanes.replay", "lanes.fence_wait"}
	prev := last.StartTime
	for _, name := range order {
		sp, ok := byName[name]
		if !ok {
			t.Fatalf("children of the submission: got %v, want %v", keys(byName), order)
		}
		if sp.StartTime.Before(prev) || sp.EndTime.After(last.EndTime) {
			t.Fatalf("%s: got [%v, %v], want it after the previous stage (%v) and inside the submission (ends %v)", name, sp.StartTime, sp.EndTime, prev, last.EndTime)
		}
		prev = sp.StartTime
	}
	if _, err := r.s.Submit(context.Background(), "", r.batch(1, false, lanes.TimingOff)); err == nil {
		t.Fatal(`Submit for tenant "": got err nil, want a refusal`)
	}
	subs = r.spans("lanes.submit")
	refused := subs[len(subs)-1]
	if v, _ := attr(refused.Attributes, "lanes.outcome"); v.AsString() != "refused" {
		t.Fatalf("refused submission's span: got outcome %q, want refused", v.AsString())
	}
	if v, _ := attr(refused.Attributes, "error.type"); v.AsString() == "" {
		t.Fatalf("refused submission's span: got no error.type in %v, want one", refused.Attributes)
	}
}

func keys(m map[string]tracetest.SpanStub) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
