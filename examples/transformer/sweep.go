// The sweep (--sweep): the same step eager and replayed, closed loop, at
// several tenants and steps in flight, as an embedder's serving loop runs
// it: a goroutine per step in flight, each blocked in Submit until its
// step's receipt. It prints what a change to the scheduler's defaults
// must not make worse: replayed ÷ eager in throughput and p50, and one
// step in flight's wall time against its device time.

package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lanesched/lanes/lanes"
)

// sweepRun is one closed-loop run's result.
type sweepRun struct {
	steps      int
	wall       time.Duration
	latency    []time.Duration // Submit to receipt, per step
	device     []time.Duration // the steps' device times
	notWhole   int             // replayed steps that were not one graph launch
	firstError error
}

// stepsPerSecond is the run's throughput.
func (r *sweepRun) stepsPerSecond() float64 { return float64(r.steps) / r.wall.Seconds() }

// quantile is the q-quantile of ds (0 for none).
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// closedLoop runs steps steps of each tenant on path, window of them in
// flight per tenant, after one untimed step each (which captures on the
// adaptive path).
func closedLoop(ctx context.Context, m *model, ts []*tenant, steps, window int, path lanes.Path) *sweepRun {
	run := &sweepRun{}
	var mu sync.Mutex
	for _, t := range ts {
		step := t.step
		step.Path, step.Timing = path, lanes.TimingCompletion
		if _, err := m.s.Submit(ctx, t.name, step); err != nil {
			run.firstError = fmt.Errorf("%s, its first step: %w", t.name, err)
			return run
		}
	}
	var wg sync.WaitGroup
	start := time.Now()
	for _, t := range ts {
		step := t.step
		step.Path, step.Timing = path, lanes.TimingCompletion
		per := (steps - 1) / window
		for range window {
			wg.Go(func() {
				lat := make([]time.Duration, 0, per)
				dev := make([]time.Duration, 0, per)
				notWhole := 0
				var err error
				for range per {
					at := time.Now()
					rc, e := m.s.Submit(ctx, t.name, step)
					if e != nil {
						err = e
						break
					}
					lat = append(lat, time.Since(at))
					dev = append(dev, rc.DeviceTime)
					if path == lanes.PathAdaptive && rc.Attribution.Launches != 1 {
						notWhole++
					}
				}
				mu.Lock()
				defer mu.Unlock()
				run.steps += len(lat)
				run.latency = append(run.latency, lat...)
				run.device = append(run.device, dev...)
				run.notWhole += notWhole
				if err != nil && run.firstError == nil {
					run.firstError = fmt.Errorf("%s: %w", t.name, err)
				}
			})
		}
	}
	wg.Wait()
	run.wall = time.Since(start)
	return run
}

// parseCounts reads a comma-separated list of positive counts.
func parseCounts(flag, v string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			return nil, fmt.Errorf("--%s %q: give counts of 1 to 64 separated by commas, such as 1,4,8", flag, v)
		}
		out = append(out, n)
	}
	return out, nil
}

// sweep runs the step eager and replayed at every count of tenants and
// steps in flight, each run on tenants of its own (a tenant's KV cache
// holds --ctx steps), and prints the table and the one-in-flight line.
// It fails when a replayed step was not one graph launch or a step failed.
func (m *model) sweep(ctx context.Context) error {
	d := m.d
	fmt.Printf("sweep: %d steps per tenant (a KV cache of --ctx %d positions each), a goroutine per step in flight blocked in Submit, actors.Config zero but Devices, LanesPerDevice %d, Libraries and StrictOwnership (Spin %v)\n",
		d.steps, d.ctx, d.lanes, d.spin)
	fmt.Printf("%6s %8s %9s %14s %14s %9s %18s %18s\n", "batch", "tenants", "in flight", "eager steps/s", "replayed st/s", "rep÷eager", "p50 µs eager/rep", "p99 µs eager/rep")
	next := 0
	fresh := func(n int) ([]*tenant, error) {
		ts := make([]*tenant, n)
		for i := range ts {
			next++
			var err error
			if ts[i], err = m.newTenant(ctx, fmt.Sprintf("sweep-%d", next), newInput(d, d.seed+int64(next))); err != nil {
				return nil, err
			}
		}
		return ts, nil
	}
	var alone [2]*sweepRun
	for _, tenants := range d.sweepTenants {
		for _, window := range d.sweepInFlight {
			var runs [2]*sweepRun
			for i, path := range []lanes.Path{lanes.PathEagerOnly, lanes.PathAdaptive} {
				ts, err := fresh(tenants)
				if err != nil {
					return err
				}
				r := closedLoop(ctx, m, ts, d.steps, window, path)
				if r.firstError != nil {
					return r.firstError
				}
				if r.notWhole > 0 {
					return fmt.Errorf("%d tenants, %d in flight: %d replayed steps were not one graph launch", tenants, window, r.notWhole)
				}
				runs[i] = r
			}
			e, p := runs[0], runs[1]
			fmt.Printf("%6d %8d %9d %14.0f %14.0f %9.2f %8.0f / %-7.0f %8.0f / %-7.0f\n", d.batch, tenants, window,
				e.stepsPerSecond(), p.stepsPerSecond(), p.stepsPerSecond()/e.stepsPerSecond(),
				micros(quantile(e.latency, 0.5)), micros(quantile(p.latency, 0.5)), micros(quantile(e.latency, 0.99)), micros(quantile(p.latency, 0.99)))
			if tenants == 1 && window == 1 {
				alone = runs
			}
		}
	}
	if alone[0] != nil {
		for i, name := range []string{"eager", "replayed"} {
			r := alone[i]
			wall, dev := quantile(r.latency, 0.5), quantile(r.device, 0.5)
			fmt.Printf("one step in flight, %-8s p50 wall %7.1f µs, device %7.1f µs: wall ÷ device %.2f, wall − device %.1f µs\n",
				name, micros(wall), micros(dev), ratio(wall, dev), micros(wall-dev))
		}
	}
	return nil
}
