// Metrics: the scheduler's OpenTelemetry gauges (lane health, in-flight
// and queued depth, cache bytes).

package actors

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// registerGauges reports lane health and in-flight depth as gauges.
func (s *Scheduler) registerGauges() error {
	m := s.cfg.Telemetry.Meter()
	if m == nil {
		return nil
	}
	health, err := m.Int64ObservableGauge("lanes.lanes", metric.WithDescription("lanes by health"))
	if err != nil {
		return err
	}
	depth, err := m.Int64ObservableGauge("lanes.lane.in_flight", metric.WithDescription("admitted submissions per lane"))
	if err != nil {
		return err
	}
	queued, err := m.Int64ObservableGauge("lanes.lane.queued", metric.WithDescription("batches waiting in a lane's fair queue for room on its stream"))
	if err != nil {
		return err
	}
	cacheBytes, err := m.Int64ObservableGauge("lanes.cache.bytes", metric.WithUnit("By"), metric.WithDescription("host memory a lane's executables retain (the uploads they captured)"))
	if err != nil {
		return err
	}
	moved := map[string]metric.Int64ObservableCounter{}
	for _, name := range []string{"lanes.transfer.h2d_bytes", "lanes.transfer.d2h_bytes", "lanes.transfer.uploads", "lanes.transfer.readbacks",
		"lanes.graph_launches", "lanes.output_cache.hits", "lanes.sync_points"} {
		if moved[name], err = m.Int64ObservableCounter(name); err != nil {
			return err
		}
	}
	observables := []metric.Observable{health, depth, queued, cacheBytes}
	for _, c := range moved {
		observables = append(observables, c)
	}
	s.gauges, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		byHealth := map[Health]int64{}
		for _, l := range s.Lanes() {
			byHealth[l.Health]++
			lane := metric.WithAttributes(attribute.Int("lanes.lane.id", l.ID))
			o.ObserveInt64(depth, int64(l.InFlight), lane)
			o.ObserveInt64(queued, int64(l.Queued), lane)
			o.ObserveInt64(cacheBytes, l.Counters.CacheBytes, lane)
			st := l.Staged
			for name, v := range map[string]uint64{"lanes.transfer.h2d_bytes": st.HostToDeviceBytes, "lanes.transfer.d2h_bytes": st.DeviceToHostBytes,
				"lanes.transfer.uploads": st.Uploads, "lanes.transfer.readbacks": st.Readbacks, "lanes.graph_launches": st.GraphLaunches + l.Counters.ReplayedSegments,
				"lanes.output_cache.hits": st.OutputCacheHits, "lanes.sync_points": l.Counters.SyncPoints} {
				o.ObserveInt64(moved[name], int64(v), lane)
			}
		}
		for h, n := range byHealth {
			o.ObserveInt64(health, n, metric.WithAttributes(attribute.String("lanes.health", h.String())))
		}
		return nil
	}, observables...)
	return err
}
