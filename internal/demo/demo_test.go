package demo_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/internal/demo"
)

// TestRunEndToEnd runs the demo's whole code path on the zero-cost
// simulator and checks the report's invariants.
func TestRunEndToEnd(t *testing.T) {
	cfg := demo.Defaults()
	cfg.Clock, cfg.Duration, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.Kernels = "zero", 1500*time.Millisecond, 2, 4, 1, 8
	var progress bytes.Buffer
	rep, err := demo.Run(context.Background(), cfg, demo.Options{Progress: &progress})
	if err != nil {
		t.Fatalf("demo.Run: got err %v, want nil", err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
	if !rep.OK() || rep.Accepted == 0 || rep.Accepted != rep.Ended || rep.Succeeded != rep.Ended {
		t.Fatalf("got ok %v, accepted %d, ended %d, succeeded %d; want ok, some accepted, every one ended and succeeded", rep.OK(), rep.Accepted, rep.Ended, rep.Succeeded)
	}
	if rep.ReplayShare <= 0 || rep.ReplayedCommands == 0 || rep.Cache.Captures == 0 || rep.Cache.Hits == 0 {
		t.Fatalf("with replay keys present: got replay share %.2f, %d replayed commands, %d captures, %d hits; want each above 0",
			rep.ReplayShare, rep.ReplayedCommands, rep.Cache.Captures, rep.Cache.Hits)
	}
	if len(rep.Gaps) != 1 || rep.Gaps["provider_key_missing"] == 0 {
		t.Fatalf("gaps: got %v, want provider_key_missing alone, above 0 (the eager tenant's compute)", rep.Gaps)
	}
	var sum int64
	for _, l := range rep.PerLane {
		sum += l.Submissions
	}
	if sum != rep.Ended || len(rep.PerLane) != 2 {
		t.Fatalf("per lane: got %d lanes accounting for %d submissions, want 2 lanes accounting for all %d ended", len(rep.PerLane), sum, rep.Ended)
	}
	if !strings.Contains(progress.String(), "steps/s") {
		t.Fatalf("progress: got %q, want lines with steps/s", progress.String())
	}
	// Every step allocates something (a call, a request), and the report
	// says how much: a meter reading zero would be measuring nothing.
	if rt := rep.Runtime; rt.BytesPerStep <= 0 || rt.ObjectsPerStep < 1 || !strings.Contains(table.String(), "go runtime:") {
		t.Fatalf("runtime report: got %+v, want bytes per step above 0, objects per step at least 1, and a go runtime: line in the table:\n%s", rt, table.String())
	}
}

func TestOpenLoopWithFaults(t *testing.T) {
	cfg := demo.Defaults()
	cfg.Clock, cfg.Mode, cfg.Rate, cfg.Duration, cfg.Lanes, cfg.Tenants, cfg.Kernels = "zero", "open", 3000, time.Second, 3, 4, 4
	cfg.Faults.Launch = 0.0005
	rep, err := demo.Run(context.Background(), cfg, demo.Options{})
	if err != nil {
		t.Fatalf("demo.Run: got err %v, want nil", err)
	}
	if !rep.ExactlyOnce || rep.Accepted == 0 {
		t.Fatalf("got exactly once %v, accepted %d, ended %d; want exactly once, some accepted", rep.ExactlyOnce, rep.Accepted, rep.Ended)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
}

// TestClosedLoopNextStep: whoever submits a client's next step, the lane
// from the last step's end or a goroutine that waited for it, every
// tenant runs exactly its --steps steps (each ended once), also when
// injected launch failures quarantine lanes under the loop and refusals
// send clients into their back-off. It logs each way's CPU per step
// (BenchmarkServingLoop measures them).
func TestClosedLoopNextStep(t *testing.T) {
	cpu := map[string]float64{}
	for _, next := range []string{demo.NextStepLane, demo.NextStepCaller} {
		for _, faults := range []bool{false, true} {
			cfg := demo.Defaults()
			cfg.Clock, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.Kernels, cfg.Concurrency = "none", 3, 6, 0, 4, 2
			cfg.NextStep, cfg.Steps, cfg.Warmup = next, 400, 1
			if faults {
				cfg.Clock, cfg.Faults.Launch, cfg.Steps = "zero", 0.002, 300
			}
			rep, err := demo.Run(context.Background(), cfg, demo.Options{})
			if err != nil {
				t.Fatalf("next step %s, faults %v: demo.Run: got err %v, want nil", next, faults, err)
			}
			if !rep.ExactlyOnce || rep.Accepted == 0 {
				t.Fatalf("next step %s, faults %v: got exactly once %v, accepted %d, ended %d; want exactly once, some accepted", next, faults, rep.ExactlyOnce, rep.Accepted, rep.Ended)
			}
			var refused int64
			for _, tr := range rep.PerTenant {
				refused += tr.Refused
			}
			// Every issued step is accepted once: a refused step is
			// submitted again after a back-off (the same batch), and its
			// refusals are counted apart.
			if want := int64(cfg.Tenants * cfg.Steps); rep.Accepted != want {
				t.Errorf("next step %s, faults %v: got %d accepted (and %d refusals), want the %d steps issued", next, faults, rep.Accepted, refused, want)
			}
			if !faults {
				cpu[next] = rep.Runtime.CPUPerStep
			}
		}
	}
	t.Logf("process CPU per step: lane %.1f µs, caller %.1f µs", cpu[demo.NextStepLane]/1e3, cpu[demo.NextStepCaller]/1e3)
}

func TestBadConfig(t *testing.T) {
	for _, mutate := range []func(*demo.Config){
		func(c *demo.Config) { c.Device = "tpu" },
		func(c *demo.Config) { c.Lanes = 0 },
		func(c *demo.Config) { c.EagerTenants = c.Tenants + 1 },
		func(c *demo.Config) { c.Mode = "spiral" },
		func(c *demo.Config) { c.NextStep = "client" },
		func(c *demo.Config) { c.Timing = "sometimes" },
		func(c *demo.Config) { c.Faults.Sticky = 2 },
		func(c *demo.Config) { c.Device = "cuda"; c.Faults.Launch = 0.1 },
	} {
		cfg := demo.Defaults()
		mutate(&cfg)
		if err := cfg.Validate(); !errors.Is(err, demo.ErrConfig) {
			t.Errorf("Validate(%+v): got err %v, want demo.ErrConfig", cfg, err)
		}
	}
}

// TestHostileTenant runs each hostile mode briefly: the hostile tenant has
// its own row, the others are served beside it, and every submission ends
// once.
func TestHostileTenant(t *testing.T) {
	// The huge tenant's 1024-launch batch holds the simulated device for
	// its CPU time, about 0.1 s, and 0.4-0.8 s under the race detector: the
	// others' first step can wait behind one, so the run lasts several.
	for _, mode := range []string{"flood", "churn", "huge"} {
		t.Run(mode, func(t *testing.T) {
			duration := 700 * time.Millisecond
			if raceEnabled && mode == "huge" {
				duration = 3 * time.Second
			}
			cfg := demo.Defaults()
			cfg.Clock, cfg.Duration, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.Kernels, cfg.Hostile = "zero", duration, 2, 3, 0, 8, mode
			rep, err := demo.Run(context.Background(), cfg, demo.Options{})
			if err != nil {
				t.Fatalf("demo.Run: got err %v, want nil", err)
			}
			var table bytes.Buffer
			rep.WriteTable(&table)
			t.Log("\n" + table.String())
			if !rep.OK() || len(rep.PerTenant) != 4 || !rep.PerTenant[3].Hostile || !strings.Contains(table.String(), "hostile ("+mode+")") {
				t.Fatalf("report: got ok %v, %d tenant rows (the 4th hostile %v), table naming hostile (%s) %v; want ok, 4 rows, the 4th hostile and named so in the table",
					rep.OK(), len(rep.PerTenant), len(rep.PerTenant) == 4 && rep.PerTenant[3].Hostile, mode, strings.Contains(table.String(), "hostile ("+mode+")"))
			}
			for _, tr := range rep.PerTenant[:3] {
				if tr.Steps == 0 || tr.Refused != 0 || tr.Failed != 0 || tr.ReplayShare < 0.5 {
					t.Errorf("tenant %s beside a %s tenant: got %d steps, %d refused, %d failed, replay share %.2f; want some steps, none refused or failed, replay share at least 0.5 (%+v)",
						tr.Tenant, mode, tr.Steps, tr.Refused, tr.Failed, tr.ReplayShare, tr)
				}
			}
			if mode == "huge" && rep.Refused["batch_too_large"] != 1 {
				t.Errorf("the 100 000-entry batch: got %d batch_too_large refusals (%v), want 1", rep.Refused["batch_too_large"], rep.Refused)
			}
		})
	}
	bad := demo.Defaults()
	bad.Hostile = "nice"
	if err := bad.Validate(); !errors.Is(err, demo.ErrConfig) || !strings.Contains(err.Error(), "--hostile") {
		t.Fatalf("Validate(--hostile nice): got err %v, want demo.ErrConfig naming --hostile", err)
	}
}
