package lanecore_test

import (
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
)

// newMemoRig is a lane on a virtual-clock simulator with eight counters of
// its own; twin rigs allocate the same buffers, so their handles are equal.
// Without remember, the lane plans every batch afresh.
func newMemoRig(t *testing.T, remember bool) *memoRig {
	r := &memoRig{rig: newRig(t, sim.ClockVirtual, 0)}
	if _, err := r.lane.Configure(3); err != nil {
		t.Fatalf("Configure(3): got err %v, want nil", err)
	}
	if !remember {
		lanecore.PlanAfresh(r.lane)
	}
	for range 8 {
		b, err := r.dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		testdev.Zero(t, r.dev, b)
		r.bufs = append(r.bufs, b)
	}
	return r
}

type memoRig struct {
	*rig
	outcomes []string
}

// submitOutcome is what one submission showed: its error's kind or its
// attribution, and the counters that moved.
func (r *memoRig) submitOutcome(b lanes.Batch) string {
	before := r.lane.Counters()
	sub, err := r.lane.Submit(b)
	after := r.lane.Counters()
	after.RememberedPlans, before.RememberedPlans = 0, 0
	var out string
	switch {
	case err == nil:
		out = fmt.Sprintf("fence %d launches %d rows %+v segments %+v", sub.Fence, sub.Attribution.Launches, sub.Attribution.Rows, sub.Attribution.Segments)
	case errors.Is(err, cuda.ErrStaleHandle):
		out = "refused: stale handle"
	case errors.Is(err, lanes.ErrPathRequired):
		out = "refused: path"
	case errors.Is(err, lanes.ErrInvalidBatch):
		out = "refused: invalid batch"
	default:
		out = "error: " + err.Error()
	}
	return fmt.Sprintf("%s; counters %+v -> %+v", out, before, after)
}

// TestRememberedPlansChangeNothing drives two lanes with the same random
// steps (drawn from a small pool, so that they repeat, sometimes with one
// scalar or buffer changed in the caller's reused entries, sometimes after
// a buffer the pool names was freed): one remembers plans, one plans every
// batch afresh. Every submission's outcome, attribution and counters, and
// the device's operations, must be the same; and the remembering lane must
// have remembered most of them.
func TestRememberedPlansChangeNothing(t *testing.T) {
	rigs := [2]*memoRig{newMemoRig(t, false), newMemoRig(t, true)}
	rng := rand.New(rand.NewSource(7))
	inc := rigs[0].dev.Registry().MustSpec(kernels.Inc)
	entries := [2][]lanes.Entry{make([]lanes.Entry, 0, 8), make([]lanes.Entry, 0, 8)} // reused, as a serving loop does
	dead := make([]bool, len(rigs[0].bufs))
	const steps = 600
	for i := range steps {
		shape := rng.Intn(6) // a tenant's step: which counters, how many launches
		n := int32(16)
		if rng.Intn(8) == 0 {
			n = int32(rng.Intn(20)) // now and then a different scalar, or one past the buffer's 16 elements
		}
		path := lanes.PathAdaptive
		if rng.Intn(10) == 0 {
			path = lanes.PathReplayedOnly
		}
		var bounds []int // two steps' node 1 runs eagerly, between replayed segments
		if shape == 2 || shape == 3 {
			bounds = []int{1}
		}
		victim, replace := -1, rng.Intn(4) != 0
		if rng.Intn(60) == 0 {
			victim = rng.Intn(len(dead))
		}
		for k, r := range rigs {
			if victim >= 0 && !dead[victim] { // a buffer the pool names goes
				if err := r.dev.Free(r.bufs[victim]); err != nil {
					t.Fatalf("Free: got err %v, want nil", err)
				}
				if replace { // a new one takes its index; else the steps naming it are refused from now on
					b, err := r.dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
					if err != nil {
						t.Fatalf("Alloc: got err %v, want nil", err)
					}
					testdev.Zero(t, r.dev, b)
					r.bufs[victim] = b
				}
			}
			e := entries[k][:0]
			for j := range 1 + shape%4 {
				c := cuda.Command{Kind: cuda.KindLaunch, Kernel: inc.Name, Config: cuda.Linear(16, 16),
					Args: []cuda.Arg{cuda.BufferArg(r.bufs[(shape+j)%len(r.bufs)].Whole()), cuda.I32Arg(n)}}
				ent := lanes.Entry{Phase: cache.PhaseCompute, Node: j, Command: c}
				if shape != 5 {
					ent.Replay = lanes.Replayable(c, cache.LaunchKey("memo-test", c), cache.LaneScope(1))
				}
				e = append(e, ent)
			}
			entries[k] = e
			got := r.submitOutcome(lanes.Batch{Entries: e, Path: path, EagerBoundaries: bounds})
			r.outcomes = append(r.outcomes, got)
			if i%3 == 0 {
				r.dev.Clock().Advance(time.Millisecond)
				r.lane.Poll()
			}
		}
		if victim >= 0 && !replace {
			dead[victim] = true
		}
		if a, b := rigs[0].outcomes[i], rigs[1].outcomes[i]; a != b {
			t.Fatalf("step %d: got remembered %s, want what planning afresh gave: %s", i, b, a)
		}
	}
	ta, tb := rigs[0].dev.Trace(), rigs[1].dev.Trace()
	if !slices.EqualFunc(ta, tb, func(x, y sim.TraceEntry) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) {
		t.Fatalf("device operations: got %d remembered, want the %d planned afresh", len(tb), len(ta))
	}
	if got := rigs[1].lane.Counters().RememberedPlans; got < steps/2 {
		t.Fatalf("remembered plans: got %d of %d steps, want at least half", got, steps)
	}
	if got := rigs[0].lane.Counters().RememberedPlans; got != 0 {
		t.Fatalf("remembered plans with remembering off: got %d, want 0", got)
	}
}
