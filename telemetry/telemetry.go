// The Recorder: its pipelines, instruments and lifecycle.

package telemetry

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/internal/recording"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of lanes' spans and metrics.
const ScopeName = "github.com/lanesched/lanes"

// ScopeVersion is the version of lanes that records them.
const ScopeVersion = "0.3.0"

// Recorder records what the scheduler hands it: spans and metrics. A nil
// *Recorder records nothing.
type Recorder struct {
	cfg     Config
	tp      *sdktrace.TracerProvider // nil without traces
	pipe    *pipeline
	mp      *sdkmetric.MeterProvider
	tracer  trace.Tracer
	m       instruments
	metrics http.Handler // Prometheus's, or nil

	// Work is recorded off the caller's goroutine (a lane's bound thread),
	// by one goroutine, from an intake served fairly across tenants; a full
	// intake drops and counts, the flooding tenant's work first.
	in      *intake
	names   *tenantNames
	drops   *dropCounts
	flush   chan chan struct{}
	stopped chan struct{}
	once    sync.Once

	recorded      atomic.Uint64 // submissions recorded (traced or sampled out)
	traced        atomic.Uint64 // submissions given spans
	sampledOut    atomic.Uint64
	metricErrors  atomic.Uint64
	lastMetricErr atomic.Pointer[string]

	// Owned by the recording goroutine.
	attrSets map[attrKey]attrOptions
	failing  map[int][]trace.Link         // per lane: failed submissions since its last quarantine
	waitingQ map[int]recording.Quarantine // per lane: a quarantine waiting for its failed submission
	sampleAt float64                      // success sampling's accumulator
}

// queueLength bounds the work waiting to be recorded, all tenants'
// together.
const queueLength = 8192

// New builds the configured pipelines, or returns nil when neither traces
// nor metrics go anywhere.
func New(ctx context.Context, cfg Config) (*Recorder, error) {
	c, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	traces := c.SpanExporter != nil || (c.Traces != "" && c.Traces != ExportNone)
	metrics := c.MetricReader != nil || (c.Metrics != "" && c.Metrics != ExportNone)
	if !traces && !metrics {
		return nil, nil
	}
	res, err := newResource(ctx, c)
	if err != nil {
		return nil, err
	}
	names := &tenantNames{max: c.MaxTenants}
	t := &Recorder{cfg: c, names: names, drops: &dropCounts{names: names}, attrSets: map[attrKey]attrOptions{}, failing: map[int][]trace.Link{}, waitingQ: map[int]recording.Quarantine{}}
	if traces {
		exp, err := spanExporter(ctx, c)
		if err != nil {
			return nil, err
		}
		t.pipe = newPipeline(exp, c, t.drops)
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(t.pipe), sdktrace.WithResource(res),
			sdktrace.WithSampler(sdktrace.AlwaysSample()))
		t.tracer = t.tp.Tracer(ScopeName, trace.WithInstrumentationVersion(ScopeVersion))
	} else {
		t.tracer = noop.NewTracerProvider().Tracer(ScopeName)
	}
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if metrics {
		reader, handler, err := metricReader(ctx, c, t.metricFailed)
		if err != nil {
			return nil, err
		}
		t.metrics = handler
		mopts = append(mopts, sdkmetric.WithReader(reader))
	}
	t.mp = sdkmetric.NewMeterProvider(mopts...)
	if err := t.m.init(t.meter(), t); err != nil {
		return nil, err
	}
	t.in, t.flush, t.stopped = newIntake(queueLength, t.drops), make(chan chan struct{}), make(chan struct{})
	go t.record()
	if c.traceURL != "" || c.metricURL != "" { // OTLP somewhere
		go t.probe(c)
	}
	return t, nil
}

// probe tries each OTLP collector's address once (a TLS handshake for
// https://), so that one that is not there, or speaks plain text where TLS
// is asked for, is told (Config.OnError) at once, not only when the first
// export gives up.
func (t *Recorder) probe(c Config) {
	seen := map[string]bool{}
	for _, target := range []string{c.traceURL, c.metricURL} {
		u, err := url.Parse(target)
		if target == "" || err != nil || seen[u.Host] {
			continue
		}
		seen[u.Host] = true
		if err := probeOne(u); err != nil && t.cfg.OnError != nil {
			t.cfg.OnError(fmt.Errorf("telemetry: the OTLP collector at %s: %v: exports will fail until it answers", target, err))
		}
	}
}

func probeOne(u *url.URL) error {
	d := &net.Dialer{Timeout: 2 * time.Second}
	if u.Scheme != "https" {
		conn, err := d.Dial("tcp", u.Host)
		if err == nil {
			_ = conn.Close()
		}
		return err
	}
	conn, err := tls.DialWithDialer(d, "tcp", u.Host, &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12})
	if err != nil {
		return fmt.Errorf("TLS handshake failed (%v); if it speaks plain text, give an http:// endpoint", err)
	}
	return conn.Close()
}

// newResource describes the process: the service (name, version, a
// random instance id), OTEL_RESOURCE_ATTRIBUTES, the SDK, the host and
// the process, then Config.Attributes.
func newResource(ctx context.Context, c Config) (*resource.Resource, error) {
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	attrs := []attribute.KeyValue{semconv.ServiceName(c.ServiceName), semconv.ServiceInstanceID(hex.EncodeToString(id))}
	if c.ServiceVersion != "" {
		attrs = append(attrs, semconv.ServiceVersion(c.ServiceVersion))
	}
	for k, v := range c.Attributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	r, err := resource.New(ctx, resource.WithSchemaURL(semconv.SchemaURL), resource.WithTelemetrySDK(), resource.WithHost(),
		resource.WithProcessPID(), resource.WithProcessExecutableName(), resource.WithProcessRuntimeName(),
		resource.WithProcessRuntimeVersion(), resource.WithFromEnv(), resource.WithAttributes(attrs...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("%w: resource: %v", ErrConfig, err)
	}
	return r, nil
}

// record is the recording goroutine: it records what the intake holds,
// fairly across tenants, until the intake closes and empties. It takes a
// bounded number of items at a time, so that a flood that never lets the
// intake empty still leaves room for ticks and flushes.
func (t *Recorder) record() {
	defer close(t.stopped)
	tick := time.NewTicker(quarantineWait)
	defer tick.Stop()
	var flushes []chan struct{} // flushes waiting for what was handed over before them
	some := func() bool {
		for range drainBatch {
			it, ok := t.in.take()
			if !ok {
				return false
			}
			t.recordItem(it)
		}
		t.in.signal() // more waits: come back after the select
		return true
	}
	for {
		select {
		case <-tick.C:
			t.settle(false)
		case <-t.in.wake:
			more := some()
			if !more && t.in.isClosed() {
				t.settle(true)
				for _, done := range flushes {
					close(done)
				}
				return
			}
		case done := <-t.flush:
			t.in.markFlush()
			flushes = append(flushes, done)
			t.in.signal()
		}
		if len(flushes) > 0 && t.in.flushed() {
			t.settle(true)
			for _, done := range flushes {
				close(done)
			}
			flushes = nil
		}
	}
}

// drainBatch is how many items the recording goroutine records between
// looks at its ticks and flushes.
const drainBatch = 256

// hand queues work for the recording goroutine, or drops and counts it.
// After Shutdown it drops and counts (as Behind): work handed over late,
// by a scheduler still running, is never a panic.
func (t *Recorder) hand(it item) { t.in.put(it) }

// PushMetrics exports the metrics as they stand now, to OTLP (Prometheus
// reads them when it scrapes): a scheduler's last values before it stops.
func (t *Recorder) PushMetrics(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.mp.ForceFlush(ctx)
}

// Flush waits until everything handed over so far is recorded and its
// spans exported.
func (t *Recorder) Flush() {
	if t == nil {
		return
	}
	done := make(chan struct{})
	select {
	case t.flush <- done:
		<-done
	case <-t.stopped:
	}
	if t.pipe != nil {
		_ = t.pipe.flush(context.Background())
	}
}

// meter returns the meter for the gauges the scheduler registers
// (nil-safe).
func (t *Recorder) meter() metric.Meter {
	if t == nil {
		return nil
	}
	return t.mp.Meter(ScopeName, metric.WithInstrumentationVersion(ScopeVersion))
}

// MetricsHandler serves the metrics in Prometheus's text format when
// Config.Metrics is prometheus; otherwise (and on a nil Recorder) it is
// nil.
func (t *Recorder) MetricsHandler() http.Handler {
	if t == nil {
		return nil
	}
	return t.metrics
}

// Stats is what the Recorder did with what it was handed.
type Stats struct {
	SpansExported uint64
	// SpansDroppedQueueFull and SpansDroppedExport are spans lost
	// because the export queue was full and because an export failed.
	SpansDroppedQueueFull, SpansDroppedExport uint64
	// Behind is work (submissions, quarantines) dropped unrecorded because
	// the recorder was 8192 items behind, or handed over after Shutdown:
	// neither traced nor counted in metrics. The tenant with the most
	// waiting loses its own first (ByTenant says whose).
	Behind uint64
	// Summarised is refusals folded into an earlier refusal's span (see
	// the package documentation): recorded and counted, not a span each.
	Summarised uint64
	// ByTenant is what each tenant lost (and had summarised), by its
	// lanes.tenant value: "other" for the tenants past Config.MaxTenants,
	// "" for lane quarantines. Only tenants that lost something appear.
	ByTenant map[string]TenantDrops
	// Recorded is submissions recorded (in the metrics, each refusal of a
	// summarised span too). Traced is the lanes.submit spans made for
	// them: one a submission, one for each summarised run of refusals.
	// SampledOut are successes Config.SuccessRatio left untraced.
	Recorded, Traced, SampledOut uint64
	// ExportErrors is failed exports, of spans and of metrics; LastError
	// the latest one's message.
	ExportErrors uint64
	LastError    string
}

// Stats reports what was exported, sampled out and dropped so far.
func (t *Recorder) Stats() Stats {
	if t == nil {
		return Stats{}
	}
	s := Stats{Recorded: t.recorded.Load(), Traced: t.traced.Load(), SampledOut: t.sampledOut.Load(),
		ExportErrors: t.metricErrors.Load(), ByTenant: t.drops.snapshot()}
	for _, d := range s.ByTenant {
		s.Behind += d.Behind
		s.Summarised += d.Summarised
	}
	if m := t.lastMetricErr.Load(); m != nil {
		s.LastError = *m
	}
	if p := t.pipe; p != nil {
		s.SpansExported, s.SpansDroppedQueueFull, s.SpansDroppedExport = p.exported.Load(), p.droppedFull.Load(), p.droppedExport.Load()
		s.ExportErrors += p.exportErrors.Load()
		if m := p.lastError.Load(); m != nil {
			s.LastError = *m
		}
	}
	return s
}

// metricFailed counts a failed metric export and tells Config.OnError.
func (t *Recorder) metricFailed(err error) {
	t.metricErrors.Add(1)
	msg := err.Error()
	t.lastMetricErr.Store(&msg)
	if t.cfg.OnError != nil {
		t.cfg.OnError(err)
	}
}

// Shutdown records what is queued, exports it and stops the exporters.
func (t *Recorder) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	var err error
	t.once.Do(func() {
		t.in.close()
		<-t.stopped
		if t.tp != nil {
			err = t.tp.Shutdown(ctx)
		}
		err = errors.Join(err, t.mp.Shutdown(ctx))
	})
	return err
}

// ParseAttributes parses "k=v,k=v" resource attributes.
func ParseAttributes(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("telemetry: resource attribute %q is not key=value", kv)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return out, nil
}

// sink is a recorder as the scheduler drives it (internal/recording).
type sink struct{ r *Recorder }

func (s sink) Submission(ctx context.Context, sub recording.Submission) { s.r.handSubmission(ctx, sub) }
func (s sink) Quarantine(ctx context.Context, q recording.Quarantine)   { s.r.handQuarantine(ctx, q) }
func (s sink) Meter() metric.Meter                                      { return s.r.meter() }

func init() {
	recording.Register(func(recorder any) recording.Sink {
		r, _ := recorder.(*Recorder)
		return sink{r}
	})
}
