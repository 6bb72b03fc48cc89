package actors_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// TestTenantsSharingABusyLaneStillCapture: a lane captures only on a
// quiescent stream, and tenants that share it keep it busy from their
// first steps on; the lane lets its stream drain once for a tenant whose
// capture waited, so every tenant's steps end up replayed, not eager for
// ever.
func TestTenantsSharingABusyLaneStillCapture(t *testing.T) {
	const tenants, steps, window = 4, 40, 4
	dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime}, tenants)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 16})
	ctx := context.Background()
	type flight struct{ ps []lanes.Pending }
	inFlight := make([]flight, tenants)
	replayed := make([]int, tenants)
	wait := func(i int) {
		rc, err := inFlight[i].ps[0].Result()
		inFlight[i].ps = inFlight[i].ps[1:]
		if err != nil {
			t.Fatalf("tenant %d: got err %v, want nil", i, err)
		}
		if rc.Attribution.Launches == 1 && len(rc.Attribution.Segments) == 1 {
			replayed[i]++
		}
	}
	for range steps {
		for i := range tenants {
			if len(inFlight[i].ps) == window {
				wait(i)
			}
			p, err := s.SubmitAsync(ctx, fmt.Sprintf("t%d", i), dev.batch(i, 4))
			if err != nil {
				t.Fatalf("SubmitAsync: got err %v, want nil", err)
			}
			inFlight[i].ps = append(inFlight[i].ps, p)
		}
	}
	for i := range tenants {
		for len(inFlight[i].ps) > 0 {
			wait(i)
		}
	}
	for i, n := range replayed {
		if n < steps/2 {
			t.Errorf("tenant %d: %d of %d steps replayed as one graph launch, want most (its capture must not wait for ever behind its neighbours)", i, n, steps)
		}
	}
	if c := s.Lanes()[0].Counters; c.Captured < tenants {
		t.Errorf("lane captured %d executables for %d tenants' steps, want one each", c.Captured, tenants)
	}
}
