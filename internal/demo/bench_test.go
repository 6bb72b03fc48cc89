package demo_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/internal/demo"
)

// BenchmarkServingLoop is lanedemo's serving loop on the simulator that
// neither models time nor computes bytes (--clock none): 16 tenants, K=16
// replayed kernels per step, one step per tenant in flight, timing off, at
// 1, 4 and 8 lanes, with a client's next step submitted by the lane from
// its last step's end (next=lane, the default) and by a goroutine that
// waited for that end (next=caller). b.N is steps in all. It prints what
// lanedemo's report says of the scheduler's own cost: steps per second,
// the process's CPU time per step (cpu-us/step: clients, lanes, the
// simulator's bookkeeping and the runtime) and the heap bytes and objects
// allocated per step. The same figures, from the command line:
//
//	lanedemo --clock none --lanes L --tenants 16 --eager-tenants 0 --timing off --concurrency 1 --next-step lane|caller
func BenchmarkServingLoop(b *testing.B) {
	for _, next := range []string{demo.NextStepLane, demo.NextStepCaller} {
		for _, lanes := range []int{1, 4, 8} {
			b.Run(fmt.Sprintf("next=%s/lanes=%d", next, lanes), func(b *testing.B) {
				cfg := demo.Defaults()
				cfg.Clock, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.Timing, cfg.Concurrency, cfg.NextStep = "none", lanes, 16, 0, "off", 1, next
				cfg.Warmup = 2
				runLoop(b, cfg)
			})
		}
	}
}

// BenchmarkTenants is the same loop at 16, 256, 1,024 and 4,096 tenants of
// one shape on 4 lanes of 64 executables each (so from 1,024 tenants on,
// most steps replay by rebinding a resident of their shape, a tenant's
// step landing where another's ran): the scheduler's cost per step beside
// each other, with the replay share (replayed-%), which must stay 100. b.N
// is steps in all (at least one per tenant). The same figures from the
// command line (--duration instead of a step count):
//
//	lanedemo --clock none --lanes 4 --tenants T --eager-tenants 0 --timing off --concurrency 1
func BenchmarkTenants(b *testing.B) {
	for _, tenants := range []int{16, 256, 1024, 4096} {
		b.Run(fmt.Sprintf("tenants=%d", tenants), func(b *testing.B) {
			cfg := demo.Defaults()
			cfg.Clock, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.Timing, cfg.Concurrency = "none", 4, tenants, 0, "off", 1
			cfg.Warmup = 1
			rep := runLoop(b, cfg)
			b.ReportMetric(100*rep.ReplayShare, "replayed-%")
		})
	}
}

// runLoop runs cfg's loop for b.N steps in all (at least one per tenant),
// timed, and reports what lanedemo's report says of the scheduler's cost.
func runLoop(b *testing.B, cfg demo.Config) *demo.Report {
	cfg.Steps = max(b.N/cfg.Tenants, 1)
	b.ResetTimer()
	rep, err := demo.Run(context.Background(), cfg, demo.Options{})
	b.StopTimer()
	if err != nil {
		b.Fatalf("demo.Run: got err %v, want nil", err)
	}
	if !rep.OK() || rep.Accepted != rep.Ended {
		b.Fatalf("got ok %v, accepted %d, ended %d; want every accepted step ended", rep.OK(), rep.Accepted, rep.Ended)
	}
	b.ReportMetric(rep.StepsPerSec, "steps/s")
	b.ReportMetric(rep.Runtime.CPUPerStep/1e3, "cpu-us/step")
	b.ReportMetric(rep.Runtime.BytesPerStep, "B/step")
	b.ReportMetric(rep.Runtime.ObjectsPerStep, "objects/step")
	return rep
}
