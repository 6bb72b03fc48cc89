package lanecore_test

import (
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// TestReplayIntoAndRepeat: outputs land in the caller's buffers; Repeat
// takes the kept inputs, answers from the output cache without a launch
// while it is valid, and stages the kept inputs again after
// ForgetOutputs.
func TestReplayIntoAndRepeat(t *testing.T) {
	s := newStagedRig(t, []int{1, 0})
	if sizes := s.st.OutputSizes(); len(sizes) != 1 || sizes[0] != 16 {
		t.Fatalf("OutputSizes: got %v, want [16]", sizes)
	}
	if _, err := s.lane.Repeat(s.st, s.st.MakeOutputs()); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("Repeat before any inputs were passed: got err %v, want lanes.ErrStagedInput", err)
	}
	outs := s.st.MakeOutputs()
	res, err := s.lane.ReplayInto(s.st, [][]byte{f32s(1, 2, 3, 4), f32s(10, 20, 30, 40)}, outs)
	if err != nil || &res.Outputs[0][0] != &outs[0][0] || string(outs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("ReplayInto: got outputs %v (in the caller's buffer: %v), err %v; want %v in the caller's buffer, nil", outs[0], err == nil && &res.Outputs[0][0] == &outs[0][0], err, f32s(11, 22, 33, 44))
	}
	before := s.lane.StagedCounters()
	clear(outs[0])
	res, err = s.lane.Repeat(s.st, outs)
	if err != nil || !res.OutputCache || string(outs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("Repeat with the outputs cached: got %v, output cache %v, err %v; want %v from the cache, nil", outs[0], res.OutputCache, err, f32s(11, 22, 33, 44))
	}
	if after := s.lane.StagedCounters(); after.GraphLaunches != before.GraphLaunches || after.OutputCacheHits != before.OutputCacheHits+1 {
		t.Fatalf("Repeat from the cache: got %d launches and %d hits, want %d and %d", after.GraphLaunches, after.OutputCacheHits, before.GraphLaunches, before.OutputCacheHits+1)
	}
	// Without buffers, Repeat collects nothing and runs the resident graph.
	if res, err = s.lane.Repeat(s.st, nil); err != nil || !res.Resident || res.Outputs != nil {
		t.Fatalf("Repeat(nil): got resident %v, outputs %v, err %v; want the resident-input graph, no outputs, nil", res.Resident, res.Outputs, err)
	}
	// ForgetOutputs: the kept inputs are staged again, the full graph runs.
	s.st.ForgetOutputs()
	uploads := s.lane.StagedCounters().Uploads
	clear(outs[0])
	if res, err = s.lane.Repeat(s.st, outs); err != nil || res.OutputCache || res.Resident || string(outs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("Repeat after ForgetOutputs: got %v, output cache %v, resident %v, err %v; want %v from the full graph", outs[0], res.OutputCache, res.Resident, err, f32s(11, 22, 33, 44))
	}
	if got := s.lane.StagedCounters().Uploads; got != uploads+2 {
		t.Fatalf("Repeat after ForgetOutputs: got %d uploads, want %d: both kept inputs staged again", got, uploads+2)
	}
	// Inputs written in place are unknown to the lane: nothing to repeat.
	if _, err := s.lane.ReplayWritten(s.st, false); err != nil {
		t.Fatalf("ReplayWritten: got err %v, want nil", err)
	}
	if _, err := s.lane.Repeat(s.st, outs); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("Repeat after ReplayWritten: got err %v, want lanes.ErrStagedInput", err)
	}
}

// TestReplayIntoRefusesBuffersThatDoNotFit: a wrong count or length is
// refused before anything runs.
func TestReplayIntoRefusesBuffersThatDoNotFit(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	in := [][]byte{f32s(1), f32s(2)}
	for name, outs := range map[string][][]byte{
		"none":      {},
		"two":       {make([]byte, 16), make([]byte, 16)},
		"too short": {make([]byte, 15)},
		"too long":  {make([]byte, 17)},
		"nil":       nil,
	} {
		before := s.lane.StagedCounters()
		if _, err := s.lane.ReplayInto(s.st, in, outs); !errors.Is(err, lanes.ErrStagedInput) {
			t.Fatalf("ReplayInto with %s buffers: got err %v, want lanes.ErrStagedInput", name, err)
		}
		if _, err := s.lane.Repeat(s.st, outs); name != "nil" && !errors.Is(err, lanes.ErrStagedInput) {
			t.Fatalf("Repeat with %s buffers: got err %v, want lanes.ErrStagedInput", name, err)
		}
		if after := s.lane.StagedCounters(); after != before {
			t.Fatalf("ReplayInto with %s buffers: counters moved from %+v to %+v; want nothing run", name, before, after)
		}
	}
	if _, err := s.lane.ReplayInto(nil, in, [][]byte{make([]byte, 16)}); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("ReplayInto(nil program): got err %v, want lanes.ErrStagedInput", err)
	}
}

// TestRepeatNeverRunsOlderInputs: a replay whose launch failed before the
// lane kept its new inputs leaves nothing to repeat (Repeat is refused,
// rather than running the replay before it); once inputs are passed
// again, Repeat takes them.
func TestRepeatNeverRunsOlderInputs(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	outs := s.st.MakeOutputs()
	if _, err := s.lane.ReplayInto(s.st, [][]byte{f32s(1, 1, 1, 1), f32s(1, 1, 1, 1)}, outs); err != nil {
		t.Fatalf("ReplayInto: got err %v, want nil", err)
	}
	if err := s.dev.InjectFault(sim.Fault{Kind: sim.FaultLaunch, Nth: 1}); err != nil {
		t.Fatalf("InjectFault: got err %v, want nil", err)
	}
	if _, err := s.lane.ReplayInto(s.st, [][]byte{f32s(1, 2, 3, 4), f32s(10, 20, 30, 40)}, outs); err == nil {
		t.Fatalf("ReplayInto with its launch failing: got err nil, want the launch's error")
	}
	if s.lane.State() != lanecore.StateFailed {
		t.Fatalf("after the failed launch: got lane state %v, want failed", s.lane.State())
	}
	_, _, _ = s.lane.Synchronize() // ends what was in flight, so that Recover may run
	st, err := backend.Must(s.dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	if err := s.lane.Recover(st); err != nil {
		t.Fatalf("Recover: got err %v, want nil", err)
	}
	if _, err := s.lane.Repeat(s.st, outs); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("Repeat after a replay whose launch failed: got err %v, want lanes.ErrStagedInput (not the older inputs again)", err)
	}
	if _, err := s.lane.ReplayInto(s.st, [][]byte{f32s(1, 2, 3, 4), f32s(10, 20, 30, 40)}, outs); err != nil {
		t.Fatalf("ReplayInto after recovery: got err %v, want nil", err)
	}
	clear(outs[0])
	if res, err := s.lane.Repeat(s.st, outs); err != nil || string(outs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("Repeat after recovery: got %v (output cache %v), err %v; want %v", outs[0], res.OutputCache, err, f32s(11, 22, 33, 44))
	}
}

// TestOutputCacheHitsIntoBuffersAllocateNothing: a hit through ReplayInto
// or Repeat copies into the caller's buffers and allocates nothing (its
// checks included).
func TestOutputCacheHitsIntoBuffersAllocateNothing(t *testing.T) {
	s := newStagedRig(t, []int{1, 0})
	in, outs := [][]byte{f32s(1, 2, 3, 4), f32s(10, 20, 30, 40)}, s.st.MakeOutputs()
	if _, err := s.lane.ReplayInto(s.st, in, outs); err != nil {
		t.Fatalf("ReplayInto: got err %v, want nil", err)
	}
	for name, hit := range map[string]func() (lanes.StagedResult, error){
		"ReplayInto": func() (lanes.StagedResult, error) { return s.lane.ReplayInto(s.st, in, outs) },
		"Repeat":     func() (lanes.StagedResult, error) { return s.lane.Repeat(s.st, outs) },
	} {
		allocs := testing.AllocsPerRun(100, func() {
			if res, err := hit(); err != nil || !res.OutputCache {
				t.Fatalf("%s: got output cache %v, err %v; want a hit, nil", name, res.OutputCache, err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%s hit: got %v allocations, want 0", name, allocs)
		}
	}
}
