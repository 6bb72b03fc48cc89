package telemetry_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/telemetry"
	"go.opentelemetry.io/otel/codes"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// gatedExporter holds every export until its gate opens.
type gatedExporter struct {
	gate chan struct{}
	mu   sync.Mutex
	got  []sdktrace.ReadOnlySpan
}

func (e *gatedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-e.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, spans...)
	return nil
}

func (e *gatedExporter) Shutdown(context.Context) error { return nil }

// replayedSubmission is a succeeded submission with two replayed segments
// and its stages: five spans (submit, queue, enqueue, two replays).
func replayedSubmission(tenant string) recording.Submission {
	now := time.Now()
	seg := lanes.SegmentRecord{Start: 0, End: 1, Commands: 1, GraphNodes: 1}
	return recording.Submission{Tenant: tenant, Lane: 0, Start: now, Taken: now.Add(time.Microsecond), Enqueued: now.Add(2 * time.Microsecond),
		End: now.Add(10 * time.Microsecond), Receipt: lanes.Receipt{Outcome: lanes.OutcomeSucceeded,
			Attribution: lanes.Attribution{Segments: []lanes.SegmentRecord{seg, seg}}}}
}

// TestWholeSubmissionsDroppedAndCounted: when the export queue is full, a
// submission's spans are dropped together and counted; what is exported
// is whole: every child's parent and every parent's children.
func TestWholeSubmissionsDroppedAndCounted(t *testing.T) {
	exp := &gatedExporter{gate: make(chan struct{})}
	rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp, QueueSpans: 12, BatchSpans: 5})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	for range 20 {
		recording.Of(rec).Submission(context.Background(), replayedSubmission("a"))
	}
	flushed := make(chan struct{})
	go func() { rec.Flush(); close(flushed) }() // the first export waits at the gate
	for rec.Stats().SpansDroppedQueueFull == 0 {
		time.Sleep(time.Millisecond)
	}
	close(exp.gate)
	<-flushed
	if err := rec.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: got err %v, want nil", err)
	}
	s := rec.Stats()
	if s.SpansExported+s.SpansDroppedQueueFull != 100 || s.SpansDroppedQueueFull == 0 || s.SpansDroppedQueueFull%5 != 0 {
		t.Fatalf("stats: got %+v, want 100 spans exported or dropped, some dropped, in whole submissions of 5", s)
	}
	children := map[trace.SpanID]int{}
	parents := map[trace.SpanID]bool{}
	for _, sp := range exp.got {
		if sp.Name() == "lanes.submit" {
			parents[sp.SpanContext().SpanID()] = true
		} else {
			children[sp.Parent().SpanID()]++
		}
	}
	if uint64(len(exp.got)) != s.SpansExported || len(parents)*5 != len(exp.got) {
		t.Fatalf("exported %d spans, %d submissions; stats say %d; want 5 spans per submission", len(exp.got), len(parents), s.SpansExported)
	}
	for id, n := range children {
		if !parents[id] || n != 4 {
			t.Fatalf("children of %v: got %d (parent exported %v), want 4 under an exported parent", id, n, parents[id])
		}
	}
}

// TestSuccessesSampledFailuresKept: with a success ratio, plain successes
// are sampled and counted, failures and fallbacks all traced, and every
// one counted in the metrics.
func TestSuccessesSampledFailuresKept(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp, SuccessRatio: 0.25})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	defer rec.Shutdown(context.Background())
	for range 100 {
		recording.Of(rec).Submission(context.Background(), replayedSubmission("a"))
	}
	failed := replayedSubmission("a")
	failed.Err = laneerr.Wrap("fence", false, cuda.ErrIllegalAddress)
	failed.Receipt.Outcome = lanes.OutcomeIndeterminate
	for range 10 {
		recording.Of(rec).Submission(context.Background(), failed)
	}
	rec.Flush()
	subs, errs := 0, 0
	for _, sp := range exp.GetSpans() {
		if sp.Name == "lanes.submit" {
			subs++
			if sp.Status.Code == codes.Error {
				errs++
			}
		}
	}
	if s := rec.Stats(); subs != 35 || errs != 10 || s.SampledOut != 75 {
		t.Fatalf("got %d submit spans (%d errors), %d sampled out; want 35 (25 of 100 successes, all 10 failures), 75 sampled out", subs, errs, s.SampledOut)
	}
}

// TestCallersSpanIsTheParent: a submission made under a caller's span is
// its child, or, with LinkParent, a new trace linked to it.
func TestCallersSpanIsTheParent(t *testing.T) {
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2}, TraceFlags: trace.FlagsSampled, Remote: true})
	for _, link := range []bool{false, true} {
		exp := tracetest.NewInMemoryExporter()
		rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: exp, LinkParent: link})
		if err != nil {
			t.Fatalf("telemetry.New: got err %v, want nil", err)
		}
		s := replayedSubmission("a")
		s.Parent = parent
		recording.Of(rec).Submission(context.Background(), s)
		rec.Flush()
		var sub tracetest.SpanStub
		for _, sp := range exp.GetSpans() {
			if sp.Name == "lanes.submit" {
				sub = sp
			}
		}
		_ = rec.Shutdown(context.Background())
		child := sub.Parent.SpanID() == parent.SpanID() && sub.SpanContext.TraceID() == parent.TraceID()
		linked := len(sub.Links) == 1 && sub.Links[0].SpanContext.SpanID() == parent.SpanID() && sub.SpanContext.TraceID() != parent.TraceID()
		if (!link && !child) || (link && !linked) {
			t.Fatalf("LinkParent %v: got parent %v in trace %v, links %v; want the caller's span %s", link, sub.Parent.SpanID(), sub.SpanContext.TraceID(), sub.Links,
				map[bool]string{false: "as parent", true: "as a link from a new trace"}[link])
		}
	}
}

// TestOTLPJSONFile: the file exporter writes OTLP JSON a viewer loads:
// hex ids, nanosecond times as strings, children naming their parent.
func TestOTLPJSONFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "spans.json")
	rec, err := telemetry.New(context.Background(), telemetry.Config{Traces: telemetry.ExportFile, File: path, ServiceName: "svc"})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	recording.Of(rec).Submission(context.Background(), replayedSubmission("a"))
	if err := rec.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: got err %v, want nil", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	type span struct {
		TraceID, SpanID, ParentSpanID, Name, StartTimeUnixNano string
	}
	var spans []span
	var service string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var req struct {
			ResourceSpans []struct {
				Resource struct {
					Attributes []struct {
						Key   string
						Value struct{ StringValue string }
					}
				}
				ScopeSpans []struct{ Spans []span }
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			t.Fatalf("line %q: got JSON error %v, want a JSON line", sc.Text(), err)
		}
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					service = a.Value.StringValue
				}
			}
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}
	hex := regexp.MustCompile(`^[0-9a-f]+$`)
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	for _, s := range spans {
		if len(s.TraceID) != 32 || len(s.SpanID) != 16 || !hex.MatchString(s.TraceID+s.SpanID) || !regexp.MustCompile(`^[0-9]{19}$`).MatchString(s.StartTimeUnixNano) {
			t.Fatalf("span %+v: want a 32-hex trace id, a 16-hex span id and a 19-digit nanosecond time", s)
		}
		if (s.Name == "lanes.submit") != (s.ParentSpanID == "") || (s.ParentSpanID != "" && !ids[s.ParentSpanID]) {
			t.Fatalf("span %s: parent %q; want the submission root-level and every other span under a span of the file", s.Name, s.ParentSpanID)
		}
	}
	if len(spans) != 5 || service != "svc" {
		t.Fatalf("got %d spans, service %q; want 5 spans of service svc", len(spans), service)
	}
}

// TestPrometheusEndpoint: the Prometheus handler serves the metrics with
// units in their names and latency buckets fine enough for a percentile.
func TestPrometheusEndpoint(t *testing.T) {
	rec, err := telemetry.New(context.Background(), telemetry.Config{Metrics: telemetry.ExportPrometheus})
	if err != nil || rec == nil {
		t.Fatalf("telemetry.New(metrics only): got (%v, %v), want a recorder", rec, err)
	}
	defer rec.Shutdown(context.Background())
	recording.Of(rec).Submission(context.Background(), replayedSubmission("tenant-x"))
	rec.Flush()
	w := httptest.NewRecorder()
	rec.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Result().Body)
	for _, want := range []string{`lanes_submissions_total{`, `lanes_tenant="tenant-x"`, `lanes_fence_latency_seconds_bucket{`, `le="1e-05"`, `le="0.000125893"`, `lanes_telemetry_spans_total`, `target_info{`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics: got no %s in\n%.3000s", want, body)
		}
	}
}

// TestDeadCollectorReported: with only the standard variables naming a
// collector that is not there, exports fail during the run, each one told
// and counted.
func TestDeadCollectorReported(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9") // discard port: nothing listens
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	var mu sync.Mutex
	var told []error
	rec, err := telemetry.New(context.Background(), telemetry.Config{ExportTimeout: 300 * time.Millisecond, OnError: func(err error) {
		mu.Lock()
		told = append(told, err)
		mu.Unlock()
	}})
	if err != nil || rec == nil {
		t.Fatalf("telemetry.New from the environment: got (%v, %v), want a recorder", rec, err)
	}
	recording.Of(rec).Submission(context.Background(), replayedSubmission("a"))
	rec.Flush()
	_ = rec.Shutdown(context.Background())
	s := rec.Stats()
	mu.Lock()
	defer mu.Unlock()
	if s.SpansDroppedExport != 5 || s.ExportErrors == 0 || len(told) == 0 || s.LastError == "" {
		t.Fatalf("got stats %+v and %d errors told; want 5 spans dropped by a failed export, counted and told", s, len(told))
	}
}

// TestBadConfig: what New refuses, it refuses with ErrConfig.
func TestBadConfig(t *testing.T) {
	for _, c := range []telemetry.Config{
		{Traces: "carrier-pigeon"}, {Metrics: "stdout"}, {Traces: telemetry.ExportFile}, {Traces: telemetry.ExportOTLPGRPC, Endpoint: "no-port"},
		{Traces: telemetry.ExportOTLPGRPC, Endpoint: "ftp://x:1"}, {Traces: telemetry.ExportStdout, SuccessRatio: 2}, {Traces: telemetry.ExportStdout, QueueSpans: -1},
	} {
		if _, err := telemetry.New(context.Background(), c); !errors.Is(err, telemetry.ErrConfig) {
			t.Errorf("New(%+v): got err %v, want telemetry.ErrConfig", c, err)
		}
	}
	for _, env := range [][2]string{{"OTEL_TRACES_EXPORTER", "zipkin"}, {"OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://x:1"},
		{"OTEL_METRIC_EXPORT_INTERVAL", "abc"}, {"OTEL_RESOURCE_ATTRIBUTES", "novalue"}, {"OTEL_METRICS_EXPORTER", "console"}} {
		t.Run(env[0], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			if _, err := telemetry.New(context.Background(), telemetry.Config{}); !errors.Is(err, telemetry.ErrConfig) || !strings.Contains(err.Error(), env[0][5:]) && !strings.Contains(err.Error(), env[1]) {
				t.Errorf("New with %s=%s: got err %v, want telemetry.ErrConfig naming it", env[0], env[1], err)
			}
		})
	}
}

// TestOTLPMetricsPushed: with metrics to OTLP/HTTP and no traces, the
// recorder pushes them to the collector's /v1/metrics, and tenants past
// MaxTenants are counted as "other".
func TestOTLPMetricsPushed(t *testing.T) {
	var mu sync.Mutex
	posts := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/metrics" {
			mu.Lock()
			posts++
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer srv.Close()
	rec, err := telemetry.New(context.Background(), telemetry.Config{Metrics: telemetry.ExportOTLPHTTP, Endpoint: srv.URL, MetricInterval: 20 * time.Millisecond, MaxTenants: 1})
	if err != nil || rec == nil {
		t.Fatalf("telemetry.New(OTLP metrics only): got (%v, %v), want a recorder", rec, err)
	}
	recording.Of(rec).Submission(context.Background(), replayedSubmission("first"))
	recording.Of(rec).Submission(context.Background(), replayedSubmission("second"))
	rec.Flush()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := posts
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no metrics pushed to /v1/metrics within 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := rec.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: got err %v, want nil", err)
	}
	if s := rec.Stats(); s.ExportErrors != 0 {
		t.Fatalf("stats: got %+v, want no export errors", s)
	}

	prom, err := telemetry.New(context.Background(), telemetry.Config{Metrics: telemetry.ExportPrometheus, MaxTenants: 1})
	if err != nil {
		t.Fatalf("telemetry.New(prometheus): got err %v, want nil", err)
	}
	defer prom.Shutdown(context.Background())
	recording.Of(prom).Submission(context.Background(), replayedSubmission("first"))
	recording.Of(prom).Submission(context.Background(), replayedSubmission("second"))
	prom.Flush()
	w := httptest.NewRecorder()
	prom.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	if !strings.Contains(body, `lanes_tenant="first"`) || !strings.Contains(body, `lanes_tenant="other"`) || strings.Contains(body, `lanes_tenant="second"`) {
		t.Fatalf("tenants on metrics with MaxTenants 1: want first and other, not second, in\n%.2000s", body)
	}
}

// TestLateWorkIsDropped: work handed to a Recorder after its Shutdown (a
// scheduler stopped after it) is dropped and counted, never a panic.
func TestLateWorkIsDropped(t *testing.T) {
	rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: tracetest.NewInMemoryExporter()})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	if err := rec.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown: got err %v, want nil", err)
	}
	recording.Of(rec).Submission(context.Background(), replayedSubmission("late"))
	recording.Of(rec).Quarantine(context.Background(), recording.Quarantine{Lane: 1})
	rec.Flush()
	if err := rec.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: got err %v, want nil", err)
	}
	if s := rec.Stats(); s.Behind != 2 {
		t.Fatalf("stats after late work: got %+v, want Behind 2", s)
	}
}
