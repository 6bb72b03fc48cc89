package actors_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/telemetry"
)

// TestOpsHandler: liveness and readiness follow the scheduler and its
// lanes, /metrics serves Prometheus's text when configured and says where
// metrics go when not, and profiles are there.
func TestOpsHandler(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	defer dev.Close()
	rec, err := telemetry.New(context.Background(), telemetry.Config{Metrics: telemetry.ExportPrometheus})
	if err != nil {
		t.Fatalf("telemetry.New: got err %v, want nil", err)
	}
	defer rec.Shutdown(context.Background())
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2, Telemetry: rec})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	get := func(h http.Handler, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		return w.Code, w.Body.String()
	}
	h := s.OpsHandler(rec)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": `"ready":true`, "/metrics": "lanes_lanes", "/debug/pprof/": "goroutine"} {
		if code, body := get(h, path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET %s: got %d %.200q, want 200 with %q", path, code, body, want)
		}
	}
	_, body := get(h, "/readyz")
	var ready struct {
		Lanes []struct{ Health string }
	}
	if err := json.Unmarshal([]byte(body), &ready); err != nil || len(ready.Lanes) != 2 || ready.Lanes[0].Health != "serving" {
		t.Errorf("/readyz body: got %s (%v), want two healthy lanes", body, err)
	}
	if code, body := get(s.OpsHandler(nil), "/metrics"); code != http.StatusNotFound || !strings.Contains(body, "prometheus") {
		t.Errorf("GET /metrics without Prometheus metrics: got %d %q, want 404 saying so", code, body)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: got err %v, want nil", err)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := get(h, path); code != http.StatusServiceUnavailable {
			t.Errorf("GET %s after Stop: got %d, want 503", path, code)
		}
	}
}
