// Exporters: the configured span exporter and metric readers, and the
// Prometheus registry /metrics serves.

package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// spanExporter builds the configured span exporter, or nil for none.
func spanExporter(ctx context.Context, c Config) (sdktrace.SpanExporter, error) {
	if c.SpanExporter != nil {
		return c.SpanExporter, nil
	}
	switch c.Traces {
	case ExportOTLPGRPC:
		o := []otlptracegrpc.Option{otlptracegrpc.WithTimeout(c.ExportTimeout), otlptracegrpc.WithRetry(retryFor[otlptracegrpc.RetryConfig](c))}
		o = append(o, otlptracegrpc.WithEndpointURL(c.traceURL))
		return otlptracegrpc.New(ctx, o...)
	case ExportOTLPHTTP:
		o := []otlptracehttp.Option{otlptracehttp.WithTimeout(c.ExportTimeout), otlptracehttp.WithRetry(retryFor[otlptracehttp.RetryConfig](c))}
		o = append(o, otlptracehttp.WithEndpointURL(c.traceURL))
		return otlptracehttp.New(ctx, o...)
	case ExportStdout:
		return stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	case ExportFile:
		f, err := os.Create(c.File)
		if err != nil {
			return nil, fmt.Errorf("%w: trace file: %v", ErrConfig, err)
		}
		return newOTLPJSONExporter(f), nil
	}
	return nil, nil
}

// retrySettings is the shape every OTLP exporter's RetryConfig has.
type retrySettings = struct {
	Enabled                                      bool
	InitialInterval, MaxInterval, MaxElapsedTime time.Duration
}

// retryFor is the exporters' retry policy: back off from 100 ms to 1 s,
// and give up once Config.ExportTimeout has passed.
func retryFor[T ~retrySettings](c Config) T {
	return T(retrySettings{Enabled: true, InitialInterval: 100 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: c.ExportTimeout})
}

// metricReader builds the configured metric reader, or nil for none;
// for Prometheus it also returns the handler that serves it. A pushed
// export that fails is told to failed.
func metricReader(ctx context.Context, c Config, failed func(error)) (sdkmetric.Reader, http.Handler, error) {
	if c.MetricReader != nil {
		return c.MetricReader, nil, nil
	}
	var exp sdkmetric.Exporter
	var err error
	switch c.Metrics {
	case ExportPrometheus:
		reg := prometheus.NewRegistry()
		r, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, nil, err
		}
		return r, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil
	case ExportOTLPGRPC:
		o := []otlpmetricgrpc.Option{otlpmetricgrpc.WithTimeout(c.ExportTimeout), otlpmetricgrpc.WithRetry(retryFor[otlpmetricgrpc.RetryConfig](c))}
		o = append(o, otlpmetricgrpc.WithEndpointURL(c.metricURL))
		exp, err = otlpmetricgrpc.New(ctx, o...)
	case ExportOTLPHTTP:
		o := []otlpmetrichttp.Option{otlpmetrichttp.WithTimeout(c.ExportTimeout), otlpmetrichttp.WithRetry(retryFor[otlpmetrichttp.RetryConfig](c))}
		o = append(o, otlpmetrichttp.WithEndpointURL(c.metricURL))
		exp, err = otlpmetrichttp.New(ctx, o...)
	default:
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return sdkmetric.NewPeriodicReader(countingExporter{exp, failed}, sdkmetric.WithInterval(c.MetricInterval)), nil, nil
}

// countingExporter tells failed about every metric export that fails.
type countingExporter struct {
	sdkmetric.Exporter
	failed func(error)
}

// Export is the wrapped exporter's, its failure told.
func (e countingExporter) Export(ctx context.Context, rm *metricdata.ResourceMetrics) error {
	err := e.Exporter.Export(ctx, rm)
	if err != nil && !errors.Is(err, context.Canceled) { // canceled: shutdown exports again, at once
		e.failed(fmt.Errorf("telemetry: metric export failed: %w", err))
	}
	return err
}
