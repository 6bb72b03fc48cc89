package lanecore_test

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// stagedRig is a program out = in[0] + in[1] over four f32, with the slots
// in descriptor order mapped to logical inputs by inputMap.
type stagedRig struct {
	*rig
	st *lanecore.Staged
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
			t.Fatalf("Alloc(16 bytes): got err %v, want nil", err)
		}
		return b
	}
	host := func() cuda.HostBuffer {
		h, err := r.dev.AllocHost(16)
		if err != nil {
			t.Fatalf("AllocHost(16): got err %v, want nil", err)
		}
		return h
	}
	a, b, out := alloc(), alloc(), alloc()
	add, err := cuda.Launch(r.dev.Registry().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(out.Whole()), cuda.BufferArg(a.Whole()), cuda.BufferArg(b.Whole()), cuda.I32Arg(4))
	if err != nil {
		t.Fatalf("cuda.Launch(add): got err %v, want nil", err)
	}
	compute := []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("staged-test", add), cache.PlanScope())}}
	st, err := lanecore.NewStaged(
		[]lanes.Slot{{Staging: host().Whole(), Device: a.Whole()}, {Staging: host().Whole(), Device: b.Whole()}}, inputMap,
		[]lanes.Slot{{Staging: host().Whole(), Device: out.Whole()}}, []int{0}, compute)
	if err != nil {
		t.Fatalf("lanecore.NewStaged(input map %v): got err %v, want nil", inputMap, err)
	}
	if _, err := r.lane.Configure(8); err != nil {
		t.Fatalf("Configure(8): got err %v, want nil", err)
	}
	if err := r.lane.Prepare(st); err != nil {
		t.Fatalf("Prepare: got err %v, want nil", err)
	}
	if p, _ := r.lane.Preparation(); p.Resident != 2 {
		t.Fatalf("after Prepare: got %d resident executables, want 2: the full and the resident-input variants", p.Resident)
	}
	return &stagedRig{r, st}
}

func (s *stagedRig) replay(collect bool, in ...[]byte) lanes.StagedResult {
	s.t.Helper()
	res, err := s.lane.Replay(s.st, in, collect)
	if err != nil {
		s.t.Fatalf("Replay(collect %v): got err %v, want nil", collect, err)
	}
	return res
}

func TestStagedReplayPathsAndCounters(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	x, y := f32s(1, 2, 3, 4), f32s(10, 20, 30, 40)
	res := s.replay(true, x, y)
	if want := f32s(11, 22, 33, 44); string(res.Outputs[0]) != string(want) {
		t.Fatalf("staged replay: got output %v, want %v", res.Outputs[0], want)
	}
	if res.OutputCache || res.Resident || !res.TimeKnown {
		t.Fatalf("staged replay: got OutputCache %v, Resident %v, TimeKnown %v; want false, false, true (%+v)", res.OutputCache, res.Resident, res.TimeKnown, res)
	}
	c := s.lane.StagedCounters()
	if c.Uploads != 2 || c.HostToDeviceBytes != 32 || c.GraphLaunches != 1 || c.Readbacks != 1 {
		t.Fatalf("counters: got Uploads %d, HostToDeviceBytes %d, GraphLaunches %d, Readbacks %d; want 2, 32, 1, 1 (%+v)", c.Uploads, c.HostToDeviceBytes, c.GraphLaunches, c.Readbacks, c)
	}
	res = s.replay(true, x, y) // identical inputs, outputs collected: no launch at all
	if !res.OutputCache || res.DeviceTime != 0 || !res.TimeKnown {
		t.Fatalf("identical inputs: got OutputCache %v, DeviceTime %v, TimeKnown %v; want true, 0, true (%+v)", res.OutputCache, res.DeviceTime, res.TimeKnown, res)
	}
	if want := f32s(11, 22, 33, 44); string(res.Outputs[0]) != string(want) {
		t.Fatalf("output cache: got output %v, want %v", res.Outputs[0], want)
	}
	if c2 := s.lane.StagedCounters(); c2.GraphLaunches != 1 || c2.OutputCacheHits != 1 {
		t.Fatalf("after an output-cache hit: got GraphLaunches %d, OutputCacheHits %d; want 1, 1 (%+v)", c2.GraphLaunches, c2.OutputCacheHits, c2)
	}
	s.replay(false, x, y) // outputs not collected: the cache is spent
	res = s.replay(false, x, y)
	if !res.Resident {
		t.Fatalf("identical, initialized inputs: got Resident false, want true: the resident-input variant (%+v)", res)
	}
	if c3 := s.lane.StagedCounters(); c3.Uploads != 2 || c3.ResidentInputReplays != 2 {
		t.Fatalf("after resident-input replays: got Uploads %d, ResidentInputReplays %d; want 2, 2: no inputs staged again (%+v)", c3.Uploads, c3.ResidentInputReplays, c3)
	}
	// Changing an input after capture is seen: no stale device bytes.
	res = s.replay(true, x, f32s(100, 200, 300, 400))
	if want := f32s(101, 202, 303, 404); string(res.Outputs[0]) != string(want) {
		t.Fatalf("after an input changed: got output %v, want %v", res.Outputs[0], want)
	}
	if res.OutputCache || res.Resident {
		t.Fatalf("after an input changed: got OutputCache %v, Resident %v; want false, false (%+v)", res.OutputCache, res.Resident, res)
	}
}

func TestStagedPaddingAndReorderedSlots(t *testing.T) {
	s := newStagedRig(t, []int{1, 0}) // slot 0 (a) reads logical input 1
	res := s.replay(true, f32s(5, 6), f32s(1, 1, 1, 1))
	if string(res.Outputs[0]) != string(f32s(6, 7, 1, 1)) {
		t.Fatalf("short input: got output %v, want %v (zero-padded)", res.Outputs[0], f32s(6, 7, 1, 1))
	}
}

func TestStagedErrorsSayHowToFix(t *testing.T) {
	cases := map[string][]int{"duplicate": {0, 0}, "sparse": {0, 2}, "length": {0}}
	seen := map[string]bool{}
	for name, m := range cases {
		_, err := lanecore.NewStaged([]lanes.Slot{{}, {}}, m, nil, nil, nil)
		if !errors.Is(err, lanes.ErrIndexMap) || !strings.Contains(err.Error(), "Fix:") {
			t.Fatalf("NewStaged with a %s input map %v: got err %v, want one wrapping lanes.ErrIndexMap that says %q", name, m, err, "Fix:")
		}
		if seen[err.Error()] {
			t.Fatalf("%s: got the message %q of another defect, want a message of its own", name, err)
		}
		seen[err.Error()] = true
		t.Logf("%s: %v", name, err)
	}
	s := newStagedRig(t, []int{0, 1})
	for name, in := range map[string][][]byte{"count": {f32s(1)}, "size": {f32s(1, 2, 3, 4, 5), f32s(1)}} {
		_, err := s.lane.Replay(s.st, in, true)
		if !errors.Is(err, lanes.ErrStagedInput) || !strings.Contains(err.Error(), "Fix:") {
			t.Fatalf("Replay with a wrong input %s: got err %v, want one wrapping lanes.ErrStagedInput that says %q", name, err, "Fix:")
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestStagedInputsWrittenInPlace: inputs written through StagedInputs are
// what ReplayWritten computes on (the full graph, no comparison); the next
// Replay stages its inputs again (the lane never saw those bytes), a
// shorter input after a longer one is zero-padded, and the input key is
// computed only when asked, over the inputs Replay staged.
func TestStagedInputsWrittenInPlace(t *testing.T) {
	s := newStagedRig(t, []int{1, 0}) // slot 0 reads logical input 1
	views, err := s.lane.StagedInputs(s.st)
	if err != nil || len(views) != 2 || len(views[0]) != 16 || len(views[1]) != 16 {
		t.Fatalf("StagedInputs: got %d views, err %v; want 2 views of 16 bytes, nil", len(views), err)
	}
	copy(views[0], f32s(1, 2, 3, 4))
	copy(views[1], f32s(10, 20, 30, 40))
	res, err := s.lane.ReplayWritten(s.st, true)
	if err != nil || res.Resident || res.OutputCache || string(res.Outputs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("ReplayWritten: got %v, resident %v, output cache %v, err %v; want %v from the full graph", res.Outputs, res.Resident, res.OutputCache, err, f32s(11, 22, 33, 44))
	}
	if _, err := s.lane.StagedInputKey(s.st); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("StagedInputKey after ReplayWritten: got err %v, want lanes.ErrStagedInput (the lane never saw those inputs)", err)
	}
	// The same bytes through Replay: not taken for the staged ones.
	res = s.replay(true, f32s(1, 2, 3, 4), f32s(10, 20, 30, 40))
	if res.Resident || res.OutputCache || string(res.Outputs[0]) != string(f32s(11, 22, 33, 44)) {
		t.Fatalf("Replay after ReplayWritten: got %v, resident %v, output cache %v; want a full replay giving %v", res.Outputs, res.Resident, res.OutputCache, f32s(11, 22, 33, 44))
	}
	// A shorter input: the staging's old tail must read as zeros.
	res = s.replay(true, f32s(5, 6), f32s(10, 20, 30, 40))
	if string(res.Outputs[0]) != string(f32s(15, 26, 30, 40)) {
		t.Fatalf("short input after a long one: got %v, want %v (zero-padded)", res.Outputs[0], f32s(15, 26, 30, 40))
	}
	// A prefix-equal input of another length is new inputs, not the same.
	res = s.replay(true, f32s(5, 6, 0), f32s(10, 20, 30, 40))
	if res.OutputCache || res.Resident {
		t.Fatalf("an input one element longer, same bytes after padding: got output cache %v, resident %v; want a full replay", res.OutputCache, res.Resident)
	}
	key, err := s.lane.StagedInputKey(s.st)
	if err != nil {
		t.Fatalf("StagedInputKey: got err %v, want nil", err)
	}
	h := sha256.New()
	for _, v := range [][]byte{{2, 0, 0, 0, 0, 0, 0, 0}, {12, 0, 0, 0, 0, 0, 0, 0}, f32s(5, 6, 0), {16, 0, 0, 0, 0, 0, 0, 0}, f32s(10, 20, 30, 40)} {
		h.Write(v)
	}
	if want := h.Sum(nil); string(key[:]) != string(want) {
		t.Fatalf("StagedInputKey: got %x, want the SHA-256 of the count and each input's length and bytes, %x", key, want)
	}
	// ForgetOutputs: the same inputs are staged and run again in full.
	s.st.ForgetOutputs()
	if res = s.replay(true, f32s(5, 6, 0), f32s(10, 20, 30, 40)); res.OutputCache || res.Resident {
		t.Fatalf("after ForgetOutputs: got output cache %v, resident %v; want the full graph", res.OutputCache, res.Resident)
	}
}

// TestStagedComputeWritingItsInputs: a compute that writes an input slot's
// device region (out = a + a into a itself) must not take the
// resident-input variant, which would compute on the changed inputs.
func TestStagedComputeWritingItsInputs(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 0)
	a, err := r.dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.F32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	in, err := r.dev.AllocHost(16)
	if err != nil {
		t.Fatalf("AllocHost: got err %v, want nil", err)
	}
	out, err := r.dev.AllocHost(16)
	if err != nil {
		t.Fatalf("AllocHost: got err %v, want nil", err)
	}
	add, err := cuda.Launch(r.dev.Registry().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(a.Whole()), cuda.BufferArg(a.Whole()), cuda.BufferArg(a.Whole()), cuda.I32Arg(4))
	if err != nil {
		t.Fatalf("cuda.Launch(add): got err %v, want nil", err)
	}
	st, err := lanecore.NewStaged([]lanes.Slot{{Staging: in.Whole(), Device: a.Whole()}}, []int{0}, []lanes.Slot{{Staging: out.Whole(), Device: a.Whole()}}, []int{0},
		[]lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("staged-test", add), cache.PlanScope())}})
	if err != nil {
		t.Fatalf("NewStaged: got err %v, want nil", err)
	}
	if _, err := r.lane.Configure(8); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	if err := r.lane.Prepare(st); err != nil {
		t.Fatalf("Prepare: got err %v, want nil", err)
	}
	s := &stagedRig{r, st}
	for i, collect := range []bool{false, true, true} {
		res := s.replay(collect, f32s(1, 2, 3, 4))
		if res.Resident {
			t.Fatalf("replay %d of the same inputs: got the resident-input variant, want the full graph (the compute writes its input)", i)
		}
		if collect && string(res.Outputs[0]) != string(f32s(2, 4, 6, 8)) {
			t.Fatalf("replay %d: got %v, want %v (a + a of the staged inputs)", i, res.Outputs[0], f32s(2, 4, 6, 8))
		}
	}
}

// TestStagedInputsThenReplay: once the staging was handed out, it no
// longer stands for the inputs Replay staged: new bytes passed to Replay
// are new inputs even if the caller wrote them into the staging already.
func TestStagedInputsThenReplay(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	if res := s.replay(true, f32s(1, 1, 1, 1), f32s(1, 1, 1, 1)); string(res.Outputs[0]) != string(f32s(2, 2, 2, 2)) {
		t.Fatalf("first replay: got %v, want %v", res.Outputs[0], f32s(2, 2, 2, 2))
	}
	views, err := s.lane.StagedInputs(s.st)
	if err != nil {
		t.Fatalf("StagedInputs: got err %v, want nil", err)
	}
	copy(views[0], f32s(2, 2, 2, 2))
	res := s.replay(true, f32s(2, 2, 2, 2), f32s(1, 1, 1, 1))
	if res.OutputCache || res.Resident || string(res.Outputs[0]) != string(f32s(3, 3, 3, 3)) {
		t.Fatalf("Replay of the bytes written into the view: got %v, output cache %v, resident %v; want %v from the full graph", res.Outputs[0], res.OutputCache, res.Resident, f32s(3, 3, 3, 3))
	}
	copy(views[0], f32s(9, 9, 9, 9)) // the caller writes its view again: Replay's inputs still decide
	if res = s.replay(true, f32s(2, 2, 2, 2), f32s(1, 1, 1, 1)); !res.OutputCache || string(res.Outputs[0]) != string(f32s(3, 3, 3, 3)) {
		t.Fatalf("Replay of the same inputs again: got %v, output cache %v; want the cached %v", res.Outputs[0], res.OutputCache, f32s(3, 3, 3, 3))
	}
	s.st.ForgetOutputs()
	if res = s.replay(true, f32s(2, 2, 2, 2), f32s(1, 1, 1, 1)); string(res.Outputs[0]) != string(f32s(3, 3, 3, 3)) {
		t.Fatalf("Replay after ForgetOutputs, the view rewritten: got %v, want %v (resident inputs on the device)", res.Outputs[0], f32s(3, 3, 3, 3))
	}
}

// TestStagedProgramServesOneLane: a program is replayed only by the lane
// it was prepared on; another lane, a nil program or one not built by
// NewStaged is refused with ErrStagedInput and a fix, never a panic.
func TestStagedProgramServesOneLane(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	st2, err := backend.Must(s.dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	other, err := lanecore.New(lanecore.Config{ID: 2, Device: backend.Must(s.dev), Stream: st2, Runtime: "lanes-test"})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	if _, err := other.Configure(8); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	in := [][]byte{f32s(1), f32s(2)}
	checks := map[string]func() error{
		"Replay on another lane":   func() error { _, err := other.Replay(s.st, in, true); return err },
		"ReplayWritten on another": func() error { _, err := other.ReplayWritten(s.st, true); return err },
		"StagedInputs on another":  func() error { _, err := other.StagedInputs(s.st); return err },
		"Prepare on another lane":  func() error { return other.Prepare(s.st) },
		"Replay of nil":            func() error { _, err := s.lane.Replay(nil, in, true); return err },
		"Prepare of nil":           func() error { return s.lane.Prepare(nil) },
		"StagedInputKey of nil":    func() error { _, err := s.lane.StagedInputKey(nil); return err },
		"Replay of a zero Staged":  func() error { _, err := s.lane.Replay(&lanecore.Staged{}, in, true); return err },
		"Replay of an unprepared one": func() error {
			buf, err := s.dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
			if err != nil {
				return err
			}
			inc, err := cuda.Launch(s.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(buf.Whole()), cuda.I32Arg(16))
			if err != nil {
				return err
			}
			fresh, err := lanecore.NewStaged(nil, nil, nil, nil, []lanes.Entry{lanes.Replayed("staged-test", 0, inc)})
			if err != nil {
				return err
			}
			_, err = s.lane.Replay(fresh, nil, false)
			return err
		},
	}
	for name, call := range checks {
		err := call()
		if !errors.Is(err, lanes.ErrStagedInput) || !strings.Contains(err.Error(), "Fix:") {
			t.Errorf("%s: got err %v, want lanes.ErrStagedInput with a fix", name, err)
		}
	}
	var nilStaged *lanecore.Staged
	nilStaged.ForgetOutputs() // no panic
	if res := s.replay(true, f32s(1, 1, 1, 1), f32s(2, 2, 2, 2)); string(res.Outputs[0]) != string(f32s(3, 3, 3, 3)) {
		t.Fatalf("Replay on its own lane after the refusals: got %v, want %v", res.Outputs[0], f32s(3, 3, 3, 3))
	}
}

// TestStagedChainedAndForgotten: a program's input staging written by
// other work (another program's output copy into the same pinned memory)
// does not make Replay take new inputs for the last ones; ForgetOutputs
// after other work wrote an input's device region runs the full graph; a
// sealed lane refuses Prepare instead of capturing nothing.
func TestStagedChainedAndForgotten(t *testing.T) {
	s := newStagedRig(t, []int{0, 1})
	x := f32s(1, 2, 3, 4)
	res := s.replay(true, x, x)
	if string(res.Outputs[0]) != string(f32s(2, 4, 6, 8)) {
		t.Fatalf("first replay: got %v, want %v", res.Outputs[0], f32s(2, 4, 6, 8))
	}
	// Other work writes the program's first input staging (as a chained
	// program's output copy would): the lane's own copy decides.
	views, err := s.lane.StagedInputs(s.st)
	if err != nil {
		t.Fatalf("StagedInputs: got err %v, want nil", err)
	}
	copy(views[0], f32s(9, 9, 9, 9))
	if res = s.replay(true, f32s(9, 9, 9, 9), x); res.OutputCache || string(res.Outputs[0]) != string(f32s(10, 11, 12, 13)) {
		t.Fatalf("inputs equal to what other work left in the staging: got %v, output cache %v; want %v computed", res.Outputs[0], res.OutputCache, f32s(10, 11, 12, 13))
	}
	// Other work overwrites an input's device region: ForgetOutputs makes
	// the same inputs run in full again.
	s.replay(false, x, x)
	zero, _ := cuda.Zero(s.st.FullBatch().Entries[0].Command.Dst)
	if _, err := s.lane.Submit(lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, zero)}}); err != nil {
		t.Fatalf("Submit(zero an input region): got err %v, want nil", err)
	}
	s.st.ForgetOutputs()
	if res = s.replay(true, x, x); res.Resident || res.OutputCache || string(res.Outputs[0]) != string(f32s(2, 4, 6, 8)) {
		t.Fatalf("after other work zeroed an input region and ForgetOutputs: got %v, resident %v, output cache %v; want %v from the full graph", res.Outputs[0], res.Resident, res.OutputCache, f32s(2, 4, 6, 8))
	}
	if _, err := s.lane.Seal(); err != nil {
		t.Fatalf("Seal: got err %v, want nil", err)
	}
	if err := s.lane.Prepare(s.st); !errors.Is(err, lanes.ErrStagedInput) || !strings.Contains(err.Error(), "sealed") {
		t.Fatalf("Prepare on a sealed lane: got err %v, want lanes.ErrStagedInput saying the preparation is sealed", err)
	}
}
