package telemetry_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
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
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// slowExporter holds every export until its gate opens, then takes its
// time over each, as a collector across a network does: a flood fills the
// export queue.
type slowExporter struct {
	gate  chan struct{}
	delay time.Duration
	mu    sync.Mutex
	got   []sdktrace.ReadOnlySpan
}

func (e *slowExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	<-e.gate
	time.Sleep(e.delay)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, spans...)
	return nil
}

func (e *slowExporter) Shutdown(context.Context) error { return nil }

func (e *slowExporter) spans() []sdktrace.ReadOnlySpan {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]sdktrace.ReadOnlySpan(nil), e.got...)
}

// TestAFloodOfRefusalsLeavesOthersTheirSpans: one tenant floods admission
// with refusals (thousands, each one a refusal as overloaded) through an
// exporter too slow for them, while another tenant fails a lane. Every span
// of the second tenant is exported, its failed submission's and the
// lane's quarantine linked to it, and it loses nothing; the flood's own
// telemetry is what gives: its refusals summarised or dropped, each
// counted against it, and every refusal either in the metrics or counted
// as dropped unrecorded.
func TestAFloodOfRefusalsLeavesOthersTheirSpans(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockVirtual, Faults: []sim.Fault{{Kind: sim.FaultLaunch, Kernel: kernels.Fill, Rate: 1}}})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	exp := &slowExporter{gate: make(chan struct{}), delay: 2 * time.Millisecond}
	reader := sdkmetric.NewManualReader()
	rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp, MetricReader: reader, QueueSpans: 64, BatchSpans: 16})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2, MaxInFlightPerTenant: 1, HangTimeout: -1, Telemetry: rec})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			go func() { // the flood's one admitted step ends when the clock moves
				for s.Lanes()[0].InFlight+s.Lanes()[1].InFlight > 0 {
					dev.Clock().Advance(time.Millisecond)
					time.Sleep(time.Millisecond)
				}
			}()
			_ = s.Stop(context.Background())
		}
	}
	t.Cleanup(func() { stop(); _ = rec.Shutdown(context.Background()) })
	buffer := func(tenant string, elem cuda.ElementType) cuda.Buffer {
		b, err := dev.Alloc(cuda.BufferSpec{Size: 4 * 64, Elem: elem})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		if err := s.Own(tenant, b); err != nil {
			t.Fatalf("Own(%s): got err %v, want nil", tenant, err)
		}
		return b
	}
	counter, out := buffer("flood", cuda.I32), buffer("victim", cuda.F32)

	// The flood: one step in flight (the device's clock stands still, so it
	// never ends), and every other step refused at admission.
	inc, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(64, 64), cuda.BufferArg(counter.Whole()), cuda.I32Arg(64))
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, inc)}}
	if _, err := s.SubmitAsync(context.Background(), "flood", step); err != nil {
		t.Fatalf("the flood's first step: got err %v, want admitted", err)
	}
	var refused atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.SubmitAsync(context.Background(), "flood", step); errors.Is(err, actors.ErrOverloaded) {
					refused.Add(1)
				} else {
					t.Errorf("the flood's step beyond its limit: got err %v, want actors.ErrOverloaded", err)
					return
				}
			}
		})
	}
	for refused.Load() < 20000 || rec.Stats().ByTenant["flood"].SpansQueueFull == 0 {
		time.Sleep(time.Millisecond) // until the flood is in full swing, and the export queue full of it
	}

	// The victim, in the flood: its step fails its lane.
	fill, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Fill), cuda.Linear(64, 64), cuda.BufferArg(out.Whole()), cuda.F32Arg(1), cuda.I32Arg(64))
	if _, err := s.Submit(context.Background(), "victim", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, fill)}}); err == nil {
		t.Fatalf("the victim's step with an injected launch failure: got err nil, want it failed")
	}
	for after := refused.Load() + 5000; refused.Load() < after || s.Lanes()[1].Recoveries+s.Lanes()[0].Recoveries == 0; {
		time.Sleep(time.Millisecond) // the flood goes on, the export queue still full, while the lane recovers
	}
	close(exp.gate)
	for deadline := time.Now().Add(5 * time.Second); !exported(exp, "lanes.lane.quarantine") && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // the flood goes on meanwhile
	}
	close(done)
	wg.Wait()
	stop()
	rec.Flush()

	// Every span of the victim's, whole and linked; none lost.
	var victim sdktrace.ReadOnlySpan
	victims := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	children := 0
	for _, sp := range exp.spans() {
		if sp.Name() == "lanes.submit" && hasAttr(sp.Attributes(), "lanes.tenant", "victim") {
			victim = sp
			victims[sp.SpanContext().SpanID()] = sp
		}
	}
	if victim == nil {
		t.Fatalf("the victim's failed submission: got no lanes.submit span exported, want it")
	}
	var quarantines []sdktrace.ReadOnlySpan
	for _, sp := range exp.spans() {
		if sp.Parent().SpanID() == victim.SpanContext().SpanID() {
			children++
		}
		if sp.Name() == "lanes.lane.quarantine" {
			quarantines = append(quarantines, sp)
		}
	}
	if children != 2 {
		t.Errorf("the victim's submission: got %d of its queue and enqueue spans exported, want both", children)
	}
	if len(quarantines) == 0 {
		t.Fatalf("the lane's quarantine: got no lanes.lane.quarantine span exported, want it")
	}
	// The victim's lane's quarantine links its failed submission (and may
	// link others that failed with the lane: the flood's one step in
	// flight, when the two shared it).
	linked := false
	var seen [][]sdktrace.Link
	for _, q := range quarantines {
		seen = append(seen, q.Links())
		for _, l := range q.Links() {
			linked = linked || victims[l.SpanContext.SpanID()] != nil
		}
	}
	if !linked {
		t.Errorf("the quarantine spans' links: got %+v, want one to the victim's failed submission (its lanes.submit spans: %d)", seen, len(victims))
		for _, sp := range exp.spans() {
			for _, q := range seen {
				for _, l := range q {
					if sp.SpanContext().SpanID() == l.SpanContext.SpanID() {
						t.Logf("DIAG linked span: %s %v err=%v", sp.Name(), sp.Attributes(), sp.Status())
					}
				}
			}
			if sp.Name() == "lanes.lane.quarantine" || hasAttr(sp.Attributes(), "lanes.tenant", "victim") {
				t.Logf("DIAG span %s id=%v attrs=%v status=%v", sp.Name(), sp.SpanContext().SpanID(), sp.Attributes(), sp.Status())
			}
		}
	}
	st := rec.Stats()
	if d := st.ByTenant["victim"]; d != (telemetry.TenantDrops{}) {
		t.Errorf("the victim's telemetry: got %+v lost, want nothing", d)
	}
	if d := st.ByTenant[""]; d != (telemetry.TenantDrops{}) {
		t.Errorf("the lanes' quarantines: got %+v lost, want nothing", d)
	}

	// The flood's: what it lost is counted against it, and every refusal
	// is in the metrics or counted as dropped unrecorded.
	flood := st.ByTenant["flood"]
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("Collect: got err %v, want nil", err)
	}
	inMetrics := sum(rm, "lanes.submissions", attribute.String("lanes.tenant", "flood"), attribute.String("lanes.outcome", "refused"))
	if got := inMetrics + int64(flood.Behind); got != refused.Load() {
		t.Errorf("the flood's refusals: got %d in the metrics and %d dropped unrecorded (%d), want all %d", inMetrics, flood.Behind, got, refused.Load())
	}
	if flood.SpansQueueFull+flood.Behind+flood.Summarised == 0 {
		t.Errorf("the flood's telemetry: got %+v lost or summarised, want its own telemetry to give", flood)
	}
	if lost := sum(rm, "lanes.telemetry.spans", attribute.String("lanes.tenant", "flood"), attribute.String("lanes.disposition", "queue_full")); lost != int64(flood.SpansQueueFull) {
		t.Errorf("lanes.telemetry.spans{lanes.tenant=flood, queue_full}: got %d, want Stats' %d", lost, flood.SpansQueueFull)
	}
	t.Logf("%d refusals: %d in the metrics; the flood's telemetry %+v; exported %d spans in all", refused.Load(), inMetrics, flood, st.SpansExported)
}

// exported reports whether a span of that name was exported.
func exported(exp *slowExporter, name string) bool {
	for _, sp := range exp.spans() {
		if sp.Name() == name {
			return true
		}
	}
	return false
}

func hasAttr(kv []attribute.KeyValue, key, value string) bool {
	v, ok := attr(kv, key)
	return ok && v.AsString() == value
}

// sum adds the int64 sums of a metric over the data points carrying every
// attribute given.
func sum(rm metricdata.ResourceMetrics, name string, want ...attribute.KeyValue) int64 {
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			data, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
		points:
			for _, dp := range data.DataPoints {
				for _, kv := range want {
					if v, ok := dp.Attributes.Value(kv.Key); !ok || v != kv.Value {
						continue points
					}
				}
				total += dp.Value
			}
		}
	}
	return total
}

// refusedUnder is a refusal under a caller's sampled span: never
// summarised, so a flood of them keeps the recorder busy.
func refusedUnder(tenant string, i int) recording.Submission {
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, byte(i)}, SpanID: trace.SpanID{byte(i), 1}, TraceFlags: trace.FlagsSampled})
	now := time.Now()
	return recording.Submission{Tenant: tenant, Lane: -1, Start: now, End: now, Parent: parent, Err: actors.ErrOverloaded}
}

// TestFlushReturnsDuringAFlood: Flush waits for what was handed over
// before it, not for a flood that goes on meanwhile.
func TestFlushReturnsDuringAFlood(t *testing.T) {
	exp := &slowExporter{gate: make(chan struct{}), delay: time.Millisecond}
	close(exp.gate)
	rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	defer rec.Shutdown(context.Background())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			recording.Of(rec).Submission(context.Background(), refusedUnder("flood", i))
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for rec.Stats().Behind == 0 {
		time.Sleep(time.Millisecond) // until the recorder is behind the flood
	}
	done := make(chan struct{})
	go func() { rec.Flush(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Flush during a flood: not returned after 30 s, want it to return once what came before it was recorded")
	}
}

// stuckExporter never returns from an export, whatever its context says.
type stuckExporter struct{ calls atomic.Int64 }

func (e *stuckExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error {
	e.calls.Add(1)
	select {}
}

func (e *stuckExporter) Shutdown(context.Context) error { return nil }

// TestAStuckExporterIsCountedNotWaitedFor: an exporter that ignores its
// deadline fails that export, and the ones after it are dropped and
// counted until it returns; Flush and Shutdown come back.
func TestAStuckExporterIsCountedNotWaitedFor(t *testing.T) {
	exp := &stuckExporter{}
	var told atomic.Int64
	rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp, ExportTimeout: 50 * time.Millisecond, BatchSpans: 5,
		OnError: func(error) { told.Add(1) }})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	for range 20 {
		recording.Of(rec).Submission(context.Background(), replayedSubmission("a"))
	}
	done := make(chan struct{})
	go func() { rec.Flush(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("Flush with a stuck exporter: not returned after 30 s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = rec.Shutdown(ctx)
	s := rec.Stats()
	if s.SpansDroppedExport != 100 || s.SpansExported != 0 || s.ExportErrors == 0 || told.Load() == 0 || exp.calls.Load() != 1 {
		t.Errorf("stats: got %+v, %d errors told, %d exports begun; want all 100 spans dropped as export failures, told, one export begun", s, told.Load(), exp.calls.Load())
	}
}

// TestAnInvalidTenantNameStaysOutOfTheMetrics: a name no tenant may have
// (refused as such) is "invalid" in the metrics, and Prometheus can still
// read them.
func TestAnInvalidTenantNameStaysOutOfTheMetrics(t *testing.T) {
	rec, err := telemetry.New(context.Background(), telemetry.Config{Metrics: telemetry.ExportPrometheus, Traces: telemetry.ExportNone})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	defer rec.Shutdown(context.Background())
	now := time.Now()
	recording.Of(rec).Submission(context.Background(), recording.Submission{Tenant: "\xff\xfe", Lane: -1, Start: now, End: now, Err: actors.ErrInvalidTenant})
	recording.Of(rec).Submission(context.Background(), recording.Submission{Tenant: strings.Repeat("x", 1<<20), Lane: -1, Start: now, End: now, Err: actors.ErrInvalidTenant})
	rec.Flush()
	w := httptest.NewRecorder()
	rec.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	if w.Code != 200 || !strings.Contains(body, `lanes_tenant="invalid"`) || len(body) > 1<<20 {
		t.Fatalf("/metrics after invalid tenant names: got status %d, %d bytes (invalid label present: %v), want 200, small, lanes_tenant=\"invalid\"", w.Code, len(body), strings.Contains(body, `lanes_tenant="invalid"`))
	}
}
