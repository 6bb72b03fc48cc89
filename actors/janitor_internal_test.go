package actors

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

func janitorRig(t *testing.T, idle time.Duration) (*Scheduler, sim.Device) {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	s, err := Start(context.Background(), Config{Devices: []cuda.Device{dev}, TenantIdle: idle})
	if err != nil {
		t.Fatalf("Start: got err %v, want nil", err)
	}
	t.Cleanup(func() {
		_ = s.Stop(context.Background())
		_ = dev.Close()
	})
	return s, dev
}

// eventually waits (bounded) until check reports ok; check also says what
// it saw, for the failure message.
func eventually(t *testing.T, want string, check func() (got string, ok bool)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok := check()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: got %s, want %s", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJanitorForgetsIdleTenants: one-shot tenants leave nothing behind
// once idle; a tenant that owns a buffer, or was struck, is kept.
func TestJanitorForgetsIdleTenants(t *testing.T) {
	s, dev := janitorRig(t, 20*time.Millisecond)
	buf, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	zero, _ := cuda.Zero(buf.Whole())
	batch := lanes.Batch{Entries: []lanes.Entry{{Command: zero, Node: -1}}}
	for i := range 500 {
		if _, err := s.Submit(context.Background(), fmt.Sprintf("one-shot-%d", i), batch); err != nil {
			t.Fatalf("Submit(one-shot-%d): got err %v, want nil", i, err)
		}
	}
	if err := s.Own("owner", buf); err != nil {
		t.Fatalf("Own(owner): got err %v, want nil", err)
	}
	if _, err := s.Submit(context.Background(), "owner", batch); err != nil {
		t.Fatalf("Submit(owner): got err %v, want nil", err)
	}
	if _, err := s.tenant("struck"); err != nil {
		t.Fatalf("tenant(struck): got err %v, want nil", err)
	}
	s.strike("struck")
	eventually(t, "2 tenants (the 500 one-shot ones forgotten)", func() (string, bool) {
		n := s.Tenants()
		return fmt.Sprintf("%d tenants", n), n == 2
	})
	// The janitor's sweeps so far may all have come before "owner" was idle
	// for TenantIdle, and a tenant not idle yet is kept whatever else keeps
	// it. One more sweep, at a time when both are certainly idle that long
	// (sweepTenants takes its clock as an argument; owner's Submit returned,
	// so nothing of it is in flight), asks whether what they keep keeps them.
	s.sweepTenants(time.Now().Add(s.cfg.TenantIdle))
	for name, keeps := range map[string]string{"owner": "owns a buffer", "struck": "has a recent strike"} {
		if _, ok := s.tenants.Load(name); !ok {
			t.Fatalf("tenant %s after a sweep with it idle: got forgotten, want kept (it %s)", name, keeps)
		}
	}
}

// TestJanitorDropsFreedOwnership: ownership rows go with their buffers.
func TestJanitorDropsFreedOwnership(t *testing.T) {
	s, dev := janitorRig(t, -1)
	var bufs []cuda.Buffer
	for range 100 {
		b, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		bufs = append(bufs, b)
	}
	if err := s.Own("t", bufs...); err != nil {
		t.Fatalf("Own(t, 100 buffers): got err %v, want nil", err)
	}
	for _, b := range bufs[:90] {
		if err := dev.Free(b); err != nil {
			t.Fatalf("Free: got err %v, want nil", err)
		}
	}
	s.sweepOwnership()
	s.ownMu.RLock()
	rows, owners := len(s.owned["t"]), len(s.owners)
	s.ownMu.RUnlock()
	if rows != 10 || owners != 10 {
		t.Fatalf("after freeing 90 of 100 owned buffers: got %d rows, %d owners; want 10 and 10", rows, owners)
	}
	for _, b := range bufs[90:] {
		_ = dev.Free(b)
	}
	s.sweepOwnership()
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	if len(s.owned) != 0 || len(s.owners) != 0 {
		t.Fatalf("after freeing every owned buffer: got %d tenants with rows, %d owners; want 0 and 0", len(s.owned), len(s.owners))
	}
}

// TestJanitorReleasesScarceProgramNames: idle tenants keep their program
// names until reserved names run short; then they give them back, and a
// newcomer can register.
func TestJanitorReleasesScarceProgramNames(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	// Idle after an hour: no tenant is idle until the test's sweep says
	// an hour passed (a short TenantIdle let a loaded machine's janitor
	// free names before the eleventh was asked for).
	s, err := Start(context.Background(), Config{Devices: []cuda.Device{dev}, TenantIdle: time.Hour, MaxPrograms: 10, MaxProgramsPerTenant: 2})
	if err != nil {
		t.Fatalf("Start: got err %v, want nil", err)
	}
	t.Cleanup(func() {
		_ = s.Stop(context.Background())
		_ = dev.Close()
	})
	buf, _ := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	testdev.Zero(t, dev, buf)
	inc, _ := cuda.Launch(dev.Registry().MustSpec("inc_i32"), cuda.Linear(16, 16), cuda.BufferArg(buf.Whole()), cuda.I32Arg(16))
	program := func(tenant, name string) error {
		b := lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: inc,
			Replay: lanes.Replayable(inc, cache.LaunchKey("t", inc), cache.PlanScope())}},
			Program: &programs.Capture{ID: programs.ID{Runtime: "lanes/sim", Name: name}, Nodes: 1}}
		_, err := s.Submit(context.Background(), tenant, b)
		return err
	}
	for i := range 5 {
		for j := range 2 {
			if err := program(fmt.Sprint("t", i), fmt.Sprint("p", i, j)); err != nil {
				t.Fatalf("tenant t%d registering p%d%d: got err %v, want nil", i, i, j, err)
			}
		}
	}
	if err := program("late", "q"); !errors.Is(err, ErrProgramLimit) {
		t.Fatalf("an eleventh name under a limit of ten: got err %v, want ErrProgramLimit", err)
	}
	s.sweepTenants(time.Now().Add(2 * time.Hour)) // the janitor, an hour on
	if err := program("late", "q"); err != nil {
		t.Fatalf("the late tenant's name after idle tenants gave theirs back: got err %v, want nil", err)
	}
}
