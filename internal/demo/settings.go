// The run's settings as its JSON report records them: everything that
// decides what a run did, so a report can be read (and rerun) on its own.

package demo

import "time"

// Settings are a run's full settings in the JSON report (durations in
// seconds, named so).
type Settings struct {
	Device          string     `json:"device"`
	Clock           string     `json:"clock"`
	Devices         int        `json:"devices"`
	Lanes           int        `json:"lanes_per_device"`
	Tenants         int        `json:"tenants"`
	EagerTenants    int        `json:"eager_tenants"`
	DurationSeconds float64    `json:"duration_s"`
	Steps           int        `json:"steps_per_tenant"`
	Warmup          int        `json:"warmup_steps"`
	Mode            string     `json:"mode"`
	Concurrency     int        `json:"concurrency"`
	NextStep        string     `json:"next_step,omitempty"` // closed loop: lane or caller
	Rate            float64    `json:"rate_per_s"`
	Kernels         int        `json:"kernels"`
	Capacity        int        `json:"capacity"`
	Timing          string     `json:"timing"`
	Transfers       string     `json:"transfers"`
	Faults          FaultRates `json:"faults"`
	Seed            int64      `json:"seed"`
	SpinSeconds     float64    `json:"spin_s"`
	StreamDepth     int        `json:"stream_depth"`
	// MaxInFlightPerLane is the admission bound lanedemo gave the
	// scheduler (0: the default, in open loop): its closed loop's steps fit.
	MaxInFlightPerLane int     `json:"max_in_flight_per_lane,omitempty"`
	Hostile            string  `json:"hostile,omitempty"`
	KernelsFrom        string  `json:"kernels_from,omitempty"`
	SoakSeconds        float64 `json:"soak_s,omitempty"`
	HangSeconds        float64 `json:"hang_timeout_s"`
	WarmupTimeout      float64 `json:"warmup_timeout_s"`
	Rebuild            Rebuild `json:"rebuild"`
	TraceFile          string  `json:"trace_file,omitempty"`
	OTLPEndpoint       string  `json:"otlp_endpoint,omitempty"`
	Metrics            string  `json:"metrics,omitempty"`
	TraceSuccesses     float64 `json:"trace_successes"`
}

// Rebuild is the lanes' rebuild policy (actors.Recovery) in the report.
type Rebuild struct {
	Disabled          bool    `json:"disabled"`
	MaxFailures       int     `json:"max_failures"`
	WindowSeconds     float64 `json:"window_s"`
	BackoffSeconds    float64 `json:"backoff_s"`
	MaxBackoffSeconds float64 `json:"max_backoff_s"`
}

// settings records c as the report shows it, with the scheduler's
// defaults filled in where c leaves them to it.
func (c Config) settings() Settings {
	r := c.Recovery
	rebuild := Rebuild{Disabled: r.Disabled, MaxFailures: orDefault(r.MaxFailures, 5), WindowSeconds: orDur(r.Window, time.Minute),
		BackoffSeconds: orDur(r.Backoff, time.Millisecond), MaxBackoffSeconds: orDur(r.MaxBackoff, time.Second)}
	return Settings{MaxInFlightPerLane: maxInFlightPerLane(c, c.Devices), Device: c.Device, Clock: c.Clock, Devices: c.Devices, Lanes: c.Lanes, Tenants: c.Tenants, EagerTenants: c.EagerTenants,
		DurationSeconds: c.Duration.Seconds(), Steps: c.Steps, Warmup: c.Warmup, Mode: c.Mode, Concurrency: c.Concurrency, NextStep: c.nextStep(), Rate: c.Rate,
		Kernels: c.Kernels, Capacity: c.Capacity, Timing: c.Timing, Transfers: c.Transfers, Faults: c.Faults, Seed: c.Seed,
		SpinSeconds: c.Spin.Seconds(), StreamDepth: c.StreamDepth, Hostile: c.Hostile, KernelsFrom: c.KernelsFrom,
		SoakSeconds: c.Soak.Seconds(), HangSeconds: orDur(c.HangTimeout, 10*time.Second), WarmupTimeout: c.warmupTimeout().Seconds(), Rebuild: rebuild,
		TraceFile: c.Telemetry.TraceFile, OTLPEndpoint: c.Telemetry.OTLPEndpoint, Metrics: c.Telemetry.Metrics,
		TraceSuccesses: c.Telemetry.SuccessRatio}
}

// nextStep is who submits a closed-loop client's next step ("" in an
// open loop).
func (c Config) nextStep() string {
	switch {
	case c.Mode != "closed":
		return ""
	case c.NextStep == "":
		return NextStepLane
	}
	return c.NextStep
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

func orDur(v, d time.Duration) float64 {
	if v <= 0 {
		return d.Seconds()
	}
	return v.Seconds()
}
