// The file exporter: spans as OTLP JSON (the OTLP/HTTP JSON encoding of an
// ExportTraceServiceRequest, one per line), which trace viewers and the
// OpenTelemetry Collector's file receiver load.

package telemetry

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// otlpJSONExporter writes each export as one line of OTLP JSON.
type otlpJSONExporter struct {
	mu sync.Mutex
	w  *bufio.Writer
	c  io.Closer
}

func newOTLPJSONExporter(wc io.WriteCloser) *otlpJSONExporter {
	return &otlpJSONExporter{w: bufio.NewWriter(wc), c: wc}
}

// The OTLP JSON shapes (field names as the OTLP/JSON mapping spells them:
// lowerCamelCase, ids in hex, 64-bit integers as strings).
type (
	jsonRequest struct {
		ResourceSpans []jsonResourceSpans `json:"resourceSpans"`
	}
	jsonResourceSpans struct {
		Resource   jsonResource     `json:"resource"`
		ScopeSpans []jsonScopeSpans `json:"scopeSpans"`
	}
	jsonResource struct {
		Attributes []jsonKeyValue `json:"attributes"`
	}
	jsonScopeSpans struct {
		Scope jsonScope  `json:"scope"`
		Spans []jsonSpan `json:"spans"`
	}
	jsonScope struct {
		Name    string `json:"name"`
		Version string `json:"version,omitempty"`
	}
	jsonSpan struct {
		TraceID      string         `json:"traceId"`
		SpanID       string         `json:"spanId"`
		ParentSpanID string         `json:"parentSpanId,omitempty"`
		Name         string         `json:"name"`
		Kind         int            `json:"kind"`
		Start        string         `json:"startTimeUnixNano"`
		End          string         `json:"endTimeUnixNano"`
		Attributes   []jsonKeyValue `json:"attributes,omitempty"`
		Events       []jsonEvent    `json:"events,omitempty"`
		Links        []jsonLink     `json:"links,omitempty"`
		Status       jsonStatus     `json:"status"`
	}
	jsonEvent struct {
		Time       string         `json:"timeUnixNano"`
		Name       string         `json:"name"`
		Attributes []jsonKeyValue `json:"attributes,omitempty"`
	}
	jsonLink struct {
		TraceID    string         `json:"traceId"`
		SpanID     string         `json:"spanId"`
		Attributes []jsonKeyValue `json:"attributes,omitempty"`
	}
	jsonStatus struct {
		Code    int    `json:"code,omitempty"`
		Message string `json:"message,omitempty"`
	}
	jsonKeyValue struct {
		Key   string    `json:"key"`
		Value jsonValue `json:"value"`
	}
	jsonValue struct {
		String *string  `json:"stringValue,omitempty"`
		Int    *string  `json:"intValue,omitempty"`
		Double *float64 `json:"doubleValue,omitempty"`
		Bool   *bool    `json:"boolValue,omitempty"`
	}
)

func jsonAttrs(kvs []attribute.KeyValue) []jsonKeyValue {
	out := make([]jsonKeyValue, 0, len(kvs))
	for _, kv := range kvs {
		var v jsonValue
		switch kv.Value.Type() {
		case attribute.BOOL:
			b := kv.Value.AsBool()
			v.Bool = &b
		case attribute.INT64:
			s := strconv.FormatInt(kv.Value.AsInt64(), 10)
			v.Int = &s
		case attribute.FLOAT64:
			f := kv.Value.AsFloat64()
			v.Double = &f
		default:
			s := kv.Value.String()
			v.String = &s
		}
		out = append(out, jsonKeyValue{Key: string(kv.Key), Value: v})
	}
	return out
}

func nanos(t interface{ UnixNano() int64 }) string { return strconv.FormatInt(t.UnixNano(), 10) }

// statusCodes maps the SDK's codes to OTLP's (unset 0, ok 1, error 2).
var statusCodes = map[codes.Code]int{codes.Unset: 0, codes.Ok: 1, codes.Error: 2}

func jsonSpanOf(s sdktrace.ReadOnlySpan) jsonSpan {
	sc := s.SpanContext()
	js := jsonSpan{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String(), Name: s.Name(), Kind: int(s.SpanKind()),
		Start: nanos(s.StartTime()), End: nanos(s.EndTime()), Attributes: jsonAttrs(s.Attributes()),
		Status: jsonStatus{Code: statusCodes[s.Status().Code], Message: s.Status().Description}}
	if p := s.Parent(); p.IsValid() {
		js.ParentSpanID = p.SpanID().String()
	}
	for _, e := range s.Events() {
		js.Events = append(js.Events, jsonEvent{Time: nanos(e.Time), Name: e.Name, Attributes: jsonAttrs(e.Attributes)})
	}
	for _, l := range s.Links() {
		js.Links = append(js.Links, jsonLink{TraceID: l.SpanContext.TraceID().String(), SpanID: l.SpanContext.SpanID().String(), Attributes: jsonAttrs(l.Attributes)})
	}
	return js
}

// ExportSpans writes spans as one request, grouped by resource and scope.
func (e *otlpJSONExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if len(spans) == 0 {
		return nil
	}
	var req jsonRequest
	type scopeKey struct{ name, version string }
	index := map[scopeKey]int{}
	var rs jsonResourceSpans
	if r := spans[0].Resource(); r != nil {
		rs.Resource.Attributes = jsonAttrs(r.Attributes())
	}
	for _, s := range spans {
		k := scopeKey{s.InstrumentationScope().Name, s.InstrumentationScope().Version}
		i, ok := index[k]
		if !ok {
			i = len(rs.ScopeSpans)
			index[k] = i
			rs.ScopeSpans = append(rs.ScopeSpans, jsonScopeSpans{Scope: jsonScope{Name: k.name, Version: k.version}})
		}
		rs.ScopeSpans[i].Spans = append(rs.ScopeSpans[i].Spans, jsonSpanOf(s))
	}
	req.ResourceSpans = []jsonResourceSpans{rs}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return e.w.Flush()
}

// Shutdown flushes and closes the file.
func (e *otlpJSONExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.w.Flush(), e.c.Close())
}
