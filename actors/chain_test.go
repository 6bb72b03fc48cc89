package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// TestStepsSubmittedFromTheirEndEndOnce drives the serving loop the
// package doc gives ("A serving loop without hand-offs"): each tenant's
// next step is submitted from SubmitNotify's ended, on whatever goroutine
// ended the last one, while the device fails under it: a sticky fault
// takes every lane out for good (the tenants' waiting steps are refused
// with no healthy lane, which ends them and runs ended while the
// scheduler reroutes them), launch failures quarantine and rebuild lanes,
// and Stop comes in the middle. Every accepted step must end once, no
// goroutine may deadlock (ended re-entering the scheduler), and Stop must
// return. It failed before the scheduler ended refused steps outside the
// tenant's lock: the lane's thread blocked for good on that lock.
func TestStepsSubmittedFromTheirEndEndOnce(t *testing.T) {
	cases := map[string]struct {
		faults []sim.Fault
		stop   time.Duration // Stop this long after the chains start
	}{
		"sticky fault":          {faults: []sim.Fault{{Kind: sim.FaultSticky, Nth: 40}}, stop: 200 * time.Millisecond},
		"launch faults":         {faults: []sim.Fault{{Kind: sim.FaultLaunch, Rate: 0.03}}, stop: 300 * time.Millisecond},
		"stop under the chains": {stop: 50 * time.Millisecond},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			const tenants = 6
			dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost, NoData: true, Faults: tc.faults}, tenants)
			ctx := context.Background()
			s, err := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2, HangTimeout: 5 * time.Second})
			if err != nil {
				t.Fatalf("actors.Start: got err %v, want nil", err)
			}
			var accepted, ended, refused atomic.Int64
			var retries sync.WaitGroup
			seen := sync.Map{} // *pending -> ends seen
			for i := range tenants {
				tenant, batch := fmt.Sprintf("t%d", i), dev.batch(i, 2)
				var submit func()
				next := func(p lanes.Pending) {
					if n, _ := seen.LoadOrStore(p, new(atomic.Int32)); n.(*atomic.Int32).Add(1) != 1 {
						t.Errorf("%s: a submission ended twice", tenant)
					}
					ended.Add(1)
					_, _ = p.Result()
					submit()
				}
				submit = func() {
					if _, err := s.SubmitNotify(ctx, tenant, batch, next); err != nil {
						refused.Add(1)
						if errors.Is(err, actors.ErrStopped) || errors.Is(err, actors.ErrNoHealthyLane) {
							return // the chain ends
						}
						retries.Add(1)
						go func() { // never wait on the goroutine that ended the last step
							defer retries.Done()
							time.Sleep(100 * time.Microsecond)
							submit()
						}()
						return
					}
					accepted.Add(1)
				}
				submit()
			}
			time.Sleep(tc.stop)
			stopCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := s.Stop(stopCtx); err != nil {
				t.Fatalf("Stop: got err %v, want nil (a goroutine that ended a step is stuck)", err)
			}
			retries.Wait()
			if a, e := accepted.Load(), ended.Load(); a == 0 || a != e {
				t.Fatalf("got %d accepted, %d ended (%d refused); want some accepted, each ended once", a, e, refused.Load())
			}
		})
	}
}
