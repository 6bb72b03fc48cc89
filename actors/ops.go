// The ops endpoint: one http.Handler a serving process mounts for its
// operators: metrics, liveness, readiness from lane health, and profiles.

package actors

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"

	"github.com/lanesched/lanes/telemetry"
)

// OpsHandler serves what an operator asks a serving process:
//
//	/metrics        the Recorder's metrics in Prometheus's text format
//	                (telemetry.Config.Metrics = prometheus; else 404 saying
//	                where the metrics go)
//	/healthz        200 while the scheduler runs, 503 once stopped
//	/readyz         200 while some lane is healthy (routing can place
//	                work), 503 otherwise; the body lists every lane's health
//	/debug/pprof/   Go's profiles (net/http/pprof)
//
// rec may be nil. Mount it on a listener an operator reaches and others do
// not: it serves profiles.
func (s *Scheduler) OpsHandler(rec *telemetry.Recorder) http.Handler {
	mux := http.NewServeMux()
	if h := rec.MetricsHandler(); h != nil {
		mux.Handle("/metrics", h)
	} else {
		mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "no Prometheus metrics here: telemetry.Config.Metrics is not prometheus (they go to OTLP, or nowhere)", http.StatusNotFound)
		})
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if s.stopping.Load() {
			http.Error(w, "stopped", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", s.serveReady)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// readiness is /readyz's body.
type readiness struct {
	Ready bool         `json:"ready"`
	Lanes []laneHealth `json:"lanes"`
}

type laneHealth struct {
	Lane   int    `json:"lane"`
	Device int    `json:"device"`
	Health string `json:"health"`
	Cause  string `json:"cause,omitempty"`
}

func (s *Scheduler) serveReady(w http.ResponseWriter, _ *http.Request) {
	var r readiness
	for _, st := range s.Lanes() {
		h := laneHealth{Lane: st.ID, Device: st.Device, Health: st.Health.String()}
		if st.Cause != nil {
			h.Cause = st.Cause.Error()
		}
		r.Lanes = append(r.Lanes, h)
		r.Ready = r.Ready || st.Health == HealthServing
	}
	r.Ready = r.Ready && !s.stopping.Load()
	w.Header().Set("Content-Type", "application/json")
	if !r.Ready {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(r)
}
