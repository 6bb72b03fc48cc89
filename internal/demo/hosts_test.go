package demo

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRunHostsInProcessAndRemote: the --host-per-gpu loop runs on one
// in-process scheduler and through lane host processes, every tenant
// served, every step ended once, each with an upload of its own (through
// a host's upload area); a fault on the first host midway costs that
// host's tenants only, and the host serves again (its tenants set up
// again, uploads included; in process they start over on the other
// device).
func TestRunHostsInProcessAndRemote(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lanehost")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lanesched/lanes/cmd/lanehost").CombinedOutput(); err != nil {
		t.Fatalf("build lanehost: got err %v, want nil\n%s", err, out)
	}
	for _, inProcess := range []bool{true, false} {
		cfg := Defaults()
		cfg.Devices, cfg.Tenants, cfg.Kernels, cfg.Duration, cfg.Concurrency, cfg.Warmup = 2, 4, 4, 1500*time.Millisecond, 1, 1
		cfg.Hosts = HostsConfig{PerGPU: true, InProcess: inProcess, Lanehost: bin, FaultAt: 500 * time.Millisecond, StepUpload: 8 << 10}
		full, err := RunHosts(context.Background(), cfg)
		if err != nil {
			t.Fatalf("RunHosts (in process %v): got err %v, want nil", inProcess, err)
		}
		rep := full.Hosts
		if full.Schema != ReportSchema || full.Accepted != int64(rep.Submitted) || full.Ended != full.Accepted || full.ReplayedCommands == 0 || full.Latency.P50 == 0 {
			t.Errorf("in process %v: the report: got schema %q, accepted %d, ended %d, %d replayed commands, p50 %d µs; want %s, its hosts' counts, replays and a latency",
				inProcess, full.Schema, full.Accepted, full.Ended, full.ReplayedCommands, full.Latency.P50, ReportSchema)
		}
		if !rep.ExactlyOnce || len(rep.Hosts) != 2 {
			t.Fatalf("RunHosts (in process %v): got %d hosts, exactly once %v, want 2 and true", inProcess, len(rep.Hosts), rep.ExactlyOnce)
		}
		healthy := rep.Hosts[1]
		if healthy.Steps == 0 || healthy.Errors+healthy.Indeterminate != 0 {
			t.Errorf("in process %v: the second device: got %d steps, %d errors, %d indeterminate; want steps and no errors (the sim poisons one device)",
				inProcess, healthy.Steps, healthy.Errors, healthy.Indeterminate)
		}
		if faulty := rep.Hosts[0]; faulty.Errors+faulty.Indeterminate == 0 {
			t.Errorf("in process %v: the faulted device: got no error, want its tenants to see the fault", inProcess)
		}
		if rep.Hosts[0].StartOvers == 0 {
			t.Errorf("in process %v: the faulted device's tenants: got no start over, want them to forget and start over where the door places them", inProcess)
		}
		if !inProcess && uint64(healthy.Steps) > healthy.AreaUploads+uint64(cfg.Tenants) {
			t.Errorf("the second host: got %d steps, %d uploads through its upload area; want each step's 8 KiB input through it (but for a few at most, the area full)", healthy.Steps, healthy.AreaUploads)
		}
		if !inProcess && (rep.Hosts[0].Restarts != 1 || rep.Hosts[0].ServingAgainMS == 0) {
			t.Errorf("the faulted host: got %d restarts, serving again after %.0f ms; want 1 restart and a time", rep.Hosts[0].Restarts, rep.Hosts[0].ServingAgainMS)
		}
		t.Logf("%s: %.0f steps/s; faulted %s: %d errors, %d indeterminate, back after %.0f ms", rep.Mode, rep.Total.StepsPerS,
			rep.Hosts[0].Name, rep.Hosts[0].Errors, rep.Hosts[0].Indeterminate, rep.Hosts[0].ServingAgainMS)
	}
}

// TestRunHostsInACluster: --cluster's hosts are found in the cluster; one
// joins, one leaves well (nothing of it indeterminate), one is killed, all
// under the loop's load; every step ends once and the tenants end on the
// host that joined, which the report names.
func TestRunHostsInACluster(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lanehost")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lanesched/lanes/cmd/lanehost").CombinedOutput(); err != nil {
		t.Fatalf("build lanehost: got err %v, want nil\n%s", err, out)
	}
	cfg := Defaults()
	cfg.Devices, cfg.Tenants, cfg.Kernels, cfg.Duration, cfg.Concurrency, cfg.Warmup = 2, 4, 4, 4*time.Second, 2, 1
	cfg.Hosts = HostsConfig{PerGPU: true, Cluster: true, Lanehost: bin, JoinAt: 300 * time.Millisecond, LeaveAt: 2 * time.Second, KillAt: 3 * time.Second}
	full, err := RunHosts(context.Background(), cfg)
	if err != nil {
		t.Fatalf("RunHosts: got err %v, want nil", err)
	}
	rep := full.Hosts
	var b strings.Builder
	rep.WriteTable(&b)
	t.Log("\n" + b.String())
	if !rep.ExactlyOnce || len(rep.Hosts) != 3 {
		t.Fatalf("got %d hosts, exactly once %v, want 3 and true", len(rep.Hosts), rep.ExactlyOnce)
	}
	byName := map[string]HostsRow{}
	for _, h := range rep.Hosts {
		byName[h.Name] = h
	}
	if h := byName["host0"]; h.Indeterminate != 0 || h.StartOvers == 0 {
		t.Errorf("host0, which left well: got %d indeterminate, %d tenants started over; want none indeterminate, its tenants moved", h.Indeterminate, h.StartOvers)
	}
	if h := byName["host2"]; h.Tenants != cfg.Tenants || h.Steps == 0 {
		t.Errorf("host2, which joined: got %d tenants and %d steps, want all %d tenants at the end (the others gone) and steps", h.Tenants, h.Steps, cfg.Tenants)
	}
	if len(rep.Events) < 5 {
		t.Errorf("events: got %q, want the join, the leave and the kill, each seen", rep.Events)
	}
}
