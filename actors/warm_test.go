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
			if st.Health == actors.HealthHealthy {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if st.Health != actors.HealthHealthy {
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
