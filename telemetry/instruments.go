// Instruments: every metric lanes records, with its unit, and the bucket
// bounds that let a latency histogram give a percentile.

package telemetry

import (
	"context"
	"errors"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/lanesched/lanes/cache"
)

// latencyBounds are the latency histograms' bucket bounds, in seconds:
// ten per decade (each about 1.26 times the last) from 10 µs to 10 s, so
// a percentile read from the buckets (Prometheus's histogram_quantile)
// is within about a quarter of a bucket's width of the truth.
var latencyBounds = func() []float64 {
	var b []float64
	for k := -50; k <= 10; k++ {
		b = append(b, math.Round(math.Pow(10, float64(k)/10)*1e9)/1e9)
	}
	return b
}()

type instruments struct {
	submissions, replayed, eager, cacheEvents, gaps, quarantines metric.Int64Counter
	graphUpdates, rebindRefusals                                 metric.Int64Counter
	fenceLatency, deviceTime, prepareTime                        metric.Float64Histogram
}

func (m *instruments) init(meter metric.Meter, t *Recorder) error {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.submissions = counter("lanes.submissions", "{submission}", "submissions ended, by outcome, tenant and lane")
	m.replayed = counter("lanes.replayed_segments", "{segment}", "segments replayed from captured graphs, by lane")
	m.eager = counter("lanes.eager_commands", "{command}", "commands enqueued eagerly, by lane")
	m.cacheEvents = counter("lanes.cache.events", "{event}", "executable cache events, by kind and lane")
	m.gaps = counter("lanes.gaps", "{command}", "compute commands run eagerly, by typed reason")
	m.quarantines = counter("lanes.quarantines", "{quarantine}", "lanes taken out of routing, by lane and error type")
	m.graphUpdates = counter("lanes.graph.updates", "{update}", "executables updated in place for a miss of their shape, by how (parameters: no capture; graph: captured and cuGraphExecUpdate) and lane")
	m.rebindRefusals = counter("lanes.graph.rebind_refusals", "{refusal}", "in-place parameter updates refused (the miss was captured instead), by reason and lane")
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(latencyBounds...))
		errs = append(errs, err)
		return h
	}
	m.fenceLatency = histogram("lanes.fence.latency", "submit to receipt, by lane and tenant")
	m.deviceTime = histogram("lanes.device.time", "device time of timed submissions, by lane")
	m.prepareTime = histogram("lanes.graph.prepare.time", "host time of each capture, instantiation, upload, in-place update and rebind, by stage and lane")
	errs = append(errs, t.selfMetrics(meter))
	return errors.Join(errs...)
}

// selfMetrics are the recorder's own counters: what it exported, sampled
// out and dropped.
func (t *Recorder) selfMetrics(meter metric.Meter) error {
	spans, err1 := meter.Int64ObservableCounter("lanes.telemetry.spans", metric.WithUnit("{span}"),
		metric.WithDescription("spans exported, and dropped by reason (queue_full, export_failed) and tenant"))
	subs, err2 := meter.Int64ObservableCounter("lanes.telemetry.submissions", metric.WithUnit("{submission}"),
		metric.WithDescription("work not traced: sampled_out (a success Config.SuccessRatio left out), behind (dropped unrecorded), summarised (a refusal folded into an earlier one's span), by tenant"))
	errs, err3 := meter.Int64ObservableCounter("lanes.telemetry.export_errors", metric.WithUnit("{export}"),
		metric.WithDescription("exports of spans or metrics that failed"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return err
	}
	disposition := func(v, tenant string) metric.ObserveOption {
		if tenant == "" {
			return metric.WithAttributes(attribute.String("lanes.disposition", v))
		}
		return metric.WithAttributes(attribute.String("lanes.disposition", v), attribute.String("lanes.tenant", tenant))
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s := t.Stats()
		o.ObserveInt64(spans, int64(s.SpansExported), disposition("exported", ""))
		o.ObserveInt64(subs, int64(s.SampledOut), disposition("sampled_out", ""))
		// What was lost, by whose it was: a tenant's, or no tenant's (""):
		// lane quarantines', always reported, so the series exist at 0.
		if _, ok := s.ByTenant[""]; !ok {
			s.ByTenant[""] = TenantDrops{}
		}
		for tenant, d := range s.ByTenant {
			o.ObserveInt64(spans, int64(d.SpansQueueFull), disposition("queue_full", tenant))
			o.ObserveInt64(spans, int64(d.SpansExport), disposition("export_failed", tenant))
			o.ObserveInt64(subs, int64(d.Behind), disposition("behind", tenant))
			o.ObserveInt64(subs, int64(d.Summarised), disposition("summarised", tenant))
		}
		o.ObserveInt64(errs, int64(s.ExportErrors))
		return nil
	}, spans, subs, errs)
	return err
}

// noLane marks an attribute set without lanes.lane.id.
const noLane = -2

// attrKey names one metric attribute set: its empty fields are absent.
type attrKey struct {
	outcome, tenant, event string
	reason                 cache.Reason
	stage, how, refusal    string // a preparation stage, an update's kind, a rebind refusal
	lane                   int    // noLane: absent
}

// attrOptions are one attribute set's options, ready to pass to Add and
// Record without allocating.
type attrOptions struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// attrs is the measurement options of an attribute set, built once and
// cached (the sets are bounded: lanes, outcomes, kinds, reasons and
// Config.MaxTenants tenants); called on the recording goroutine only.
func (t *Recorder) attrs(k attrKey) attrOptions {
	if o, ok := t.attrSets[k]; ok {
		return o
	}
	var kv []attribute.KeyValue
	if k.outcome != "" {
		kv = append(kv, attribute.String("lanes.outcome", k.outcome))
	}
	if k.tenant != "" {
		kv = append(kv, attribute.String("lanes.tenant", k.tenant))
	}
	if k.event != "" {
		kv = append(kv, attribute.String("lanes.event", k.event))
	}
	if k.reason != cache.ReasonNone {
		kv = append(kv, attribute.String("lanes.reason", k.reason.String()))
	}
	if k.stage != "" {
		kv = append(kv, attribute.String("lanes.stage", k.stage))
	}
	if k.how != "" {
		kv = append(kv, attribute.String("lanes.update.how", k.how))
	}
	if k.refusal != "" {
		kv = append(kv, attribute.String("lanes.rebind.refusal", k.refusal))
	}
	if k.lane != noLane {
		kv = append(kv, attribute.Int("lanes.lane.id", k.lane))
	}
	m := metric.WithAttributeSet(attribute.NewSet(kv...))
	o := attrOptions{add: []metric.AddOption{m}, record: []metric.RecordOption{m}}
	t.attrSets[k] = o
	return o
}
