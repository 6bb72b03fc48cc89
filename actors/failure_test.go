// Lanes that fail: recovery and tenants moving, a sticky fault taking the
// device out, and a panic in a lane actor.

package actors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/lanes"
)

// TestFailedLaneRecoversAndTenantsMove: a non-sticky launch failure is the
// stream's: the lane leaves routing, its tenant is served elsewhere at
// once, and the lane comes back on a fresh stream by default. With
// recovery disabled it stays out.
func TestFailedLaneRecoversAndTenantsMove(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		bad := newDevice(t, sim.Config{Clock: sim.ClockZeroCost, Faults: []sim.Fault{{Kind: sim.FaultLaunch, Nth: 1}}}, 2)
		good := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 2)
		s := start(t, actors.Config{Devices: []cuda.Device{bad, good}, CacheCapacity: -1, Recovery: actors.Recovery{Disabled: disabled}})
		ctx := context.Background()
		// Tenant "a" lands on lane 0 (least loaded, first), whose device fails it.
		_, err := s.Submit(ctx, "a", bad.batch(0, 2))
		var le *lanes.Error
		if !errors.As(err, &le) {
			t.Fatalf("first submission: got err %v, want a *lanes.Error", err)
		}
		if le.NotSubmitted || le.Blame != cuda.BlameStream || !errors.Is(err, cuda.ErrLaunchResources) {
			t.Fatalf("first submission: got NotSubmitted=%v, blame %v, wraps cuda.ErrLaunchResources=%v (err %v); want submitted, blamed on the stream, wrapping cuda.ErrLaunchResources",
				le.NotSubmitted, le.Blame, errors.Is(err, cuda.ErrLaunchResources), err)
		}
		for range 5 {
			r, err := s.Submit(ctx, "a", good.batch(0, 1))
			if err != nil || r.Outcome != lanes.OutcomeSucceeded || r.Tenant != "a" || r.Lane != 1 {
				t.Fatalf("tenant a after its lane failed: got receipt %+v, err %v; want succeeded, tenant a, lane 1, no error", r, err)
			}
			if _, err := s.Submit(ctx, "b", good.batch(1, 1)); err != nil {
				t.Fatalf("tenant b: got err %v, want nil", err)
			}
		}
		if disabled {
			waitHealth(t, s, 0, actors.HealthQuarantined)
			continue
		}
		waitHealth(t, s, 0, actors.HealthServing)
		if st := s.Lanes()[0]; st.Recoveries != 1 || st.Cause == nil {
			t.Fatalf("lane 0 after recovering: got %d recoveries, cause %v; want 1 recovery and the failure kept as its cause (status %+v)", st.Recoveries, st.Cause, st)
		}
		if r, err := s.Submit(ctx, "c", bad.batch(0, 1)); err != nil || r.Outcome != lanes.OutcomeSucceeded || r.Lane != 0 {
			t.Fatalf("tenant c after the rebuild: got receipt %+v, err %v; want succeeded on lane 0, no error", r, err)
		}
	}
}

func TestStickyFaultQuarantinesTheDevice(t *testing.T) {
	poisoned := newDevice(t, sim.Config{Clock: sim.ClockZeroCost, Faults: []sim.Fault{{Kind: sim.FaultSticky, Nth: 3}}}, 2)
	other := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 2)
	s := start(t, actors.Config{Devices: []cuda.Device{poisoned, other}, LanesPerDevice: 2, CacheCapacity: -1})
	ctx := context.Background()
	var indeterminate int
	for i := range 6 {
		r, err := s.Submit(ctx, "t", poisoned.batch(0, 1))
		if errors.Is(err, actors.ErrNoHealthyLane) {
			continue // the batch's buffers live on the poisoned device: nowhere to go
		}
		if err != nil {
			if !errors.Is(err, actors.ErrIndeterminate) || r.Outcome != lanes.OutcomeIndeterminate {
				// Submissions after the poisoning may also be refused by a
				// lane that has not noticed yet, and rerouted.
				var le *lanes.Error
				if !errors.As(err, &le) {
					t.Fatalf("submission %d: got err %v (outcome %v); want actors.ErrIndeterminate with an indeterminate outcome, or another *lanes.Error", i, err, r.Outcome)
				}
			}
			indeterminate++
		}
	}
	if indeterminate == 0 {
		t.Fatal("after the sticky fault: got no submission ended in error, want at least one indeterminate")
	}
	waitHealth(t, s, 0, actors.HealthQuarantined)
	waitHealth(t, s, 1, actors.HealthQuarantined)
	if _, err := s.Submit(ctx, "t", other.batch(0, 1)); err != nil {
		t.Fatalf("the other device: got err %v, want nil (it keeps serving)", err)
	}
	if st := s.Lanes(); st[2].Health != actors.HealthServing && st[3].Health != actors.HealthServing {
		t.Fatalf("the other device's lanes 2 and 3: got %v and %v, want at least one %v (lanes %+v)", st[2].Health, st[3].Health, actors.HealthServing, st)
	}
}

func waitHealth(t *testing.T, s *actors.Scheduler, lane int, want actors.Health) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Lanes()[lane].Health != want {
		if time.Now().After(deadline) {
			t.Fatalf("lane %d after 5s: got %v, want %v", lane, s.Lanes()[lane].Health, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// panicDevice hands out streams whose events panic when queried: a backend
// bug that strikes while the lane actor polls, outside the lane core's own
// recovery.
type panicDevice struct{ *device }

func (d panicDevice) NewStream() (backend.Stream, error) {
	s, err := d.device.NewStream()
	return panicStream{s}, err
}

type panicStream struct{ backend.Stream }

func (s panicStream) Record() (backend.Event, error) {
	e, err := s.Stream.Record()
	return panicEvent{e}, err
}

func (s panicStream) RecordFence() (backend.Event, error) {
	e, err := s.Stream.RecordFence()
	return panicEvent{e}, err
}

type panicEvent struct{ backend.Event }

func (panicEvent) Query() backend.FenceQuery { panic("backend bug in event query") }

func TestPanicInLaneActorQuarantines(t *testing.T) {
	bad := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	good := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{panicDevice{bad}, good}, CacheCapacity: -1})
	_, err := s.Submit(context.Background(), "a", bad.batch(0, 1))
	if !errors.Is(err, actors.ErrIndeterminate) {
		t.Fatalf("submission on a panicking lane: got err %v, want actors.ErrIndeterminate", err)
	}
	waitHealth(t, s, 0, actors.HealthQuarantined)
	if _, err := s.Submit(context.Background(), "a", good.batch(0, 1)); err != nil {
		t.Fatalf("the tenant, moved to the healthy lane: got err %v, want nil", err)
	}
}
