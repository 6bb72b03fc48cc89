// Running the load: options, warmup, the closed and open loops.

package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/ptx"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/telemetry"
	"go.opentelemetry.io/otel"
	"golang.org/x/sync/errgroup"
)

// Options are how a run reports while it runs.
type Options struct {
	Progress io.Writer // nil: no progress
	Terminal bool      // rewrite one progress line instead of printing lines
	// Errors hears problems during the run that do not stop it (a
	// telemetry export that failed, at most one a second); nil: Progress.
	Errors io.Writer
	// References are Go references of --kernels-from kernels, by name:
	// the simulated device runs them (a manifest carries none, so without
	// them only --device cuda runs it).
	References map[string]Reference
}

// Run runs the demo: it opens the devices, starts a scheduler, warms up
// (preparation is open: the first steps capture), seals every lane, then
// drives the configured load and returns the report.
func Run(ctx context.Context, cfg Config, opt Options) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The set-up runs to its end even when ctx ends meanwhile (a signal):
	// the run then stops before its warm-up, with a report that says so.
	lc := &lifecycle{}
	defer lc.watch(ctx)()
	runCtx, ctx := ctx, context.WithoutCancel(ctx)
	work, err := userWorkload(&cfg, opt)
	if err != nil {
		return nil, err
	}
	devs, err := openDevices(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, d := range devs {
			_ = d.Close()
		}
	}()
	tenants, err := setup(cfg, work, devs)
	if errors.Is(err, ErrConfig) {
		return nil, err // a manifest the device refused says so itself
	}
	if err != nil {
		return nil, fmt.Errorf("lanedemo: set up tenants: %w", err)
	}
	capacity := cfg.Capacity
	if capacity == 0 {
		capacity = -1
	}
	tel, shutdownTelemetry, err := startTelemetry(ctx, cfg, opt)
	if err != nil {
		return nil, err
	}
	defer func() { _ = shutdownTelemetry() }()
	s, err := actors.Start(ctx, actors.Config{Devices: devs, LanesPerDevice: cfg.Lanes, CacheCapacity: capacity,
		MaxInFlightPerTenant: max(64, 2*cfg.Concurrency), MaxInFlightPerLane: maxInFlightPerLane(cfg, len(devs)), MaxBatchEntries: maxBatchEntries(cfg), StreamDepth: cfg.StreamDepth, Spin: cfg.Spin, Telemetry: tel,
		HangTimeout: cfg.HangTimeout, Recovery: cfg.Recovery})
	if err != nil {
		return nil, err
	}
	if cfg.Telemetry.OpsAddr != "" {
		stopOps, err := serveOps(cfg.Telemetry.OpsAddr, s, tel)
		if err != nil {
			_ = s.Stop(context.Background())
			return nil, err
		}
		defer stopOps()
	}
	agg := newAggregate(len(devs) * cfg.Lanes)
	agg.tenants = tenants
	timing := timings[cfg.Timing]
	stopErr := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		return s.Stop(sctx)
	}
	w := startWatchers(cfg, opt, s, devs, agg, lc)
	loadErr := phases(runCtx, cfg, s, tenants, timing, agg, lc, w, capacity)
	status := s.Lanes() // before Stop, which stops every lane
	if err := stopErr(); err != nil {
		w.stop()
		return nil, fmt.Errorf("lanedemo: stop: %w", err)
	}
	agg.waitEnded(10 * time.Second)
	lc.mu.Lock()
	lc.drainEnd = time.Now()
	lc.mu.Unlock()
	w.stop()
	rep := finalReport(cfg, agg, status, devs, tenants, lc, w, work)
	if tel != nil {
		_ = shutdownTelemetry() // what it could not deliver is in the stats
		rep.Telemetry = telemetryReport(tel.Stats())
		if !rep.Telemetry.OK() && loadErr == nil {
			loadErr = fmt.Errorf("%w: %d spans dropped, %d submissions unrecorded, %d export errors", ErrTelemetry,
				rep.Telemetry.SpansDroppedQueueFull+rep.Telemetry.SpansDroppedExport, rep.Telemetry.Behind, rep.Telemetry.ExportErrors)
		}
	}
	if loadErr == nil && rep.EndedEarly != "" {
		loadErr = fmt.Errorf("%w: %s", ErrEndedEarly, rep.EndedEarly)
	}
	return rep, loadErr
}

// finalReport composes the run's report once every lane stopped: the
// aggregate's rows, the phases' durations, the module, the soak.
func finalReport(cfg Config, agg *aggregate, status []actors.LaneStatus, devs []cuda.Device, tenants []*tenant, lc *lifecycle, w *watchers, work *workload) *Report {
	warm, measured, drain := lc.durations()
	agg.elapsed = measured
	rep := agg.report(cfg, status, devs, tenants)
	rep.Runtime = w.runtime
	rep.WarmupSeconds, rep.DrainSeconds, rep.EndedEarly = warm.Seconds(), drain.Seconds(), lc.endedEarly
	if work != nil {
		rep.Module = work.image
	}
	if w.soak != nil {
		rep.Soak = w.soak.report()
	}
	return rep
}

// userWorkload reads the --kernels-from manifest and module, if any, and
// sets the step's kernel count from it; nil without one.
func userWorkload(cfg *Config, opt Options) (*workload, error) {
	if cfg.KernelsFrom == "" {
		return nil, nil
	}
	work, err := loadWorkload(cfg.KernelsFrom)
	if err != nil {
		return nil, err
	}
	// The image first: a declaration it contradicts is refused on any
	// device, before the simulator asks for Go references.
	if err := work.readImage(); err != nil {
		return nil, err
	}
	if _, _, err := ptx.CheckImage(work.module); err != nil {
		return nil, errManifest(work.dir, "%v", err)
	}
	if err := work.withReferences(cfg.Device, opt.References); err != nil {
		return nil, err
	}
	cfg.Kernels = len(work.step)
	return work, nil
}

// startTelemetry starts the run's recorder (nil when the run exports
// nothing) with the SDK's own complaints routed, rate limited, to
// opt.Errors; shutdown flushes it within 5 s.
func startTelemetry(ctx context.Context, cfg Config, opt Options) (tel *telemetry.Recorder, shutdown func() error, err error) {
	exportErrs := &exportErrors{w: opt.Errors}
	if exportErrs.w == nil {
		exportErrs.w = opt.Progress
	}
	// The SDK's own complaints (an upload that failed, say) join ours, rate
	// limited, instead of its default log lines.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(exportErrs.report))
	tel, err = telemetry.New(ctx, cfg.Telemetry.recorderConfig(exportErrs.report))
	if errors.Is(err, telemetry.ErrConfig) {
		// The telemetry names its Config's fields: here they are flags.
		msg := flagNames.Replace(strings.TrimPrefix(err.Error(), telemetry.ErrConfig.Error()+": "))
		return nil, nil, fmt.Errorf("%w: %s (see --help)", ErrConfig, msg)
	}
	if err != nil {
		return nil, nil, err
	}
	return tel, func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return tel.Shutdown(sctx)
	}, nil
}

// ErrEndedEarly marks a run that stopped before its end (a signal, every
// lane out for good, a failed warm-up): its report is true, and says why.
var ErrEndedEarly = errors.New("lanedemo: the run ended early")

// phases runs warm-up, sealing and the measured phase, and ends the
// measured phase (the run drains after it). An interruption or a lane
// that cannot be sealed ends the run early, with a report; an error of
// the load itself is returned.
func phases(ctx context.Context, cfg Config, s *actors.Scheduler, tenants []*tenant, timing lanes.TimingMode, agg *aggregate, lc *lifecycle, w *watchers, capacity int) error {
	if lc.interrupted(ctx) {
		return nil
	}
	lc.mu.Lock()
	lc.warmStart = time.Now()
	lc.mu.Unlock()
	lc.phase.Store(phaseWarmup)
	wctx, cancel := context.WithTimeout(ctx, cfg.warmupTimeout())
	err := warmup(wctx, cfg, s, tenants, timing, lc, agg)
	cancel()
	if err != nil {
		switch {
		case lc.interrupted(ctx):
			return nil
		case wctx.Err() != nil:
			lc.endEarly("the warm-up did not finish within --warmup-timeout %v (%d of %d steps submitted; a lane that does not come back keeps it waiting)",
				cfg.warmupTimeout(), lc.warmDone.Load(), lc.warmTotal.Load())
			return nil
		}
		lc.endEarly("the warm-up failed: %v", err)
		return nil
	}
	if capacity > 0 && cfg.Hostile != "churn" { // churn: preparation stays open, so each new key is captured
		if err := sealAll(ctx, s, len(s.Lanes())); err != nil {
			if lc.interrupted(ctx) {
				return nil
			}
			return err
		}
	}
	if cfg.Soak > 0 {
		cfg.Duration, cfg.Steps = cfg.Soak, 0
	}
	lc.beginMeasured()
	w.measuring(cfg, s, agg, lc)
	loadErr := drive(ctx, cfg, s, tenants, timing, agg, lc)
	lc.endMeasured(agg) // Steps mode: the last step ended; else it ended at the deadline
	_, measured, _ := lc.durations()
	w.measured(agg, measured)
	if !lc.interrupted(ctx) {
		lc.noteAllOut(s, cfg)
	}
	return loadErr
}

// sealAll seals every lane's preparation. A lane that failed or hung is
// skipped (it rebuilds with its preparation open, and the report shows
// its health); only a cancelled context stops it.
func sealAll(ctx context.Context, s *actors.Scheduler, lanesN int) error {
	for lane := range lanesN {
		if _, err := s.Seal(ctx, lane); err != nil && ctx.Err() != nil {
			return fmt.Errorf("lanedemo: seal lane %d: %w", lane, err)
		}
	}
	return nil
}

// warmup runs a few steps per tenant while preparation is open, one at a
// time, so every tenant's chain is captured before the cache is sealed:
// each worker's whose copies are graph nodes (its staging is baked in),
// else the first's.
func warmup(ctx context.Context, cfg Config, s *actors.Scheduler, tenants []*tenant, timing lanes.TimingMode, lc *lifecycle, agg *aggregate) error {
	slotsOf := func(tn *tenant) []int {
		switch {
		case cfg.Mode == "open":
			return []int{-1} // open-loop steps upload their input: that step's shape is the one to capture
		case tn.fused:
			slots := []int{0}
			for slot := 1; slot < min(len(tn.staging), fusedSlots); slot++ {
				slots = append(slots, slot)
			}
			return slots
		}
		return []int{0}
	}
	var total int64
	for _, tn := range tenants {
		total += int64(cfg.Warmup * len(slotsOf(tn)))
	}
	lc.warmTotal.Store(total)
	for range cfg.Warmup {
		for _, tn := range tenants {
			for _, slot := range slotsOf(tn) {
				if err := ctx.Err(); err != nil {
					return err
				}
				lc.warmDone.Add(1)
				b, err := tn.step(timing, slot)
				if err != nil {
					return err
				}
				// Admitted, a step is the run's: it ends on its own, and is
				// counted, even when the warm-up stops waiting for it.
				p, err := s.SubmitAsync(context.Background(), tn.name, b)
				if err != nil {
					if faultError(cfg, err) {
						continue
					}
					return fmt.Errorf("lanedemo: warm-up of %s: %w", tn.name, err)
				}
				agg.warmAccepted.Add(1)
				select {
				case <-p.Done():
					agg.warmEnded(p)
				case <-ctx.Done():
					go agg.warmEnded(p)
					return ctx.Err()
				}
			}
		}
	}
	return nil
}

// faultError reports whether err is what an injected fault may cause.
func faultError(cfg Config, err error) bool {
	return cfg.Faults.any() && err != nil
}

// drive runs the measured phase.
func drive(ctx context.Context, cfg Config, s *actors.Scheduler, tenants []*tenant, timing lanes.TimingMode, agg *aggregate, lc *lifecycle) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Steps == 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeout(ctx, cfg.Duration)
		defer stop()
	}
	// The measured phase ends at the deadline (or an interruption): what
	// ends after it is drained, not measured.
	measured := ctx
	go func() {
		<-measured.Done()
		lc.endMeasured(agg)
	}()
	g, ctx := errgroup.WithContext(ctx)
	var served []*tenant
	for _, tn := range tenants {
		if tn.hostile {
			g.Go(func() error { return runHostile(ctx, cfg, s, tn, timing, agg) })
		} else {
			served = append(served, tn)
		}
	}
	if cfg.Mode == "open" {
		g.Go(func() error { return openLoop(ctx, cfg, s, served, timing, agg) })
		return g.Wait()
	}
	if cfg.NextStep != NextStepCaller {
		g.Go(func() error { return runChains(ctx, cfg, s, served, timing, agg) })
		return g.Wait()
	}
	for _, tn := range served {
		var issued atomic.Int64
		var mu sync.Mutex // the tenant's input generator
		for w := range cfg.Concurrency {
			g.Go(func() error {
				var retry *lanes.Batch // a refused step, submitted again
				tries := 0
				for ctx.Err() == nil {
					var b lanes.Batch
					if retry != nil {
						b, retry = *retry, nil
					} else {
						if cfg.Steps > 0 && issued.Add(1) > int64(cfg.Steps) {
							return nil
						}
						mu.Lock()
						var err error
						b, err = tn.step(timing, w)
						mu.Unlock()
						if err != nil {
							return err
						}
					}
					// The step is the run's, not the client's: it ends on
					// its own once admitted, also after the run's deadline.
					p, err := s.SubmitAsync(context.Background(), tn.name, b)
					if err != nil {
						agg.refused(tn, err)
						if clientStops(s, err) {
							return nil
						}
						backOff(ctx, err, tries)
						retry, tries = &b, tries+1
						continue
					}
					tries = 0
					agg.accepted.Add(1)
					t0 := time.Now()
					r, err := p.Result()
					agg.ended(laneOf(p), tn, time.Since(t0), r, err)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// openLoop issues steps at Poisson arrivals of the configured total rate,
// to tenants chosen at random, without waiting for earlier ones.
func openLoop(ctx context.Context, cfg Config, s *actors.Scheduler, tenants []*tenant, timing lanes.TimingMode, agg *aggregate) error {
	rng := rand.New(rand.NewSource(cfg.Seed))
	next := time.Now()
	var wg sync.WaitGroup
	defer wg.Wait()
	budget := cfg.Steps * len(tenants)
	for n := 0; ctx.Err() == nil && (budget == 0 || n < budget); n++ {
		next = next.Add(time.Duration(rng.ExpFloat64() / cfg.Rate * float64(time.Second)))
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-ctx.Done():
				return nil
			}
		}
		tn := tenants[rng.Intn(len(tenants))]
		b, err := tn.step(timing, -1)
		if err != nil {
			return err
		}
		t0 := time.Now()
		p, err := s.SubmitAsync(context.Background(), tn.name, b)
		if err != nil {
			agg.refused(tn, err)
			continue
		}
		agg.accepted.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := p.Result()
			agg.ended(laneOf(p), tn, time.Since(t0), r, err)
		}()
	}
	return nil
}

// clientStops reports whether a closed-loop client refused err stops
// rather than tries again: the scheduler stopped, or every lane is out of
// routing for good.
func clientStops(s *actors.Scheduler, err error) bool {
	return errors.Is(err, actors.ErrStopped) || errors.Is(err, actors.ErrNoHealthyLane) && allOut(s)
}

// allOut reports whether every lane is out of routing for good.
func allOut(s *actors.Scheduler) bool {
	for _, l := range s.Lanes() {
		if l.Health != actors.HealthQuarantined && l.Health != actors.HealthStopped {
			return false
		}
	}
	return true
}

// backOff waits before a refused client tries again: as long as a
// suspension says, else 100 µs doubled for each refusal in a row before
// this one (tries), up to 6.4 ms: thousands of clients refused at
// admission must not spend the CPU the admitted ones need.
func backOff(ctx context.Context, err error, tries int) {
	d := retryDelay(err, tries)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// maxInFlightPerLane is the scheduler's admission bound per lane: the
// default 256, or, when the closed loop's clients outnumber what lanes of
// that bound admit (a tenant with nothing in flight is admitted up to
// three times the bound), enough that every client's step is admitted with
// room for an uneven spread. Otherwise thousands of tenants would meet
// ErrOverloaded at every other try, and the ones refused would starve
// behind the ones admitted, which resubmit the moment a step ends.
func maxInFlightPerLane(cfg Config, devices int) int {
	if cfg.Mode == "open" {
		return 0
	}
	perLane := (cfg.Tenants*cfg.Concurrency + cfg.Lanes*devices - 1) / max(cfg.Lanes*devices, 1)
	return max(256, (perLane+1)/2)
}
