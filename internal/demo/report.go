// The run's report: per lane, per tenant and in total, as a table and as
// JSON, and the live progress line.

package demo

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
)

// ReportSchema names the JSON report's format: a consumer checks it, and
// docs/lanedemo-report.schema.json describes it.
const ReportSchema = "lanedemo-report/1"

// Latency is a latency summary in microseconds.
type Latency struct {
	P50 int64 `json:"p50_us"`
	P90 int64 `json:"p90_us"`
	P99 int64 `json:"p99_us"`
	Max int64 `json:"max_us"`
}

func latency(h *hdrhistogram.Histogram) Latency {
	return Latency{P50: h.ValueAtQuantile(50), P90: h.ValueAtQuantile(90), P99: h.ValueAtQuantile(99), Max: h.Max()}
}

// CacheStats are a lane's (or all lanes') cache observations.
type CacheStats struct {
	Hits       uint64 `json:"hits"`
	Captures   uint64 `json:"captures"`
	Rejections uint64 `json:"rejections"`
	Evictions  uint64 `json:"evictions"`
	// Updates are in-place updates of a resident for a miss of its shape,
	// ByParameters those made without a capture (backend.Exec.Rebind).
	Updates      uint64 `json:"updates"`
	ByParameters uint64 `json:"updates_by_parameters"`
	// Executables are resident at the end; DeviceBytes the device memory
	// the executables hold then (backend.Exec.DeviceBytes).
	Executables int   `json:"executables"`
	DeviceBytes int64 `json:"device_bytes"`
	// Warmed are executables rebuilt lanes captured again before traffic.
	Warmed uint64 `json:"warmed"`
}

// add adds o's figures to c.
func (c *CacheStats) add(o CacheStats) {
	c.Hits += o.Hits
	c.Captures += o.Captures
	c.Rejections += o.Rejections
	c.Evictions += o.Evictions
	c.Updates += o.Updates
	c.ByParameters += o.ByParameters
	c.Executables += o.Executables
	c.DeviceBytes += o.DeviceBytes
	c.Warmed += o.Warmed
}

// LaneReport is one lane's part of the run. Steps counts every submission
// the lane ended; StepsPerSec those ended in the measured phase, over it.
type LaneReport struct {
	Lane          int        `json:"lane"`
	Device        int        `json:"device"`
	Health        string     `json:"health"`
	Cause         string     `json:"cause,omitempty"` // its last failure
	Submissions   int64      `json:"steps"`
	StepsPerSec   float64    `json:"steps_per_s"`
	Latency       Latency    `json:"latency"`
	Replayed      int64      `json:"replayed_commands"`
	Eager         int64      `json:"eager_commands"`
	Cache         CacheStats `json:"cache"`
	Succeeded     int64      `json:"succeeded"`
	Indeterminate int64      `json:"indeterminate"`
	Failed        int64      `json:"failed"`
	Recoveries    int        `json:"recoveries"` // times the lane recovered on a fresh stream
}

// TenantReport is what one tenant's clients saw.
type TenantReport struct {
	Tenant      string  `json:"tenant"`
	Hostile     bool    `json:"hostile,omitempty"` // the --hostile tenant
	Lane        int     `json:"lane"`              // the lane its last step ran on (-1: none ran)
	Steps       int64   `json:"steps"`
	StepsPerSec float64 `json:"steps_per_s"`
	Latency     Latency `json:"latency"`
	ReplayShare float64 `json:"replay_share"` // of its commands
	Failed      int64   `json:"failed"`
	Refused     int64   `json:"refused"` // refused at admission
}

// Report is the outcome of a run, as the table and as JSON. Rates are over
// the measured phase alone; the counts (and exactly-once) cover every
// submission, the ones that ended while the run drained too.
type Report struct {
	Schema    string           `json:"schema"` // ReportSchema
	Settings  Settings         `json:"settings"`
	Device    string           `json:"device"`
	Lanes     int              `json:"lanes"`
	Tenants   int              `json:"tenants"`
	Kernels   int              `json:"kernels_per_step"`
	Module    string           `json:"module,omitempty"` // --kernels-from's module file; "" for the built-in kernels
	Telemetry *TelemetryReport `json:"telemetry,omitempty"`
	Mode      string           `json:"mode"`
	Timing    string           `json:"timing"`
	Seconds   float64          `json:"measured_s"` // the measured phase
	// WarmupSeconds is the warm-up's length; DrainSeconds how long the run
	// waited after the measured phase for its submissions to end, and
	// Drained how many ended then.
	WarmupSeconds float64 `json:"warmup_s"`
	DrainSeconds  float64 `json:"drain_s"`
	Drained       int64   `json:"drained_steps"`
	// The warm-up's own submissions, apart from the load's counts below.
	WarmupAccepted int64 `json:"warmup_accepted"`
	WarmupEnded    int64 `json:"warmup_ended"`
	WarmupFailed   int64 `json:"warmup_failed"`
	// EndedEarly says why the run stopped before its end ("" when it ran
	// its course): a signal, every lane out, a failure of the load.
	EndedEarly       string           `json:"ended_early,omitempty"`
	Accepted         int64            `json:"accepted"`
	Ended            int64            `json:"ended"`
	Succeeded        int64            `json:"succeeded"`
	Indeterminate    int64            `json:"indeterminate"`
	Failed           int64            `json:"failed"`
	Refused          map[string]int64 `json:"refused_by_code"`
	StepsPerSec      float64          `json:"steps_per_s"`
	Latency          Latency          `json:"latency"`
	ReplayedCommands int64            `json:"replayed_commands"`
	EagerCommands    int64            `json:"eager_commands"`
	ReplayShare      float64          `json:"replay_share"`
	Cache            CacheStats       `json:"cache"`
	Gaps             map[string]int64 `json:"eager_compute_by_reason"` // compute commands run eagerly, by typed reason
	Quarantined      int              `json:"lanes_out"`
	Recoveries       int              `json:"lane_recoveries"` // all lanes
	Unrouted         int64            `json:"unrouted"`        // admitted, then ended before any lane took them
	ExactlyOnce      bool             `json:"exactly_once"`    // accepted == ended
	PerLane          []LaneReport     `json:"per_lane"`
	Hostile          string           `json:"hostile,omitempty"` // the --hostile mode
	PerTenant        []TenantReport   `json:"per_tenant"`
	Runtime          RuntimeReport    `json:"go_runtime"`
	Soak             *SoakReport      `json:"soak,omitempty"`
	// Hosts is a --host-per-gpu run's per-host section: each lane host's
	// (or, in process, each device's) share, what happened to them, and
	// where a step's time went through the remote.
	Hosts *HostsReport `json:"hosts,omitempty"`
}

func (a *aggregate) report(cfg Config, status []actors.LaneStatus, devs []cuda.Device, tenants []*tenant) *Report {
	a.mu.Lock()
	defer a.mu.Unlock()
	total, gaps := newHist(), map[string]int64{}
	for _, l := range a.lanes {
		l.mu.Lock()
		defer l.mu.Unlock() // held until the per-lane rows below are read
		total.Merge(l.hist)
		for reason, n := range l.gaps {
			gaps[reason.String()] += n
		}
	}
	secs := max(a.elapsed.Seconds(), 1e-9) // a divisor; the report says 0 when nothing was measured
	r := &Report{Schema: ReportSchema, Settings: cfg.settings(), Device: deviceName(cfg, devs), Lanes: len(status), Tenants: cfg.Tenants, Kernels: cfg.Kernels,
		Mode: cfg.Mode, Timing: cfg.Timing, Seconds: a.elapsed.Seconds(), Accepted: a.accepted.Load(), Ended: a.endedN.Load(),
		Refused: a.refusals, Latency: latency(total), Gaps: gaps}
	for i, st := range status {
		l := a.lanes[i]
		lr := LaneReport{Lane: st.ID, Device: st.Device, Health: st.Health.String(), Submissions: l.subs,
			StepsPerSec: float64(l.measured) / secs, Latency: latency(l.hist), Replayed: l.replayed, Eager: l.eager,
			Cache: CacheStats{Hits: st.Counters.Hits, Captures: st.Counters.Captured,
				Rejections: st.Counters.CaptureRejections + st.Counters.CachedRejections, Evictions: st.Counters.Evictions,
				Updates: st.Counters.Updated, ByParameters: st.Counters.Rebound, Executables: st.Counters.Executables,
				DeviceBytes: st.Counters.ExecutableDeviceBytes, Warmed: st.Counters.Warmed},
			Succeeded: l.ok, Indeterminate: l.indeterminate, Failed: l.failed, Recoveries: st.Recoveries}
		r.Recoveries += st.Recoveries
		if st.Cause != nil {
			lr.Cause = st.Cause.Error()
		}
		if st.Health == actors.HealthQuarantined {
			r.Quarantined++
		}
		r.Succeeded += l.ok
		r.Indeterminate += l.indeterminate
		r.Failed += l.failed
		r.ReplayedCommands += l.replayed
		r.EagerCommands += l.eager
		r.Cache.add(lr.Cache)
		r.PerLane = append(r.PerLane, lr)
	}
	if u := a.lanes[len(a.lanes)-1]; u.subs > 0 {
		r.Unrouted = u.subs
		r.Succeeded += u.ok
		r.Indeterminate += u.indeterminate
		r.Failed += u.failed
	}
	r.StepsPerSec = float64(a.measuredEnded) / secs
	r.Drained = r.Ended - a.measuredEnded
	if n := r.ReplayedCommands + r.EagerCommands; n > 0 {
		r.ReplayShare = float64(r.ReplayedCommands) / float64(n)
	}
	r.WarmupAccepted, r.WarmupEnded, r.WarmupFailed = a.warmAccepted.Load(), a.warmEndedN.Load(), a.warmFailed.Load()
	r.ExactlyOnce = r.Accepted == r.Ended && r.WarmupAccepted == r.WarmupEnded
	r.Hostile = cfg.Hostile
	for _, tn := range tenants {
		t := tn.stats
		t.mu.Lock()
		tr := TenantReport{Tenant: tn.name, Hostile: tn.hostile, Lane: t.lane, Steps: t.subs, StepsPerSec: float64(t.measured) / secs,
			Latency: latency(t.hist), Failed: t.failed, Refused: t.refused}
		if n := t.replayed + t.eager; n > 0 {
			tr.ReplayShare = float64(t.replayed) / float64(n)
		}
		t.mu.Unlock()
		r.PerTenant = append(r.PerTenant, tr)
	}
	return r
}

// deviceName is the device as the report names it: the simulator says
// which clock it ran on.
func deviceName(cfg Config, devs []cuda.Device) string {
	name := devs[0].Info().Name
	if cfg.Device == "sim" {
		switch cfg.Clock {
		case "real":
			name += ", real-time clock"
		case "zero":
			name += ", zero-cost clock"
		case "none":
			name += ", no time and no bytes"
		}
	}
	return name
}

// maxTenantRows is the most tenants the table lists one by one.
const maxTenantRows = 24

// writeTenants prints the per-tenant rows (or, with many tenants, the
// spread of their p99 and the hostile tenant's row).
func (r *Report) writeTenants(w io.Writer) {
	if len(r.PerTenant) == 0 {
		return
	}
	rows := r.PerTenant
	fmt.Fprintln(w)
	if len(rows) > maxTenantRows {
		writeTenantSpread(w, rows)
		rows = slices.DeleteFunc(slices.Clone(rows), func(t TenantReport) bool { return !t.Hostile })
		if len(rows) == 0 {
			return
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "tenant\tlane\tsteps\tsteps/s\tp50 µs\tp99 µs\treplayed\tfailed\trefused\t")
	for _, t := range rows {
		name := t.Tenant
		if t.Hostile {
			name += " (" + r.Hostile + ")"
		}
		lane := "-"
		if t.Lane >= 0 {
			lane = fmt.Sprint(t.Lane)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%d\t%d\t%.1f%%\t%d\t%d\t\n", name, lane, t.Steps, t.StepsPerSec, t.Latency.P50, t.Latency.P99, 100*t.ReplayShare, t.Failed, t.Refused)
	}
	tw.Flush()
}

// OK reports whether the run passed its own checks.
func (r *Report) OK() bool { return r.ExactlyOnce && (r.Soak == nil || r.Soak.OK()) }

// WriteTable prints the report for a person.
func (r *Report) WriteTable(w io.Writer) {
	from := ""
	if r.Module != "" {
		from = " from " + r.Module
	}
	tenants := plural(r.Tenants, "tenant")
	if r.Hostile != "" {
		tenants += " and a hostile one (" + r.Hostile + ")"
	}
	lanes := plural(r.Lanes, "lane")
	if d := r.Settings.Devices; d > 1 {
		lanes = fmt.Sprintf("%d devices x %s", d, plural(r.Settings.Lanes, "lane"))
	}
	loop := r.Mode + " loop"
	switch r.Settings.NextStep {
	case NextStepLane:
		loop += " (next step from the last one's end)"
	case NextStepCaller:
		loop += " (next step from a waiting caller)"
	}
	fmt.Fprintf(w, "lanedemo: %s, %s, %s, %d kernels/step%s, %s, timing %s, %.1fs measured (warm-up %.1fs, drain %.1fs)\n",
		r.Device, lanes, tenants, r.Kernels, from, loop, r.Timing, r.Seconds, r.WarmupSeconds, r.DrainSeconds)
	if r.EndedEarly != "" {
		fmt.Fprintf(w, "ENDED EARLY: %s\n", r.EndedEarly)
	}
	if r.Drained > 0 && r.DrainSeconds >= 0.1 {
		fmt.Fprintf(w, "draining: %d submissions ended in the %.1fs after the measured phase (counted below, not in its rates)\n", r.Drained, r.DrainSeconds)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "lane\thealth\tsteps\tsteps/s\tp50 µs\tp90 µs\tp99 µs\tmax µs\treplayed\teager\thits\tcaptures\trejections\tevictions\tfailed\t")
	row := func(name, health string, subs int64, sps float64, l Latency, rep, eag int64, c CacheStats, failed int64) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", name, health, subs, sps,
			l.P50, l.P90, l.P99, l.Max, rep, eag, c.Hits, c.Captures, c.Rejections, c.Evictions, failed)
	}
	for _, l := range r.PerLane {
		row(fmt.Sprint(l.Lane), l.Health, l.Submissions, l.StepsPerSec, l.Latency, l.Replayed, l.Eager, l.Cache, l.Failed+l.Indeterminate)
	}
	row("total", r.healthSummary(), r.Ended, r.StepsPerSec, r.Latency,
		r.ReplayedCommands, r.EagerCommands, r.Cache, r.Failed+r.Indeterminate)
	tw.Flush()
	r.writeTenants(w)
	if c := r.Cache; c.Executables > 0 || c.Updates > 0 {
		fmt.Fprintf(w, "\nexecutables: %d resident holding %.1f MiB of device memory; %d updated in place (%d by parameters, no capture)",
			c.Executables, float64(c.DeviceBytes)/(1<<20), c.Updates, c.ByParameters)
		if c.Warmed > 0 {
			fmt.Fprintf(w, "; %d captured again by rebuilt lanes before traffic", c.Warmed)
		}
	}
	fmt.Fprintf(w, "\nreplay share %.1f%% of commands", 100*r.ReplayShare)
	if len(r.Gaps) > 0 {
		fmt.Fprintf(w, "; compute run eagerly, by reason: %s", counts(r.Gaps))
	}
	fmt.Fprintln(w)
	if len(r.Refused) > 0 {
		fmt.Fprintf(w, "refused at admission: %s\n", counts(r.Refused))
	}
	if r.Indeterminate+r.Failed > 0 || r.Quarantined > 0 || r.Recoveries > 0 {
		fmt.Fprintf(w, "failures: %d indeterminate, %d failed (%d before reaching a lane); %d lane recoveries; %d lanes out for good\n",
			r.Indeterminate, r.Failed, r.Unrouted, r.Recoveries, r.Quarantined)
		for _, l := range r.PerLane {
			if l.Cause != "" {
				fmt.Fprintf(w, "  lane %d: %s\n", l.Lane, l.Cause)
			}
		}
	}
	check := "ok"
	if !r.ExactlyOnce {
		check = "FAILED"
	}
	fmt.Fprintf(w, "exactly once: %d accepted, %d ended; warm-up %d accepted, %d ended, %d failed (%s)\n", r.Accepted, r.Ended,
		r.WarmupAccepted, r.WarmupEnded, r.WarmupFailed, check)
	r.Runtime.write(w)
	if r.Telemetry != nil {
		r.Telemetry.write(w)
	}
	if r.Soak != nil && len(r.Soak.Samples) > 0 {
		r.Soak.write(w)
	}
}

// healthSummary is how many lanes are serving, recovering or out: "4/4
// serving", or "2/4 serving, 1 recovering, 1 out".
func (r *Report) healthSummary() string {
	healthy, out := 0, 0
	for _, l := range r.PerLane {
		switch l.Health {
		case "serving":
			healthy++
		case "quarantined", "stopped":
			out++
		}
	}
	s := fmt.Sprintf("%d/%d serving", healthy, len(r.PerLane))
	if rec := len(r.PerLane) - healthy - out; rec > 0 {
		s += fmt.Sprintf(", %d recovering", rec)
	}
	if out > 0 {
		s += fmt.Sprintf(", %d out", out)
	}
	return s
}

// plural is n and the noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func counts(m map[string]int64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// writeTenantSpread summarises many tenants (the hostile one aside, which
// gets its own row): how many ran a step in the measured phase, and the
// least, median and most of their steps, p99 and replay share.
func writeTenantSpread(w io.Writer, rows []TenantReport) {
	var steps, p99 []int64
	var share []float64
	idle := 0
	for _, t := range rows {
		switch {
		case t.Hostile:
		case t.Steps == 0:
			idle++
		default:
			steps, p99, share = append(steps, t.Steps), append(p99, t.Latency.P99), append(share, t.ReplayShare)
		}
	}
	if len(steps) == 0 {
		fmt.Fprintf(w, "tenants: %d, none ran a step in the measured phase\n", idle)
		return
	}
	slices.Sort(steps)
	slices.Sort(p99)
	slices.Sort(share)
	mid := len(steps) / 2
	fmt.Fprintf(w, "tenants: %d ran steps in the measured phase", len(steps))
	if idle > 0 {
		fmt.Fprintf(w, ", %d none", idle)
	}
	fmt.Fprintf(w, " (min, median, max; JSON lists each)\n")
	fmt.Fprintf(w, "  steps %d, %d, %d; p99 µs %d, %d, %d; replayed %.1f%%, %.1f%%, %.1f%%\n",
		steps[0], steps[mid], steps[len(steps)-1], p99[0], p99[mid], p99[len(p99)-1], 100*share[0], 100*share[mid], 100*share[len(share)-1])
}
