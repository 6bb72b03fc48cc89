//go:build !cuda

package embedder_test

// A flood beside light tenants on the simulated device's virtual clock:
// what the flood costs them is counted in batches, not measured in time,
// so it holds on any machine however loaded.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/examples/embedder"
	"github.com/lanesched/lanes/lanes"
)

// virtualBackend starts a backend on a simulated device whose clock moves
// only when the test advances it.
func virtualBackend(t *testing.T, cfg actors.Config) (*embedder.Backend, *sim.VirtualClock) {
	t.Helper()
	var clock *sim.VirtualClock
	b := start(t, func() (cuda.Device, error) {
		d, err := sim.New(sim.Config{Clock: sim.ClockVirtual})
		if err == nil {
			clock = d.Clock()
		}
		return d, err
	}, cfg)
	return b, clock
}

// drain advances the clock until every submission ended, and returns
// their receipts in order.
func drain(t *testing.T, clock *sim.VirtualClock, pending []lanes.Pending) []lanes.Receipt {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	out := make([]lanes.Receipt, len(pending))
	for i, p := range pending {
		for ended := false; !ended; {
			clock.Advance(20 * time.Microsecond)
			select {
			case <-p.Done():
				ended = true
			case <-time.After(time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("submission %d of %d: not ended after a minute of advancing the clock", i, len(pending))
				}
			}
		}
		r, err := p.Result()
		if err != nil {
			t.Fatalf("submission %d of %d (tenant %s): got err %v, want nil", i, len(pending), r.Tenant, err)
		}
		out[i] = r
	}
	return out
}

// received waits until the scheduler's lanes took every one of want
// submissions from their mailboxes (into their fair queues or onto their
// streams), so that the clock moves only once each lane can choose among
// all of them.
func received(t *testing.T, s *actors.Scheduler, want uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got uint64
		for _, l := range s.Lanes() {
			got += l.Received
		}
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lanes received %d of %d submissions in 30s, want all", got, want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestFloodLeavesLightTenantsTheirTurn: a tenant fills its admission on
// the lanes four light tenants share, round after round, and each light
// tenant's step is admitted, never refused, and waits on its stream
// behind at most the flood's batches already there (StreamDepth) and one
// turn of the lane's fair queue, computing the reference's bits. What
// this buys in wall-clock latency, TestFloodLeavesLightTenantsTheirLatency
// measures where timing is asked for (LANES_TIMING=1).
func TestFloodLeavesLightTenantsTheirTurn(t *testing.T) {
	for _, lanesN := range []int{1, 4} {
		t.Run(fmt.Sprintf("lanes=%d", lanesN), func(t *testing.T) {
			const depth, limit, k, n, rounds = 2, 16, 16, 64, 6
			b, clock := virtualBackend(t, actors.Config{LanesPerDevice: lanesN, StreamDepth: depth, MaxInFlightPerLane: limit, HangTimeout: -1, TenantIdle: -1})
			ctx := context.Background()
			var submitted uint64
			async := func(tenant string, batch lanes.Batch) (lanes.Pending, error) {
				p, err := b.S.SubmitAsync(ctx, tenant, batch)
				if err == nil {
					submitted++
				}
				return p, err
			}
			var light []*embedder.Tenant
			var setUp []lanes.Pending
			for _, name := range []string{"flood", "light0", "light1", "light2", "light3"} {
				tn, err := b.NewTenant(name, n)
				if err != nil {
					t.Fatalf("NewTenant(%s): got err %v, want nil", name, err)
				}
				reset, _ := b.Reset(tn)
				p, err := async(name, reset)
				if err != nil {
					t.Fatalf("reset %s: got err %v, want nil", name, err)
				}
				setUp = append(setUp, p)
				light = append(light, tn)
			}
			drain(t, clock, setUp)
			heavy, light := light[0], light[1:]
			flood, err := b.Step(heavy, inputs(1, 0, n), k)
			if err != nil {
				t.Fatalf("the flood's Step: got err %v, want nil", err)
			}
			states := make([][]float32, len(light))
			for i := range states {
				states[i] = make([]float32, n)
			}
			worst := 0
			for round := range rounds {
				// The flood fills its admission, then each light tenant
				// takes its next step.
				var pending []lanes.Pending
				for {
					p, err := async(heavy.Name, flood)
					if errors.Is(err, actors.ErrOverloaded) {
						break
					}
					if err != nil {
						t.Fatalf("round %d: the flood: got err %v, want nil or actors.ErrOverloaded", round, err)
					}
					pending = append(pending, p)
				}
				floods := len(pending)
				for i, tn := range light {
					step, err := b.Step(tn, inputs(100+i, round, n), k)
					if err != nil {
						t.Fatalf("Step(%s): got err %v, want nil", tn.Name, err)
					}
					p, err := async(tn.Name, step)
					if err != nil {
						t.Fatalf("round %d: %s beside a flood of %d: got err %v, want admitted (it is under its share)", round, tn.Name, floods, err)
					}
					pending = append(pending, p)
				}
				received(t, b.S, submitted)
				receipts := drain(t, clock, pending)
				for i, tn := range light {
					r := receipts[floods+i]
					ahead := 0
					for _, f := range receipts[:floods] {
						if f.Lane == r.Lane && f.Fence < r.Fence {
							ahead++
						}
					}
					worst = max(worst, ahead)
					if ahead > depth+1 {
						t.Errorf("round %d: %s's step on lane %d ran behind %d of the flood's %d batches, want at most %d (the stream's depth and one turn)",
							round, tn.Name, r.Lane, ahead, floods, depth+1)
					}
					got, err := b.Result(tn)
					states[i] = embedder.Reference(states[i], inputs(100+i, round, n), k)
					if err != nil || !embedder.SameBits(got, states[i]) {
						t.Fatalf("round %d: %s's result: got err %v or bits that differ from the reference, want the reference's bits", round, tn.Name, err)
					}
				}
				if floods == 0 {
					t.Fatalf("round %d: the flood: got nothing admitted, want its admission full", round)
				}
			}
			t.Logf("%d rounds: the flood filled its admission each time; a light tenant's step ran behind at most %d of its batches", rounds, worst)
		})
	}
}
