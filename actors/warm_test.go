package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// TestHungLaneComesBackWarm: a lane rebuilt after a hang captures what
// the hung lane replayed before it takes traffic: its first steps replay
// without a capture. With WarmRebuild negative it starts cold.
func TestHungLaneComesBackWarm(t *testing.T) {
	for _, warm := range []bool{true, false} {
		dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime, Faults: []sim.Fault{{Kind: sim.FaultHang, Kernel: "inc_i32", Nth: 3}}}, 2)
		cfg := actors.Config{Devices: []cuda.Device{dev}, HangTimeout: 200 * time.Millisecond}
		if !warm {
			cfg.WarmRebuild = -1
		}
		s := start(t, cfg)
		ctx := context.Background()
		for i := range 3 {
			_, err := s.Submit(ctx, "t", dev.batch(0, 4))
			if i == 2 && !errors.Is(err, actors.ErrHung) {
				t.Fatalf("step 3 (its replay hangs): got err %v, want actors.ErrHung", err)
			}
			if i < 2 && err != nil {
				t.Fatalf("step %d: got err %v, want nil", i+1, err)
			}
		}
		var st actors.LaneStatus
		for try := 0; try < 200; try++ {
			st = s.Lanes()[0]
			if st.Health == actors.HealthServing {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if st.Health != actors.HealthServing {
			t.Fatalf("the lane after the hang: got %v, want healthy again", st.Health)
		}
		if _, err := s.Submit(ctx, "t", dev.batch(0, 4)); err != nil {
			t.Fatalf("the first step on the rebuilt lane: got err %v, want nil", err)
		}
		c := s.Lanes()[0].Counters
		if warm && (c.Warmed != 1 || c.Captured != 0 || c.ReplayedSegments != 1 || s.Lanes()[0].TenantDeviceBytes["t"] <= 0) {
			t.Fatalf("warm rebuild: got Warmed %d, Captured %d, ReplayedSegments %d, tenant bytes %v; want 1, 0, 1 and the tenant's executable counted",
				c.Warmed, c.Captured, c.ReplayedSegments, s.Lanes()[0].TenantDeviceBytes)
		}
		if !warm && (c.Warmed != 0 || c.Captured != 1) {
			t.Fatalf("cold rebuild: got Warmed %d, Captured %d; want 0 and 1", c.Warmed, c.Captured)
		}
	}
}

// TestForgottenTenantsExecutables: a tenant forgotten while its lane is
// sealed leaves its executable resident for others to rebind, and the
// lane's status lists it under no tenant; forgotten while preparation is
// open, its executable leaves the lane, also in the status.
func TestForgottenTenantsExecutables(t *testing.T) {
	for _, sealed := range []bool{true, false} {
		dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 4)
		s := start(t, actors.Config{Devices: []cuda.Device{dev}})
		ctx := context.Background()
		for _, tn := range []string{"a", "b"} {
			buf := 0
			if tn == "b" {
				buf = 2
			}
			if _, err := s.Submit(ctx, tn, dev.batch(buf, 4)); err != nil {
				t.Fatalf("%s's step: got err %v, want nil", tn, err)
			}
		}
		if sealed {
			if _, err := s.Seal(ctx, 0); err != nil {
				t.Fatalf("Seal: got err %v, want nil", err)
			}
		}
		if err := s.Forget("a"); err != nil {
			t.Fatalf("Forget(a): got err %v, want nil", err)
		}
		want := 1
		if sealed {
			want = 2
		}
		var st actors.LaneStatus
		for try := 0; try < 200; try++ {
			if st = s.Lanes()[0]; st.Counters.Executables == want && st.TenantDeviceBytes["a"] == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if _, listed := st.TenantDeviceBytes["a"]; listed || st.Counters.Executables != want || st.TenantDeviceBytes["b"] <= 0 {
			t.Fatalf("sealed %v, after Forget(a): got %d executables, tenant bytes %v; want %d, none listed under a, b's listed",
				sealed, st.Counters.Executables, st.TenantDeviceBytes, want)
		}
	}
}
