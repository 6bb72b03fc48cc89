// The Recorder: exporters, the tracer and instruments, and its lifecycle.

package telemetry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Exporter kinds.
const (
	ExportNone     = "none"
	ExportOTLPGRPC = "otlp-grpc"
	ExportOTLPHTTP = "otlp-http"
	ExportStdout   = "stdout"
	ExportFile     = "file"
)

// Config selects exporters. The zero value exports nothing; New then
// returns nil, which records nothing.
type Config struct {
	// Exporter is one of none, otlp-grpc, otlp-http, stdout, file. The
	// OTLP exporters honour the standard OTEL_EXPORTER_OTLP_* variables;
	// Endpoint (host:port, plain text on loopback) overrides them.
	Exporter string
	Endpoint string
	File     string // for file: where spans go, one JSON object each
	// ServiceName names the service (default "lanes"); Attributes are
	// added to the resource ("deployment.environment=dev", say).
	ServiceName string
	Attributes  map[string]string
	// SpanExporter and MetricReader replace the exporters (tests use
	// in-memory ones); spans are then exported synchronously.
	SpanExporter sdktrace.SpanExporter
	MetricReader sdkmetric.Reader
}

// Recorder holds the tracer and instruments. A nil *Recorder records
// nothing.
type Recorder struct {
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	tracer trace.Tracer
	m      instruments
	closer io.Closer

	// Submissions are recorded off the caller's goroutine (a lane's bound
	// thread), by one recorder; a full queue drops and counts.
	queue   chan Submission
	flush   chan chan struct{}
	stopped chan struct{}
	dropped metric.Int64Counter
}

// queueLength bounds the submissions waiting to be recorded.
const queueLength = 8192

type instruments struct {
	submissions, replayed, eager, cacheEvents, gaps, quarantines metric.Int64Counter
	fenceLatency, deviceTime                                     metric.Float64Histogram
}

// New builds the configured pipeline, or returns nil for none.
func New(ctx context.Context, cfg Config) (*Recorder, error) {
	if cfg.SpanExporter == nil && (cfg.Exporter == "" || cfg.Exporter == ExportNone) {
		return nil, nil
	}
	name := cfg.ServiceName
	if name == "" {
		name = "lanes"
	}
	attrs := []attribute.KeyValue{semconv.ServiceName(name)}
	for k, v := range cfg.Attributes {
		attrs = append(attrs, attribute.String(k, v))
	}
	res := resource.NewWithAttributes(semconv.SchemaURL, attrs...)
	t := &Recorder{}
	var opts []sdktrace.TracerProviderOption
	switch {
	case cfg.SpanExporter != nil:
		opts = append(opts, sdktrace.WithSyncer(cfg.SpanExporter))
	default:
		exp, closer, err := exporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		t.closer = closer
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	t.tp = sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)
	t.tracer = t.tp.Tracer("github.com/lanesched/lanes")
	mopts := []sdkmetric.Option{sdkmetric.WithResource(res)}
	if cfg.MetricReader != nil {
		mopts = append(mopts, sdkmetric.WithReader(cfg.MetricReader))
	}
	t.mp = sdkmetric.NewMeterProvider(mopts...)
	meter := t.mp.Meter("github.com/lanesched/lanes")
	if err := t.m.init(meter); err != nil {
		return nil, err
	}
	var err error
	if t.dropped, err = meter.Int64Counter("lanes.telemetry.dropped", metric.WithDescription("submissions not traced: the recorder fell behind")); err != nil {
		return nil, err
	}
	t.queue, t.flush, t.stopped = make(chan Submission, queueLength), make(chan chan struct{}), make(chan struct{})
	go t.record()
	return t, nil
}

// record is the recorder goroutine.
func (t *Recorder) record() {
	defer close(t.stopped)
	for {
		select {
		case s, ok := <-t.queue:
			if !ok {
				return
			}
			t.submission(context.Background(), s)
		case done := <-t.flush:
			for len(t.queue) > 0 {
				t.submission(context.Background(), <-t.queue)
			}
			close(done)
		}
	}
}

// Flush waits until every submission handed over so far is recorded.
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
}

func exporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, io.Closer, error) {
	switch cfg.Exporter {
	case ExportOTLPGRPC:
		var o []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			o = append(o, otlptracegrpc.WithEndpoint(cfg.Endpoint), otlptracegrpc.WithInsecure())
		}
		e, err := otlptracegrpc.New(ctx, o...)
		return e, nil, err
	case ExportOTLPHTTP:
		var o []otlptracehttp.Option
		if cfg.Endpoint != "" {
			o = append(o, otlptracehttp.WithEndpoint(cfg.Endpoint), otlptracehttp.WithInsecure())
		}
		e, err := otlptracehttp.New(ctx, o...)
		return e, nil, err
	case ExportStdout:
		e, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
		return e, nil, err
	case ExportFile:
		if cfg.File == "" {
			return nil, nil, errors.New("telemetry: the file exporter needs Config.File")
		}
		f, err := os.Create(cfg.File)
		if err != nil {
			return nil, nil, fmt.Errorf("telemetry: %w", err)
		}
		e, err := stdouttrace.New(stdouttrace.WithWriter(f))
		return e, f, err
	}
	return nil, nil, fmt.Errorf("telemetry: unknown exporter %q; use none, otlp-grpc, otlp-http, stdout or file", cfg.Exporter)
}

func (m *instruments) init(meter metric.Meter) error {
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.submissions = counter("lanes.submissions", "submissions ended, by outcome")
	m.replayed = counter("lanes.replayed_segments", "segments replayed from captured graphs")
	m.eager = counter("lanes.eager_commands", "commands enqueued eagerly")
	m.cacheEvents = counter("lanes.cache.events", "executable cache events, by kind")
	m.gaps = counter("lanes.gaps", "compute commands run eagerly, by typed reason")
	m.quarantines = counter("lanes.quarantines", "lanes quarantined")
	var err error
	m.fenceLatency, err = meter.Float64Histogram("lanes.fence.latency", metric.WithUnit("s"), metric.WithDescription("submit to receipt"))
	errs = append(errs, err)
	m.deviceTime, err = meter.Float64Histogram("lanes.device.time", metric.WithUnit("s"), metric.WithDescription("device time of timed submissions"))
	errs = append(errs, err)
	return errors.Join(errs...)
}

// Meter returns the meter for gauges the scheduler registers (nil-safe).
func (t *Recorder) Meter() metric.Meter {
	if t == nil {
		return nil
	}
	return t.mp.Meter("github.com/lanesched/lanes")
}

// Shutdown flushes and stops the exporters.
func (t *Recorder) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	close(t.queue)
	<-t.stopped
	err := errors.Join(t.tp.Shutdown(ctx), t.mp.Shutdown(ctx))
	if t.closer != nil {
		err = errors.Join(err, t.closer.Close())
	}
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
