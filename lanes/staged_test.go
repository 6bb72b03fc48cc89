package lanes_test

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// stagedRig is a program out = in[0] + in[1] over four f32, with the slots
// in descriptor order mapped to logical inputs by inputMap.
type stagedRig struct {
	*rig
	st *lanes.Staged
}

func f32s(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func newStagedRig(t *testing.T, inputMap []int) *stagedRig {
	r := newRig(t, sim.ClockVirtual, 0)
	alloc := func() cuda.Buffer {
		b, err := r.dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.F32})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	host := func() cuda.HostBuffer {
		h, err := r.dev.AllocHost(16)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	a, b, out := alloc(), alloc(), alloc()
	add, err := cuda.Launch(r.dev.Registry().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(out.Whole()), cuda.BufferArg(a.Whole()), cuda.BufferArg(b.Whole()), cuda.I32Arg(4))
	if err != nil {
		t.Fatal(err)
	}
	compute := []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("staged-test", add), cache.PlanScope())}}
	st, err := lanes.NewStaged(
		[]lanes.Slot{{Staging: host().Whole(), Device: a.Whole()}, {Staging: host().Whole(), Device: b.Whole()}}, inputMap,
		[]lanes.Slot{{Staging: host().Whole(), Device: out.Whole()}}, []int{0}, compute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.lane.Configure(8); err != nil {
		t.Fatal(err)
	}
	if err := r.lane.Prepare(st); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.lane.Preparation(); p.Resident != 2 {
		t.Fatalf("%d executables; want the full and the resident-input variants", p.Resident)
	}
	return &stagedRig{r, st}
}

func (s *stagedRig) replay(collect bool, in ...[]byte) lanes.StagedResult {
	s.t.Helper()
	res, err := s.lane.Replay(s.st, in, collect)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

func TestStagedReplayPathsAndCounters(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	x, y := f32s(1, 2, 3, 4), f32s(10, 20, 30, 40)
	res := s.replay(true, x, y)
	if string(res.Outputs[0]) != string(f32s(11, 22, 33, 44)) || res.OutputCache || res.Resident || !res.TimeKnown {
		t.Fatalf("staged replay: %+v", res)
	}
	c := s.lane.StagedCounters()
	if c.Uploads != 2 || c.HostToDeviceBytes != 32 || c.GraphLaunches != 1 || c.Readbacks != 1 {
		t.Fatalf("counters %+v", c)
	}
	res = s.replay(true, x, y) // identical inputs, outputs collected: no launch at all
	if !res.OutputCache || res.DeviceTime != 0 || !res.TimeKnown || string(res.Outputs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("output cache: %+v", res)
	}
	if c2 := s.lane.StagedCounters(); c2.GraphLaunches != 1 || c2.OutputCacheHits != 1 {
		t.Fatalf("the output cache launched: %+v", c2)
	}
	s.replay(false, x, y) // outputs not collected: the cache is spent
	res = s.replay(false, x, y)
	if !res.Resident {
		t.Fatal("identical, initialized inputs must take the resident-input variant")
	}
	if c3 := s.lane.StagedCounters(); c3.Uploads != 2 || c3.ResidentInputReplays != 2 {
		t.Fatalf("resident-input replays staged inputs again: %+v", c3)
	}
	// Changing an input after capture is seen: no stale device bytes.
	res = s.replay(true, x, f32s(100, 200, 300, 400))
	if string(res.Outputs[0]) != string(f32s(101, 202, 303, 404)) || res.OutputCache || res.Resident {
		t.Fatalf("after an input changed: %+v", res)
	}
}

func TestStagedPaddingAndReorderedSlots(t *testing.T) {
	s := newStagedRig(t, []int{1, 0}) // slot 0 (a) reads logical input 1
	res := s.replay(true, f32s(5, 6), f32s(1, 1, 1, 1))
	if string(res.Outputs[0]) != string(f32s(6, 7, 1, 1)) {
		t.Fatalf("short input must be zero-padded: got %v", res.Outputs[0])
	}
}

func TestStagedErrorsSayHowToFix(t *testing.T) {
	cases := map[string][]int{"duplicate": {0, 0}, "sparse": {0, 2}, "length": {0}}
	seen := map[string]bool{}
	for name, m := range cases {
		_, err := lanes.NewStaged([]lanes.Slot{{}, {}}, m, nil, nil, nil)
		if !errors.Is(err, lanes.ErrIndexMap) || !strings.Contains(err.Error(), "Fix:") {
			t.Fatalf("%s: %v", name, err)
		}
		if seen[err.Error()] {
			t.Fatalf("%s: the same message as another defect", name)
		}
		seen[err.Error()] = true
		t.Logf("%s: %v", name, err)
	}
	s := newStagedRig(t, []int{0, 1})
	for name, in := range map[string][][]byte{"count": {f32s(1)}, "size": {f32s(1, 2, 3, 4, 5), f32s(1)}} {
		_, err := s.lane.Replay(s.st, in, true)
		if !errors.Is(err, lanes.ErrStagedInput) || !strings.Contains(err.Error(), "Fix:") {
			t.Fatalf("%s: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
