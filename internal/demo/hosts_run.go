// The --host-per-gpu loop and its report: closed-loop clients per tenant,
// every step's end counted once, rates per host before and after a fault.

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// HostsReport is what a --host-per-gpu run did, per host (or per device
// in process).
type HostsReport struct {
	Mode      string     `json:"mode"` // "lane host per device" or "one process"
	Device    string     `json:"device"`
	MeasuredS float64    `json:"measured_s"`
	FaultAtS  float64    `json:"fault_at_s,omitempty"`
	Hosts     []HostsRow `json:"hosts"`
	Total     HostsRow   `json:"total"`
	Submitted uint64     `json:"submitted"`
	Ended     uint64     `json:"ended"`
	// InFlightAtEnd is what the front's in-flight table (or the lanes)
	// still held once every client returned: 0 when every call ended once.
	InFlightAtEnd int  `json:"in_flight_at_end"`
	ExactlyOnce   bool `json:"exactly_once"`
	// EndedEarly says why the run stopped before its duration ("" when it
	// ran it all): a signal, say.
	EndedEarly string `json:"ended_early,omitempty"`
	// Events are what happened to the cluster's hosts (--cluster), and
	// when the front saw it, in seconds into the measured phase.
	Events []string `json:"events,omitempty"`
}

// HostsRow is one host's (or device's) share of the run.
type HostsRow struct {
	Name           string  `json:"name"`
	Tenants        int     `json:"tenants"`
	Steps          uint64  `json:"steps"`
	StepsPerS      float64 `json:"steps_per_s"`
	BeforeFaultPS  float64 `json:"steps_per_s_before_fault,omitempty"`
	AfterFaultPS   float64 `json:"steps_per_s_after_fault,omitempty"`
	P50us          float64 `json:"p50_us"`
	P99us          float64 `json:"p99_us"`
	Errors         uint64  `json:"errors"`
	RefusedLeaving uint64  `json:"refused_leaving,omitempty"` // steps a leaving host refused (not submitted; the tenant moves once it left)
	Indeterminate  uint64  `json:"indeterminate"`
	StartOvers     uint64  `json:"start_overs"`
	Losses         int     `json:"losses"`
	Restarts       int     `json:"restarts"`
	ServingAgainMS float64 `json:"serving_again_ms,omitempty"` // after the fault's submission
	// RoundTrip is where sampled steps' time went (remote.HostStatus's
	// RoundTrip, means in µs); absent in process and in the total.
	RoundTrip *RoundTripUS `json:"round_trip_us,omitempty"`
	// DataPlane: the front and the host exchanged the run's traffic
	// through shared memory (the same-host data plane), not the remote.
	DataPlane bool `json:"data_plane,omitempty"`
	// NoDataPlane is why the traffic took the remote, when it did.
	NoDataPlane string `json:"no_data_plane,omitempty"`
	// AreaUploads: uploads that crossed in the data plane's upload area
	// (--step-upload of 4 KiB or more), not in their messages.
	AreaUploads uint64 `json:"area_uploads,omitempty"`
}

// RoundTripUS is a host's remote.RoundTrip in microseconds.
type RoundTripUS struct {
	Samples   uint64  `json:"samples"`
	Total     float64 `json:"total"`
	Wire      float64 `json:"wire"`
	HostQueue float64 `json:"host_queue"`
	Lane      float64 `json:"lane"`
	HostReply float64 `json:"host_reply"`
}

func roundTripUS(rt remote.RoundTrip) *RoundTripUS {
	if rt.Samples == 0 {
		return nil
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	return &RoundTripUS{Samples: rt.Samples, Total: us(rt.Total), Wire: us(rt.Wire), HostQueue: us(rt.HostQueue), Lane: us(rt.Lane), HostReply: us(rt.HostReply)}
}

// hostSample is one ended step.
type hostSample struct {
	host string
	at   time.Time
	lat  time.Duration
	err  error
}

// RunHosts runs the --host-per-gpu mode: set up, warm up, then cfg.Duration
// of closed-loop steps (cfg.Concurrency per tenant, cfg.Kernels replayed
// launches each), with the fault midway when asked.
func RunHosts(ctx context.Context, cfg Config) (*Report, error) {
	api, err := startHostsAPI(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer api.stop()
	tenants := make([]*hostsTenant, cfg.Tenants)
	for i := range tenants {
		tenants[i] = &hostsTenant{name: fmt.Sprintf("tenant-%02d", i), index: i, upload: cfg.Hosts.StepUpload}
		if err := tenants[i].setUp(ctx, api, cfg.Kernels); err != nil {
			return nil, fmt.Errorf("lanedemo: set up %s: %w", tenants[i].name, err)
		}
		for range cfg.Warmup {
			if _, err := api.submitStep(ctx, tenants[i], tenants[i].step, tenants[i].enc); err != nil {
				return nil, fmt.Errorf("lanedemo: warm up %s: %w", tenants[i].name, err)
			}
		}
	}
	meter := startRuntimeMeter()
	l := &hostsLoad{cfg: cfg, api: api, start: time.Now()}
	runCtx, stopClients := context.WithTimeout(ctx, cfg.Duration)
	defer stopClients()
	var wg sync.WaitGroup
	for _, t := range tenants {
		for range cfg.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				samples := l.client(runCtx, t)
				l.mu.Lock()
				l.samples = append(l.samples, samples...)
				l.mu.Unlock()
			}()
		}
	}
	var events sync.WaitGroup
	if api.fleet != nil {
		events.Go(func() { api.fleet.schedule(runCtx, cfg, frontOf(api.srv), l.start) })
	}
	var faultSent time.Time
	var faultHost string
	if cfg.Hosts.FaultAt > 0 && cfg.Hosts.FaultAt < cfg.Duration {
		select {
		case <-time.After(cfg.Hosts.FaultAt):
			faultHost, faultSent = injectFault(runCtx, api, tenants[0])
		case <-runCtx.Done():
		}
	}
	wg.Wait()
	events.Wait()
	measured := time.Since(l.start)
	if faultHost != "" {
		// The report says when the faulted host served again: give it
		// the time to, past the run's end when the machine is slow.
		api.awaitServing(ctx, faultHost, 30*time.Second)
	}
	rep := &HostsReport{Mode: "lane host per device", Device: cfg.Device, MeasuredS: measured.Seconds(), Submitted: l.submitted.Load(), Ended: l.ended.Load()}
	if cfg.Hosts.InProcess {
		rep.Mode = "one process"
	}
	rep.InFlightAtEnd = api.inFlight()
	rep.ExactlyOnce = rep.Submitted == rep.Ended && rep.InFlightAtEnd == 0
	if !faultSent.IsZero() {
		rep.FaultAtS = faultSent.Sub(l.start).Seconds()
	}
	rep.rows(cfg, api, tenants, l.samples, l.start, faultSent, faultHost, &l.startOvers)
	if api.fleet != nil {
		rep.Mode = "lane hosts in a cluster"
		api.fleet.mu.Lock()
		rep.Events = api.fleet.events
		api.fleet.mu.Unlock()
	}
	return rep.report(cfg, l, meter), nil
}

// hostsLoad is the measured phase's shared state.
type hostsLoad struct {
	cfg              Config
	api              *hostsSide
	start            time.Time
	mu               sync.Mutex
	samples          []hostSample // every client's, once it stopped
	submitted, ended atomic.Uint64
	// replayed and eager count the ended steps' commands (their receipts'
	// attribution rows).
	replayed, eager atomic.Int64
	startOvers      sync.Map // host -> *atomic.Uint64
}

// client is one closed-loop client of a tenant: a step, its end recorded,
// the next; a tenant told its state was lost starts over. It returns its
// samples: a lock shared by every client, taken at each step, queued
// them up on each other (the load generator's own cost, on both sides of
// a comparison).
func (l *hostsLoad) client(ctx context.Context, t *hostsTenant) (samples []hostSample) {
	for ctx.Err() == nil {
		step, enc, gen := t.current()
		host := l.api.hostOf(t)
		begin := time.Now()
		l.submitted.Add(1)
		rc, err := l.api.submitStep(context.WithoutCancel(ctx), t, step, enc)
		l.ended.Add(1)
		for _, r := range rc.Attribution.Rows {
			if r.Replayed {
				l.replayed.Add(1)
			} else {
				l.eager.Add(1)
			}
		}
		samples = append(samples, hostSample{host: host, at: time.Now(), lat: time.Since(begin), err: err})
		switch {
		case errors.Is(err, remote.ErrHostLeaving):
			time.Sleep(5 * time.Millisecond) // it finishes what it has, then says it left: the tenant moves then
		case errors.Is(err, remote.ErrDeviceStateLost) || errors.Is(err, remote.ErrHostLost) || l.cfg.Hosts.InProcess && cuda.Classify(err).Sticky:
			// A lost host, or in process a poisoned device: either way the
			// tenant forgets and starts over where the door places it.
			v, _ := l.startOvers.LoadOrStore(host, new(atomic.Uint64))
			v.(*atomic.Uint64).Add(1)
			if err := t.startOver(ctx, l.api, l.cfg.Kernels, gen); err != nil && ctx.Err() == nil {
				return samples
			}
		case err != nil && l.cfg.Hosts.InProcess:
			time.Sleep(time.Millisecond) // a poisoned process answers at once: do not spin
		}
	}
	return samples
}

// injectFault submits an out-of-bounds kernel as the tenant: its device
// is poisoned. It returns the tenant's host and when.
func injectFault(ctx context.Context, api *hostsSide, t *hostsTenant) (string, time.Time) {
	host := api.hostOf(t)
	t.mu.Lock()
	buf := t.buf
	t.mu.Unlock()
	cmd, err := cuda.Launch(kernels.Builtin().With(kernels.FaultInjection()).MustSpec(kernels.Poke), cuda.Linear(1, 1),
		cuda.BufferArg(buf.Whole()), cuda.U32Arg(1<<30), cuda.I32Arg(7))
	if err != nil {
		return host, time.Time{}
	}
	at := time.Now()
	_ = api.submit(ctx, t.name, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, cmd)}})
	return host, at
}

// rows fills the per-host rows.
func (rep *HostsReport) rows(cfg Config, api *hostsSide, tenants []*hostsTenant, samples []hostSample, start, fault time.Time, faultHost string, startOvers *sync.Map) {
	status := api.status()
	by := map[string]*HostsRow{}
	lat := map[string][]time.Duration{}
	before, after := map[string]uint64{}, map[string]uint64{}
	row := func(h string) *HostsRow {
		if by[h] == nil {
			by[h] = &HostsRow{Name: h}
			if h == "" {
				by[h].Name = "unplaced" // tenants no host holds at the end: theirs left or was lost, and none took them yet
			}
		}
		return by[h]
	}
	for _, t := range tenants {
		h := api.hostOf(t)
		if _, known := status[t.waitsFor]; h == "" && known {
			h = t.waitsFor // still starting over when the run ended: its host's
		}
		row(h).Tenants++
	}
	for h := range status {
		row(h) // a host that served no step (one that joined late, say) is in the report too
	}
	for _, s := range samples {
		r := row(s.host)
		switch {
		case s.err == nil:
			r.Steps++
			lat[s.host] = append(lat[s.host], s.lat)
			if !fault.IsZero() && s.at.Before(fault) {
				before[s.host]++
			} else if !fault.IsZero() {
				after[s.host]++
			}
		case errors.Is(s.err, actors.ErrIndeterminate):
			r.Indeterminate++
		case errors.Is(s.err, remote.ErrHostLeaving):
			r.RefusedLeaving++
		default:
			r.Errors++
		}
	}
	end := start.Add(time.Duration(rep.MeasuredS * float64(time.Second)))
	for h, r := range by {
		r.StepsPerS = float64(r.Steps) / rep.MeasuredS
		r.P50us, r.P99us = quantileUS(lat[h], .5), quantileUS(lat[h], .99)
		if !fault.IsZero() {
			r.BeforeFaultPS = float64(before[h]) / fault.Sub(start).Seconds()
			r.AfterFaultPS = float64(after[h]) / end.Sub(fault).Seconds()
		}
		if v, ok := startOvers.Load(h); ok {
			r.StartOvers = v.(*atomic.Uint64).Load()
		}
		if st, ok := status[h]; ok {
			if st.HostName != "" {
				r.Name = st.HostName // a cluster's host is found by its address: name it as it names itself
			}
			r.Losses, r.Restarts = st.Losses, st.Restarts
			r.RoundTrip = roundTripUS(st.RoundTrip)
			r.DataPlane, r.NoDataPlane, r.AreaUploads = st.DataPlane, st.NoDataPlane, st.AreaUploads
			if h == faultHost && !fault.IsZero() && st.Health == remote.HostServing && st.Since.After(fault) {
				r.ServingAgainMS = float64(st.Since.Sub(fault).Microseconds()) / 1000
			}
		}
		rep.Hosts = append(rep.Hosts, *r)
		rep.Total.Tenants += r.Tenants
		rep.Total.Steps += r.Steps
		rep.Total.Errors += r.Errors
		rep.Total.RefusedLeaving += r.RefusedLeaving
		rep.Total.Indeterminate += r.Indeterminate
		rep.Total.StartOvers += r.StartOvers
		rep.Total.BeforeFaultPS += r.BeforeFaultPS
		rep.Total.AfterFaultPS += r.AfterFaultPS
		rep.Total.Restarts += r.Restarts
		rep.Total.Losses += r.Losses
		rep.Total.ServingAgainMS = max(rep.Total.ServingAgainMS, r.ServingAgainMS) // the fault's host's
	}
	sort.Slice(rep.Hosts, func(i, j int) bool { return rep.Hosts[i].Name < rep.Hosts[j].Name })
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	rep.Total.Name = "total"
	rep.Total.StepsPerS = float64(rep.Total.Steps) / rep.MeasuredS
	rep.Total.P50us, rep.Total.P99us = quantileUS(all, .5), quantileUS(all, .99)
}

func quantileUS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))].Nanoseconds()) / 1000
}

// WriteTable prints the report.
func (rep *HostsReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "lanedemo: %s, %s device, %.1fs measured", rep.Mode, rep.Device, rep.MeasuredS)
	if rep.FaultAtS > 0 {
		fmt.Fprintf(w, ", an out-of-bounds kernel at %.2fs", rep.FaultAtS)
	}
	fmt.Fprintln(w)
	if rep.EndedEarly != "" {
		fmt.Fprintf(w, "ENDED EARLY: %s\n", rep.EndedEarly)
	}
	fmt.Fprintf(w, "%-8s %7s %9s %9s %9s %9s %9s %9s %7s %7s %7s %6s %8s %10s\n", "host", "tenants", "steps", "steps/s", "before", "after",
		"p50 µs", "p99 µs", "errors", "indet", "restart", "losses", "re-setup", "back (ms)")
	for _, r := range append(rep.Hosts, rep.Total) {
		fmt.Fprintf(w, "%-8s %7d %9d %9.0f %9.0f %9.0f %9.1f %9.1f %7d %7d %7d %6d %8d %10.0f\n", r.Name, r.Tenants, r.Steps, r.StepsPerS,
			r.BeforeFaultPS, r.AfterFaultPS, r.P50us, r.P99us, r.Errors, r.Indeterminate, r.Restarts, r.Losses, r.StartOvers, r.ServingAgainMS)
	}
	fmt.Fprintf(w, "submitted %d, ended %d, still in flight %d: exactly once %v\n", rep.Submitted, rep.Ended, rep.InFlightAtEnd, rep.ExactlyOnce)
	if rep.Total.RefusedLeaving > 0 {
		fmt.Fprintf(w, "refused by a leaving host (not submitted; its tenants moved once it left): %d\n", rep.Total.RefusedLeaving)
	}
	for _, e := range rep.Events {
		fmt.Fprintf(w, "cluster: %s\n", e)
	}
	for _, r := range rep.Hosts {
		way := "the remote"
		switch {
		case r.DataPlane:
			way = "the data plane"
			fmt.Fprintf(w, "%s: through the data plane (shared memory: the host is on this machine)\n", r.Name)
		case r.NoDataPlane != "":
			fmt.Fprintf(w, "%s: through the remote: %s\n", r.Name, r.NoDataPlane)
		}
		if rt := r.RoundTrip; rt != nil {
			fmt.Fprintf(w, "%s round trip through %s (means of %d sampled steps since it registered): %.0f µs: wire both ways %.0f + host queue %.0f + lane %.0f + host reply %.0f\n",
				r.Name, way, rt.Samples, rt.Total, rt.Wire, rt.HostQueue, rt.Lane, rt.HostReply)
		}
		if r.AreaUploads > 0 {
			fmt.Fprintf(w, "%s: %d uploads crossed in the data plane's upload area, not in their messages\n", r.Name, r.AreaUploads)
		}
	}
}
