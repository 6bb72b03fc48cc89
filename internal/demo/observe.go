// What an operator sees of a run: where traces and metrics go, the ops
// endpoint, and what the telemetry delivered.

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/telemetry"
)

// TelemetryConfig is where traces and metrics go.
type TelemetryConfig struct {
	OTLPEndpoint string // OTLP collector: host:port or http(s)://host:port (Jaeger, say)
	OTLPProtocol string // grpc or http
	TraceFile    string // spans as OTLP JSON lines to this file
	// Metrics is none, prometheus (served on OpsAddr's /metrics) or otlp
	// (to OTLPEndpoint); "" takes OTEL_METRICS_EXPORTER, else prometheus
	// when OpsAddr is set.
	Metrics string
	// OpsAddr, when set, serves /metrics, /healthz, /readyz and
	// /debug/pprof/ there during the run (a bare :port binds loopback).
	OpsAddr string
	// SuccessRatio is the fraction of plain successes traced (errors,
	// fallbacks and cache events always are).
	SuccessRatio float64
	ServiceName  string // "" takes OTEL_SERVICE_NAME, else lanedemo
	Resource     string // k=v,k=v resource attributes
}

func (t TelemetryConfig) validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case t.OTLPProtocol != "" && t.OTLPProtocol != "grpc" && t.OTLPProtocol != "http":
		return bad("--otlp-protocol %q: use grpc or http", t.OTLPProtocol)
	case t.OTLPEndpoint != "" && t.TraceFile != "":
		return bad("give --otlp-endpoint or --trace-file, not both")
	case t.Metrics != "" && t.Metrics != "none" && t.Metrics != "prometheus" && t.Metrics != "otlp":
		return bad("--metrics %q: use none, prometheus or otlp", t.Metrics)
	case t.Metrics == "prometheus" && t.OpsAddr == "":
		return bad("--metrics prometheus is served on --ops-addr's /metrics: give --ops-addr too")
	case t.Metrics == "" && os.Getenv("OTEL_METRICS_EXPORTER") == "prometheus" && t.OpsAddr == "":
		return bad("OTEL_METRICS_EXPORTER=prometheus is served on --ops-addr's /metrics: give --ops-addr too")
	case !(t.SuccessRatio > 0 && t.SuccessRatio <= 1):
		return bad("--trace-successes %v: give a fraction above 0, up to 1", t.SuccessRatio)
	}
	if t.OpsAddr != "" {
		if _, _, err := net.SplitHostPort(t.OpsAddr); err != nil {
			return bad("--ops-addr %q: give host:port or :port (%v)", t.OpsAddr, err)
		}
	}
	if _, err := telemetry.ParseAttributes(t.Resource); err != nil {
		return bad("--resource: %v", err)
	}
	return nil // the trace file's path is checked by lanedemo's flags, and opened by the recorder
}

// flagNames names, in a telemetry error, the flags its Config's fields
// came from.
var flagNames = strings.NewReplacer("Config.Endpoint:", "--otlp-endpoint:", "trace file:", "--trace-file:")

// recorderConfig turns the flags into the telemetry's configuration.
func (t TelemetryConfig) recorderConfig(onError func(error)) telemetry.Config {
	attrs, _ := telemetry.ParseAttributes(t.Resource)
	tc := telemetry.Config{ServiceName: t.ServiceName, ServiceVersion: telemetry.ScopeVersion, Attributes: attrs,
		SuccessRatio: t.SuccessRatio, Endpoint: t.OTLPEndpoint, OnError: onError}
	if tc.ServiceName == "" && os.Getenv("OTEL_SERVICE_NAME") == "" {
		tc.ServiceName = "lanedemo"
	}
	otlp := telemetry.ExportOTLPGRPC
	if t.OTLPProtocol == "http" {
		otlp = telemetry.ExportOTLPHTTP
	}
	switch {
	case t.OTLPEndpoint != "":
		tc.Traces = otlp
	case t.TraceFile != "":
		tc.Traces, tc.File = telemetry.ExportFile, t.TraceFile
	}
	switch {
	case t.Metrics == "otlp":
		tc.Metrics = otlp
	case t.Metrics == "prometheus" || (t.Metrics == "" && t.OpsAddr != "" && os.Getenv("OTEL_METRICS_EXPORTER") == ""):
		tc.Metrics = telemetry.ExportPrometheus
	case t.Metrics == "none":
		tc.Metrics = telemetry.ExportNone
	}
	return tc
}

// exportErrors prints export failures as they happen, at most one a
// second (Recorder.Stats counts them all).
type exportErrors struct {
	w    io.Writer
	last atomic.Int64 // unix ns of the last one printed
}

func (e *exportErrors) report(err error) {
	now := time.Now().UnixNano()
	if last := e.last.Load(); now-last > int64(time.Second) && e.last.CompareAndSwap(last, now) && e.w != nil {
		fmt.Fprintf(e.w, "lanedemo: %v\n", err)
	}
}

// serveOps serves the scheduler's ops endpoint on addr until the returned
// function is called.
func serveOps(addr string, s *actors.Scheduler, rec *telemetry.Recorder) (func(), error) {
	host, port, _ := net.SplitHostPort(addr)
	if host == "" {
		host = "127.0.0.1"
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
	if err != nil {
		return nil, fmt.Errorf("%w: --ops-addr %s: %v", ErrConfig, addr, err)
	}
	srv := &http.Server{Handler: s.OpsHandler(rec), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// TelemetryReport is what the run's telemetry delivered.
type TelemetryReport struct {
	SpansExported         uint64 `json:"spans_exported"`
	SpansDroppedQueueFull uint64 `json:"spans_dropped_queue_full"`
	SpansDroppedExport    uint64 `json:"spans_dropped_export_failed"`
	Behind                uint64 `json:"submissions_dropped_unrecorded"`
	Recorded              uint64 `json:"submissions_recorded"`
	Traced                uint64 `json:"submissions_traced"`
	SampledOut            uint64 `json:"successes_sampled_out"`
	ExportErrors          uint64 `json:"export_errors"`
	// Summarised are refusals folded into an earlier refusal's span
	// (counted in the metrics, not a span each).
	Summarised uint64 `json:"refusals_summarised"`
	// LostByTenant is what each tenant's telemetry lost, for the tenants
	// that lost something ("": lane quarantines').
	LostByTenant map[string]TenantTelemetry `json:"lost_by_tenant,omitempty"`
	LastError    string                     `json:"last_error,omitempty"`
}

// TenantTelemetry is what one tenant's telemetry lost.
type TenantTelemetry struct {
	Behind     uint64 `json:"submissions_dropped_unrecorded"`
	QueueFull  uint64 `json:"spans_dropped_queue_full"`
	Export     uint64 `json:"spans_dropped_export_failed"`
	Summarised uint64 `json:"refusals_summarised"`
}

// OK reports whether everything made was delivered.
func (t *TelemetryReport) OK() bool {
	return t == nil || (t.SpansDroppedQueueFull+t.SpansDroppedExport+t.Behind+t.ExportErrors == 0)
}

func telemetryReport(s telemetry.Stats) *TelemetryReport {
	r := &TelemetryReport{SpansExported: s.SpansExported, SpansDroppedQueueFull: s.SpansDroppedQueueFull, SpansDroppedExport: s.SpansDroppedExport,
		Behind: s.Behind, Recorded: s.Recorded, Traced: s.Traced, SampledOut: s.SampledOut, ExportErrors: s.ExportErrors, Summarised: s.Summarised,
		LastError: s.LastError}
	for tenant, d := range s.ByTenant {
		if d.Behind+d.SpansQueueFull+d.SpansExport+d.Summarised == 0 {
			continue
		}
		if r.LostByTenant == nil {
			r.LostByTenant = map[string]TenantTelemetry{}
		}
		r.LostByTenant[tenant] = TenantTelemetry{Behind: d.Behind, QueueFull: d.SpansQueueFull, Export: d.SpansExport, Summarised: d.Summarised}
	}
	return r
}

func (t *TelemetryReport) write(w io.Writer) {
	fmt.Fprintf(w, "telemetry: %d spans exported, %d dropped (queue full %d, export failed %d), %d submissions unrecorded, %d successes sampled out, %d refusals summarised, %d export errors\n",
		t.SpansExported, t.SpansDroppedQueueFull+t.SpansDroppedExport, t.SpansDroppedQueueFull, t.SpansDroppedExport, t.Behind, t.SampledOut, t.Summarised, t.ExportErrors)
	tenants := make([]string, 0, len(t.LostByTenant))
	for tenant, d := range t.LostByTenant {
		if d.Behind+d.QueueFull+d.Export > 0 {
			tenants = append(tenants, tenant)
		}
	}
	sort.Strings(tenants)
	for _, tenant := range tenants {
		d, who := t.LostByTenant[tenant], tenant
		if who == "" {
			who = "lane quarantines"
		}
		fmt.Fprintf(w, "telemetry: %s lost %d spans (queue full %d, export failed %d) and %d submissions unrecorded\n", who, d.QueueFull+d.Export, d.QueueFull, d.Export, d.Behind)
	}
	if t.LastError != "" {
		fmt.Fprintf(w, "telemetry: last export error: %s\n", t.LastError)
	}
}

// ErrTelemetry marks a run whose telemetry was not all delivered
// (lanedemo exits 3 on it).
var ErrTelemetry = errors.New("lanedemo: telemetry not delivered")
