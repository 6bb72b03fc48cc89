package actors_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/telemetry"
)

// graphMetrics is the graph metric set docs/observability.md names, as
// Prometheus shows it.
var graphMetrics = []string{
	"lanes_replayed_segments_total",
	"lanes_eager_commands_total",
	"lanes_gaps_total",
	"lanes_cache_events_total",
	"lanes_graph_updates_total",
	"lanes_graph_prepare_time_seconds_bucket",
	"lanes_cache_device_bytes",
	"lanes_cache_bytes",
	"lanes_cache_executables",
	"lanes_graph_launches_total",
	"lanes_graph_warmed_total",
}

// TestGraphMetricSet: after captures, in-place updates and replays, the
// graph metric set is on /metrics, and promtool's linter (promlint, what
// `promtool check metrics` runs) finds nothing to say about any metric.
func TestGraphMetricSet(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 3)
	rec, err := telemetry.New(context.Background(), telemetry.Config{Metrics: telemetry.ExportPrometheus})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	defer rec.Shutdown(context.Background())
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 1, Telemetry: rec})
	ctx := context.Background()
	for i := range 6 {
		b := dev.batch(i%3, 4) // three buffers, one shape: a cache of one updates in place
		b.Entries = append(b.Entries, dev.batch(i%3, 1).Entries[0])
		b.Entries[4].Replay = nil // and one eager command
		if _, err := s.Submit(ctx, "t", b); err != nil {
			t.Fatalf("step %d: got err %v, want nil", i, err)
		}
	}
	rec.Flush()
	w := httptest.NewRecorder()
	rec.MetricsHandler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body := w.Body.String()
	for _, name := range graphMetrics {
		if !strings.Contains(body, "\n"+name) {
			t.Errorf("/metrics: no %s", name)
		}
	}
	if !strings.Contains(body, `lanes_update_how="parameters"`) {
		t.Errorf("/metrics: no update by parameters in\n%s", grep(body, "lanes_graph_updates"))
	}
	problems, err := promlint.New(strings.NewReader(body)).Lint()
	if err != nil {
		t.Fatalf("promlint: got err %v, want nil", err)
	}
	for _, p := range problems {
		t.Errorf("promtool check metrics: %s: %s", p.Metric, p.Text)
	}
}

func grep(body, prefix string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
