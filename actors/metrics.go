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
	m := s.rec.Meter()
	if m == nil {
		return nil
	}
	gauges := map[string]metric.Int64ObservableGauge{}
	for _, g := range []struct{ name, unit, desc string }{
		{"lanes.lanes", "{lane}", "lanes by health"},
		{"lanes.lane.in_flight", "{submission}", "admitted submissions per lane"},
		{"lanes.lane.queued", "{batch}", "batches waiting in a lane's fair queue for room on its stream"},
		{"lanes.cache.bytes", "By", "host memory a lane's executables retain (the uploads they captured)"},
		{"lanes.cache.device.bytes", "By", "device memory a lane's executables hold (as the device measures it)"},
		{"lanes.cache.executables", "{executable}", "executables resident in a lane's cache"},
		{"lanes.library.workspace.bytes", "By", "device memory a lane's libraries' workspaces hold"},
	} {
		var err error
		if gauges[g.name], err = m.Int64ObservableGauge(g.name, metric.WithUnit(g.unit), metric.WithDescription(g.desc)); err != nil {
			return err
		}
	}
	moved := map[string]metric.Int64ObservableCounter{}
	for _, c := range []struct{ name, unit, desc string }{
		{"lanes.transfer.h2d", "By", "staged input bytes copied to the device"},
		{"lanes.transfer.d2h", "By", "staged output bytes read back"},
		{"lanes.transfer.uploads", "{copy}", "staged input copies"},
		{"lanes.transfer.readbacks", "{copy}", "staged output reads"},
		{"lanes.graph_launches", "{launch}", "executables launched"},
		{"lanes.output_cache.hits", "{replay}", "staged replays answered without a launch"},
		{"lanes.sync_points", "{wait}", "blocking waits the lane made"},
		{"lanes.graph.warmed", "{executable}", "executables a rebuilt lane captured again before traffic"},
		{"lanes.graph.warm_skipped", "{executable}", "executables a rebuilt lane did not capture again"},
	} {
		var err error
		if moved[c.name], err = m.Int64ObservableCounter(c.name, metric.WithUnit(c.unit), metric.WithDescription(c.desc+", by lane")); err != nil {
			return err
		}
	}
	var observables []metric.Observable
	for _, g := range gauges {
		observables = append(observables, g)
	}
	for _, c := range moved {
		observables = append(observables, c)
	}
	var err error
	s.gauges, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		s.observeLanes(o, gauges, moved)
		return nil
	}, observables...)
	return err
}

// observeLanes reports every lane's gauges and counters, and the lanes by
// health, to one metrics collection.
func (s *Scheduler) observeLanes(o metric.Observer, gauges map[string]metric.Int64ObservableGauge, moved map[string]metric.Int64ObservableCounter) {
	byHealth := map[Health]int64{}
	for _, l := range s.Lanes() {
		byHealth[l.Health]++
		lane := metric.WithAttributes(attribute.Int("lanes.lane.id", l.ID))
		o.ObserveInt64(gauges["lanes.lane.in_flight"], int64(l.InFlight), lane)
		o.ObserveInt64(gauges["lanes.lane.queued"], int64(l.Queued), lane)
		o.ObserveInt64(gauges["lanes.cache.bytes"], l.Counters.CacheBytes, lane)
		o.ObserveInt64(gauges["lanes.cache.device.bytes"], l.Counters.ExecutableDeviceBytes, lane)
		o.ObserveInt64(gauges["lanes.cache.executables"], int64(l.Counters.Executables), lane)
		o.ObserveInt64(gauges["lanes.library.workspace.bytes"], l.Counters.LibraryWorkspaceBytes, lane)
		st := l.Staged
		for name, v := range map[string]uint64{"lanes.transfer.h2d": st.HostToDeviceBytes, "lanes.transfer.d2h": st.DeviceToHostBytes,
			"lanes.transfer.uploads": st.Uploads, "lanes.transfer.readbacks": st.Readbacks, "lanes.graph_launches": st.GraphLaunches + l.Counters.ReplayedSegments,
			"lanes.output_cache.hits": st.OutputCacheHits, "lanes.sync_points": l.Counters.SyncPoints,
			"lanes.graph.warmed": l.Counters.Warmed, "lanes.graph.warm_skipped": l.Counters.WarmSkipped} {
			o.ObserveInt64(moved[name], int64(v), lane)
		}
	}
	for h, n := range byHealth {
		o.ObserveInt64(gauges["lanes.lanes"], n, metric.WithAttributes(attribute.String("lanes.health", h.String())))
	}
}
