// Config: where traces and metrics go, and how Config and the standard
// OTEL_* variables combine.

package telemetry

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/lanesched/lanes/internal/codes"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Exporter kinds, for Config.Traces and Config.Metrics.
const (
	ExportNone       = "none"
	ExportOTLPGRPC   = "otlp-grpc"
	ExportOTLPHTTP   = "otlp-http"
	ExportStdout     = "stdout"     // traces: the SDK's debug JSON on stdout
	ExportFile       = "file"       // traces: OTLP JSON, one request per line, to Config.File
	ExportPrometheus = "prometheus" // metrics: served by Recorder.MetricsHandler
)

// ErrConfig marks a configuration New refuses (errors.Is): the caller's,
// not submitted (cuda.Classify: invalid_argument).
var ErrConfig = codes.NewSentinel(codes.InvalidArgument, "telemetry: bad configuration")

// Config selects where traces and metrics go. Each of Traces and Metrics
// left "" is taken from the environment, as the OpenTelemetry spec says:
// OTEL_TRACES_EXPORTER (otlp, console, none) and OTEL_METRICS_EXPORTER
// (otlp, prometheus, none), and otlp for both whenever an
// OTEL_EXPORTER_OTLP_*ENDPOINT variable is set (so a collector that takes
// no metrics, like Jaeger, wants OTEL_METRICS_EXPORTER=none beside it);
// OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf) picks the OTLP
// transport, and the endpoint variables follow Endpoint's rules. With
// neither Config nor environment naming one, nothing is exported and New
// returns nil, which records nothing.
type Config struct {
	// Traces is none, otlp-grpc, otlp-http, stdout or file.
	Traces string
	// Metrics is none, otlp-grpc, otlp-http or prometheus. Metrics need no
	// traces.
	Metrics string
	// Endpoint is the OTLP collector for both signals: a URL (http:// is
	// plain text, https:// TLS) or host:port (plain text on a loopback
	// address, TLS elsewhere). "" leaves it to the OTEL_EXPORTER_OTLP_*
	// variables (and their default, localhost).
	Endpoint string
	// File is where the file exporter writes OTLP JSON.
	File string
	// MetricInterval is how often OTLP metrics are pushed (default:
	// OTEL_METRIC_EXPORT_INTERVAL, else 10 s).
	MetricInterval time.Duration
	// ExportTimeout bounds one export, its retries included (default
	// 10 s): an export that has not succeeded by then has failed.
	ExportTimeout time.Duration

	// SuccessRatio is the fraction of plain successes traced: submissions
	// that succeeded with no cache event and no fallback (a compute
	// command run eagerly for a reason the batch did not choose; eager by
	// its own choice, with no replay key, an eager path or boundary, is
	// plain). Every error, refusal, quarantine, fallback and cache event
	// is traced whatever it says, as is a submission under a sampled
	// caller's span (one under an unsampled caller's is not). 0 means 1:
	// everything. Sampled-out successes are counted
	// (lanes.telemetry.submissions with lanes.disposition sampled_out) and
	// still feed every metric.
	SuccessRatio float64
	// QueueSpans bounds the spans waiting for export (default 65536);
	// BatchSpans is the most spans one export sends (default 4096). A
	// submission's spans are queued and exported together or dropped
	// together, and every span dropped is counted.
	QueueSpans, BatchSpans int
	// MaxTenants bounds the lanes.tenant values metrics carry (default
	// 100): the tenants seen after that are counted as "other".
	MaxTenants int
	// LinkParent makes a submission's span a new trace linked to the
	// caller's span instead of its child.
	LinkParent bool

	// ServiceName (default OTEL_SERVICE_NAME, else "lanes"),
	// ServiceVersion and Attributes (added to the resource, after
	// OTEL_RESOURCE_ATTRIBUTES) describe the process.
	ServiceName, ServiceVersion string
	Attributes                  map[string]string
	// OnError, when set, hears every export failure as it happens (a
	// collector that cannot be reached, say); Stats counts them too.
	OnError func(error)

	// SpanExporter and MetricReader replace the exporters (tests use
	// in-memory ones).
	SpanExporter sdktrace.SpanExporter
	MetricReader sdkmetric.Reader

	// traceURL and metricURL are where OTLP goes, resolved by resolve.
	traceURL, metricURL string
}

// Defaults of the zero Config's fields.
const (
	defaultQueueSpans     = 65536
	defaultBatchSpans     = 4096
	defaultMaxTenants     = 100
	defaultMetricInterval = 10 * time.Second
	defaultExportTimeout  = 10 * time.Second
)

// resolve fills what Config leaves to the environment and the defaults,
// and checks the rest.
func (c Config) resolve() (Config, error) {
	bad := func(format string, args ...any) (Config, error) {
		return c, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	var err error
	if c.Traces == "" && c.SpanExporter == nil {
		if c.Traces, err = fromEnv("OTEL_TRACES_EXPORTER", "TRACES"); err != nil {
			return c, err
		}
	}
	if c.Metrics == "" && c.MetricReader == nil {
		if c.Metrics, err = fromEnv("OTEL_METRICS_EXPORTER", "METRICS"); err != nil {
			return c, err
		}
	}
	switch c.Traces {
	case "", ExportNone, ExportOTLPGRPC, ExportOTLPHTTP, ExportStdout:
	case ExportFile:
		if c.File == "" {
			return bad("the file exporter needs Config.File")
		}
	default:
		return bad("traces exporter %q: use none, otlp-grpc, otlp-http, stdout or file", c.Traces)
	}
	switch c.Metrics {
	case "", ExportNone, ExportOTLPGRPC, ExportOTLPHTTP, ExportPrometheus:
	default:
		return bad("metrics exporter %q: use none, otlp-grpc, otlp-http or prometheus", c.Metrics)
	}
	if c.SpanExporter == nil { // else nothing goes to OTLP
		if c.traceURL, err = otlpURL(c.Endpoint, c.Traces, "TRACES", "/v1/traces"); err != nil {
			return c, err
		}
	}
	if c.MetricReader == nil {
		if c.metricURL, err = otlpURL(c.Endpoint, c.Metrics, "METRICS", "/v1/metrics"); err != nil {
			return c, err
		}
	}
	if v := os.Getenv("OTEL_RESOURCE_ATTRIBUTES"); v != "" {
		if _, err := ParseAttributes(v); err != nil {
			return bad("OTEL_RESOURCE_ATTRIBUTES: %v", err)
		}
	}
	if !(c.SuccessRatio >= 0 && c.SuccessRatio <= 1) {
		return bad("success ratio %v: give a fraction from 0 (meaning all) to 1", c.SuccessRatio)
	}
	if c.SuccessRatio == 0 {
		c.SuccessRatio = 1
	}
	if c.QueueSpans < 0 || c.BatchSpans < 0 || c.MaxTenants < 0 || c.MetricInterval < 0 || c.ExportTimeout < 0 {
		return bad("queue %d, batch %d, tenants %d, interval %v, timeout %v: none may be negative",
			c.QueueSpans, c.BatchSpans, c.MaxTenants, c.MetricInterval, c.ExportTimeout)
	}
	if c.ExportTimeout == 0 {
		c.ExportTimeout = defaultExportTimeout
	}
	c.QueueSpans = orDefault(c.QueueSpans, defaultQueueSpans)
	c.BatchSpans = min(orDefault(c.BatchSpans, defaultBatchSpans), c.QueueSpans)
	c.MaxTenants = orDefault(c.MaxTenants, defaultMaxTenants)
	if c.MetricInterval == 0 {
		c.MetricInterval = defaultMetricInterval
		if v := os.Getenv("OTEL_METRIC_EXPORT_INTERVAL"); v != "" {
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				return bad("OTEL_METRIC_EXPORT_INTERVAL=%q: give a positive number of milliseconds", v)
			}
			c.MetricInterval = time.Duration(ms) * time.Millisecond
		}
	}
	if c.ServiceName == "" {
		c.ServiceName = os.Getenv("OTEL_SERVICE_NAME")
	}
	if c.ServiceName == "" {
		c.ServiceName = "lanes"
	}
	return c, nil
}

func orDefault(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

// fromEnv is the exporter the environment names for one signal: its
// OTEL_*_EXPORTER variable, else otlp when an OTLP endpoint variable is
// set, else none.
func fromEnv(variable, signal string) (string, error) {
	v := strings.TrimSpace(os.Getenv(variable))
	if v == "" && (os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_"+signal+"_ENDPOINT") != "") {
		v = "otlp"
	}
	switch v {
	case "", "none":
		return ExportNone, nil
	case "otlp":
		proto := os.Getenv("OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL")
		if proto == "" {
			proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch proto {
		case "", "grpc":
			return ExportOTLPGRPC, nil
		case "http/protobuf":
			return ExportOTLPHTTP, nil
		}
		return "", fmt.Errorf("%w: OTEL_EXPORTER_OTLP_PROTOCOL %q: lanes speaks grpc and http/protobuf", ErrConfig, proto)
	case "console":
		if signal == "TRACES" {
			return ExportStdout, nil
		}
	case "prometheus":
		if signal == "METRICS" {
			return ExportPrometheus, nil
		}
	}
	return "", fmt.Errorf("%w: %s=%q is not an exporter lanes has for %s", ErrConfig, variable, v, strings.ToLower(signal))
}

// otlpURL is where an OTLP signal exported with exporter goes (""
// unless it is OTLP): Config.Endpoint as a base, else the signal's
// OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT as it is, else
// OTEL_EXPORTER_OTLP_ENDPOINT as a base, else the spec's default
// (http://localhost:4317 for gRPC, :4318 for HTTP). A base gets the
// signal's path over HTTP. Every form follows endpointURL's rules (with
// OTEL_EXPORTER_OTLP_INSECURE=true, a bare host:port is plain text
// everywhere).
func otlpURL(endpoint, exporter, signal, path string) (string, error) {
	if exporter != ExportOTLPGRPC && exporter != ExportOTLPHTTP {
		return "", nil
	}
	from, base := "Config.Endpoint", true
	if endpoint == "" {
		from = "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT"
		if endpoint, base = os.Getenv(from), false; endpoint == "" {
			from, base = "OTEL_EXPORTER_OTLP_ENDPOINT", true
			endpoint = os.Getenv(from)
		}
	}
	if endpoint == "" {
		endpoint = "http://localhost:4317"
		if exporter == ExportOTLPHTTP {
			endpoint = "http://localhost:4318"
		}
	}
	u, err := endpointURL(endpoint)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrConfig, from, err)
	}
	if base && exporter == ExportOTLPHTTP {
		u = strings.TrimSuffix(u, "/") + path
	}
	return u, nil
}

// endpointURL reads an OTLP endpoint as the URL to export to: a URL as it
// is, a bare host:port as http:// on loopback (or with
// OTEL_EXPORTER_OTLP_INSECURE) and https:// elsewhere.
func endpointURL(e string) (string, error) {
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return "", fmt.Errorf("endpoint %q: give http://host:port, https://host:port or host:port", e)
		}
		return e, nil
	}
	host, port, err := net.SplitHostPort(e)
	if err != nil || port == "" {
		return "", fmt.Errorf("endpoint %q: give http://host:port, https://host:port or host:port", e)
	}
	plain := host == "localhost" || strings.EqualFold(os.Getenv("OTEL_EXPORTER_OTLP_INSECURE"), "true")
	if ip := net.ParseIP(host); ip != nil {
		plain = plain || ip.IsLoopback()
	}
	scheme := "https://"
	if plain {
		scheme = "http://"
	}
	return scheme + e, nil
}
