package remote_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// stagedSide is one way to replay a staged program: one process, or a
// lane host through a front. prepare makes the program of four float32
// that each replay stages in, doubles into another buffer and reads back.
type stagedSide struct {
	prepare func(t *testing.T, tenant string) (replay func(tenant string, inputs [][]byte, collect bool) (lanes.StagedResult, error))
}

// stagedStep is what a side showed of one replay.
type stagedStep struct {
	outputs                         [][]byte
	outputCache, resident, timeKnow bool
	zeroTime                        bool
	receipt                         receiptShape
	errs                            []string
}

func stagedStepOf(r lanes.StagedResult, err error) stagedStep {
	s := stagedStep{outputs: r.Outputs, outputCache: r.OutputCache, resident: r.Resident, timeKnow: r.TimeKnown, zeroTime: r.DeviceTime == 0,
		receipt: shapeOf(r.Receipt)}
	for name, e := range stagedSentinels {
		if errors.Is(err, e) {
			s.errs = append(s.errs, name)
		}
	}
	slices.Sort(s.errs)
	if err != nil && len(s.errs) == 0 {
		s.errs = []string{"unmatched: " + err.Error()}
	}
	return s
}

// stagedSentinels are the sentinels of staged replays' mistakes.
var stagedSentinels = map[string]error{
	"lanes.ErrStagedInput": lanes.ErrStagedInput, "actors.ErrBatchTooLarge": actors.ErrBatchTooLarge,
	"actors.ErrNotYours": actors.ErrNotYours, "lanes.ErrInvalidBatch": lanes.ErrInvalidBatch,
}

// runStaged replays the program with the same inputs twice collected
// (the second from the output cache), once not collected (the
// resident-input variant), with new inputs, and with the mistakes a
// caller makes: too many inputs, an input too long, another tenant.
func runStaged(t *testing.T, side stagedSide) []stagedStep {
	replay := side.prepare(t, "a")
	seven, nine := f32Bytes(7, 1, 2, 3), f32Bytes(9)
	var steps []stagedStep
	for _, r := range []struct {
		tenant  string
		inputs  [][]byte
		collect bool
	}{
		{"a", [][]byte{seven}, true}, {"a", [][]byte{seven}, true}, {"a", [][]byte{seven}, false}, {"a", [][]byte{nine}, true},
		{"a", [][]byte{seven, nine}, true}, {"a", [][]byte{make([]byte, 17)}, true}, {"b", [][]byte{seven}, true},
	} {
		steps = append(steps, stagedStepOf(replay(r.tenant, r.inputs, r.collect)))
	}
	return steps
}

// TestStagedReplaysMatchOneProcess: a staged program prepared through a
// front (the host makes its pinned staging) replays as in one process:
// the same outputs, the same output-cache hits and resident-input
// replays, the same receipts, the same errors.
func TestStagedReplaysMatchOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, s := oneProcess(t, 1)
	double := doubling(t)
	spec := cuda.BufferSpec{Size: 16, Elem: cuda.F32}
	local := stagedSide{prepare: func(t *testing.T, tenant string) func(string, [][]byte, bool) (lanes.StagedResult, error) {
		a, _ := dev.Alloc(spec)
		b, _ := dev.Alloc(spec)
		h, _ := dev.AllocHost(16)
		o, _ := dev.AllocHost(16)
		if err := s.Own(tenant, a, b); err != nil {
			t.Fatal(err)
		}
		if err := s.OwnHost(tenant, h, o); err != nil {
			t.Fatal(err)
		}
		st, err := s.PrepareStaged(ctx, tenant, 0, lanes.StagedSpec{Inputs: []lanes.Slot{{Staging: h.Whole(), Device: a.Whole()}}, InputMap: []int{0}, Outputs: []lanes.Slot{{Staging: o.Whole(), Device: b.Whole()}}, OutputMap: []int{0}, Compute: []lanes.Entry{double(a, b)}})
		if err != nil {
			t.Fatalf("PrepareStaged: got err %v, want nil", err)
		}
		return func(tenant string, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
			return s.Replay(ctx, tenant, st, inputs, collect)
		}
	}}
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "1")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	var prog *remote.StagedProgram
	viaHost := stagedSide{prepare: func(t *testing.T, tenant string) func(string, [][]byte, bool) (lanes.StagedResult, error) {
		a, err := f.Alloc(ctx, tenant, spec)
		if err != nil {
			t.Fatal(err)
		}
		b, err := f.Alloc(ctx, tenant, spec)
		if err != nil {
			t.Fatal(err)
		}
		prog, err = f.PrepareStaged(ctx, tenant, remote.StagedSpec{Inputs: []cuda.Region{a.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{b.Whole()}, OutputMap: []int{0}, Compute: []lanes.Entry{double(a, b)}})
		if err != nil {
			t.Fatalf("Front.PrepareStaged: got err %v, want nil", err)
		}
		return func(tenant string, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
			return f.Replay(ctx, tenant, prog, inputs, collect)
		}
	}}
	want, got := runStaged(t, local), runStaged(t, viaHost)
	if first := want[0].outputs; len(first) != 1 || !reflect.DeepEqual(first[0], f32Bytes(14, 2, 4, 6)) {
		t.Fatalf("in one process: the first replay gave %v, want the input doubled", first)
	}
	if !want[1].outputCache || !want[2].resident {
		t.Fatalf("in one process: got %+v, want the second replay from the output cache and the third resident", want[:3])
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("replay %d through the lane host:\n%+v\nin one process:\n%+v", i, got[i], want[i])
		}
	}
	if in, out := prog.Bytes(); in != 16 || out != 16 {
		t.Errorf("StagedProgram.Bytes: got %d, %d; want 16, 16", in, out)
	}
	if err := f.ReleaseStaged(ctx, "a", prog); err != nil {
		t.Fatalf("ReleaseStaged: got err %v, want nil", err)
	}
	if _, err := f.Replay(ctx, "a", prog, [][]byte{{1}}, true); !errors.Is(err, lanes.ErrStagedInput) {
		t.Errorf("a replay of a released program: got err %v, want lanes.ErrStagedInput", err)
	}
	a, _ := f.Alloc(ctx, "a", spec)
	b, _ := f.Alloc(ctx, "a", spec)
	theirs, _ := f.Alloc(ctx, "b", spec)
	for name, bad := range map[string]remote.StagedSpec{
		"a map that is no permutation":   {Inputs: []cuda.Region{a.Whole()}, InputMap: []int{1}, Outputs: []cuda.Region{b.Whole()}, OutputMap: []int{0}, Compute: []lanes.Entry{double(a, b)}},
		"a compute entry with no key":    {Inputs: []cuda.Region{a.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{b.Whole()}, OutputMap: []int{0}, Compute: []lanes.Entry{{Command: double(a, b).Command}}},
		"another tenant's buffer":        {Inputs: []cuda.Region{theirs.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{b.Whole()}, OutputMap: []int{0}, Compute: []lanes.Entry{double(theirs, b)}},
		"a slot of a buffer never given": {Inputs: []cuda.Region{{Buffer: cuda.Buffer{ID: 999, Device: a.Device, Size: 16}, Length: 16}}, InputMap: []int{0}, Outputs: []cuda.Region{b.Whole()}, OutputMap: []int{0}, Compute: []lanes.Entry{double(a, b)}},
	} {
		if _, err := f.PrepareStaged(ctx, "a", bad); err == nil {
			t.Errorf("PrepareStaged with %s: got nil, want it refused", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}

// TestLargeStagedInputsCrossInTheUploadArea: a staged replay's inputs of
// 4 KiB or more go through the data plane's upload area (as uploads do),
// not the ring, and come out the same.
func TestLargeStagedInputsCrossInTheUploadArea(t *testing.T) {
	ctx := context.Background()
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "1")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	const n = 16 << 10 // float32s: 64 KiB
	spec := cuda.BufferSpec{Size: 4 * n, Elem: cuda.F32}
	in, _ := f.Alloc(ctx, "a", spec)
	out, _ := f.Alloc(ctx, "a", spec)
	add, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Add), cuda.Linear(n, 256), cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(in.Whole()), cuda.I32Arg(n))
	if err != nil {
		t.Fatal(err)
	}
	prog, err := f.PrepareStaged(ctx, "a", remote.StagedSpec{Inputs: []cuda.Region{in.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{out.Whole()}, OutputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("staged", add), cache.PlanScope())}}})
	if err != nil {
		t.Fatal(err)
	}
	before := f.Hosts()[0].AreaUploads
	for round := range 3 {
		vs := make([]float32, n)
		for i := range vs {
			vs[i] = float32(i%97 + round)
		}
		res, err := f.Replay(ctx, "a", prog, [][]byte{f32Bytes(vs...)}, true)
		if err != nil {
			t.Fatalf("replay %d: got err %v, want nil", round, err)
		}
		for i := range vs {
			vs[i] *= 2
		}
		if len(res.Outputs) != 1 || !reflect.DeepEqual(res.Outputs[0], f32Bytes(vs...)) {
			t.Fatalf("replay %d: the outputs are not the inputs doubled", round)
		}
	}
	if st := f.Hosts()[0]; !st.DataPlane || st.AreaUploads-before != 3 {
		t.Errorf("got DataPlane %v, %d uploads through the area; want 3 (one per replay)", st.DataPlane, st.AreaUploads-before)
	}
}

// TestAStagedProgramGoesToAnOpenLane: a tenant whose lane is sealed
// prepares its staged program on another lane of its device whose
// preparation is open (in one process the caller picks the lane; through
// a front the host does).
func TestAStagedProgramGoesToAnOpenLane(t *testing.T) {
	ctx := context.Background()
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "2")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	spec := cuda.BufferSpec{Size: 16, Elem: cuda.F32}
	in, _ := f.Alloc(ctx, "a", spec)
	out, _ := f.Alloc(ctx, "a", spec)
	add, _ := cuda.Launch(kernels.Builtin().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(in.Whole()), cuda.I32Arg(4))
	up, _ := cuda.Upload(in.Whole(), f32Bytes(1, 2, 3, 4))
	r, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seal(ctx, "a"); err != nil {
		t.Fatalf("Seal: got err %v, want nil", err)
	}
	prog, err := f.PrepareStaged(ctx, "a", remote.StagedSpec{Inputs: []cuda.Region{in.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{out.Whole()}, OutputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("staged", add), cache.PlanScope())}}})
	if err != nil {
		t.Fatalf("PrepareStaged with the tenant's lane %d sealed: got err %v, want it prepared on the open lane", r.Lane, err)
	}
	res, err := f.Replay(ctx, "a", prog, [][]byte{f32Bytes(5, 6, 7, 8)}, true)
	if err != nil || !reflect.DeepEqual(res.Outputs, [][]byte{f32Bytes(10, 12, 14, 16)}) || res.Receipt.Lane == r.Lane {
		t.Errorf("the replay: got %v on lane %d (%v), want the inputs doubled on the other lane than %d", res.Outputs, res.Receipt.Lane, err, r.Lane)
	}
}

// doubling is a staged program's one step: out = in + in over 4 floats,
// replayed under one key.
func doubling(t *testing.T) func(in, out cuda.Buffer) lanes.Entry {
	return func(in, out cuda.Buffer) lanes.Entry {
		add, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(in.Whole()), cuda.I32Arg(4))
		if err != nil {
			t.Fatal(err)
		}
		return lanes.Entry{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("staged", add), cache.PlanScope())}
	}
}
