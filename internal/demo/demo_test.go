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
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
	if !rep.OK() || rep.Accepted == 0 || rep.Accepted != rep.Ended || rep.Succeeded != rep.Ended {
		t.Fatalf("accepted %d ended %d succeeded %d", rep.Accepted, rep.Ended, rep.Succeeded)
	}
	if rep.ReplayShare <= 0 || rep.ReplayedCommands == 0 || rep.Cache.Captures == 0 || rep.Cache.Hits == 0 {
		t.Fatalf("replay keys present, yet replay share %.2f, captures %d, hits %d", rep.ReplayShare, rep.Cache.Captures, rep.Cache.Hits)
	}
	if len(rep.Gaps) != 1 || rep.Gaps["provider_key_missing"] == 0 {
		t.Fatalf("the eager tenant's compute must show as provider_key_missing gaps: %v", rep.Gaps)
	}
	var sum int64
	for _, l := range rep.PerLane {
		sum += l.Submissions
	}
	if sum != rep.Ended || len(rep.PerLane) != 2 {
		t.Fatalf("lanes account for %d of %d", sum, rep.Ended)
	}
	if !strings.Contains(progress.String(), "steps/s") {
		t.Fatalf("no progress lines: %q", progress.String())
	}
	// Every step allocates something (a call, a request), and the report
	// says how much: a meter reading zero would be measuring nothing.
	if rt := rep.Runtime; rt.BytesPerStep <= 0 || rt.ObjectsPerStep < 1 || !strings.Contains(table.String(), "go runtime:") {
		t.Fatalf("runtime report %+v; table:\n%s", rt, table.String())
	}
}

func TestOpenLoopWithFaults(t *testing.T) {
	cfg := demo.Defaults()
	cfg.Clock, cfg.Mode, cfg.Rate, cfg.Duration, cfg.Lanes, cfg.Tenants, cfg.Kernels = "zero", "open", 3000, time.Second, 3, 4, 4
	cfg.Faults.Launch = 0.0005
	rep, err := demo.Run(context.Background(), cfg, demo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.ExactlyOnce || rep.Accepted == 0 {
		t.Fatalf("accepted %d ended %d", rep.Accepted, rep.Ended)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
}

func TestBadConfig(t *testing.T) {
	for _, mutate := range []func(*demo.Config){
		func(c *demo.Config) { c.Device = "tpu" },
		func(c *demo.Config) { c.Lanes = 0 },
		func(c *demo.Config) { c.EagerTenants = c.Tenants + 1 },
		func(c *demo.Config) { c.Mode = "spiral" },
		func(c *demo.Config) { c.Timing = "sometimes" },
		func(c *demo.Config) { c.Faults.Sticky = 2 },
		func(c *demo.Config) { c.Device = "cuda"; c.Faults.Launch = 0.1 },
	} {
		cfg := demo.Defaults()
		mutate(&cfg)
		if err := cfg.Validate(); !errors.Is(err, demo.ErrConfig) {
			t.Errorf("%+v: %v", cfg, err)
		}
	}
}

// TestHostileTenant runs each hostile mode briefly: the hostile tenant has
// its own row, the others are served beside it, and every submission ends
// once.
func TestHostileTenant(t *testing.T) {
	for _, mode := range []string{"flood", "churn", "huge"} {
		t.Run(mode, func(t *testing.T) {
			cfg := demo.Defaults()
			cfg.Clock, cfg.Duration, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.Kernels, cfg.Hostile = "zero", 700*time.Millisecond, 2, 3, 0, 8, mode
			rep, err := demo.Run(context.Background(), cfg, demo.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var table bytes.Buffer
			rep.WriteTable(&table)
			t.Log("\n" + table.String())
			if !rep.OK() || len(rep.PerTenant) != 4 || !rep.PerTenant[3].Hostile || !strings.Contains(table.String(), "hostile ("+mode+")") {
				t.Fatalf("report: ok %v, %d tenant rows", rep.OK(), len(rep.PerTenant))
			}
			for _, tr := range rep.PerTenant[:3] {
				if tr.Steps == 0 || tr.Refused != 0 || tr.Failed != 0 || tr.ReplayShare < 0.5 {
					t.Errorf("tenant %s beside a %s tenant: %+v", tr.Tenant, mode, tr)
				}
			}
			if mode == "huge" && rep.Refused["batch_too_large"] != 1 {
				t.Errorf("the 100 000-entry batch was not refused: %v", rep.Refused)
			}
		})
	}
	bad := demo.Defaults()
	bad.Hostile = "nice"
	if err := bad.Validate(); !errors.Is(err, demo.ErrConfig) || !strings.Contains(err.Error(), "--hostile") {
		t.Fatalf("--hostile nice: %v", err)
	}
}
