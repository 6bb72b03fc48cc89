package remote_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// repeatSide is one way to replay a staged program into the caller's
// buffers and to repeat it: one process, or a lane host through a front.
type repeatSide struct {
	replay     func(tenant string, inputs [][]byte) (lanes.StagedResult, error)
	replayInto func(tenant string, inputs, outputs [][]byte) (lanes.StagedResult, error)
	repeat     func(tenant string, outputs [][]byte) (lanes.StagedResult, error)
	outputs    func() [][]byte // MakeOutputs
}

// repeatStep is what a side showed of one call: its step, and for a
// refusal its class and words; for a call into buffers, whether the
// result's outputs are those buffers.
type repeatStep struct {
	step         stagedStep
	code         cuda.Code
	notSubmitted bool
	msg          string
	intoCaller   bool
}

// runRepeats repeats before any replay, gives ReplayInto buffers of the
// wrong number and length, replays into the caller's buffers, repeats
// from the output cache, without collecting, after new inputs, and as
// another tenant.
func runRepeats(t *testing.T, side repeatSide) []repeatStep {
	t.Helper()
	seven, nine := f32Bytes(7, 1, 2, 3), f32Bytes(9, 9, 9, 9)
	var steps []repeatStep
	outs := side.outputs()
	for _, call := range []struct {
		into [][]byte // the caller's buffers it fills, if any
		run  func() (lanes.StagedResult, error)
	}{
		{nil, func() (lanes.StagedResult, error) { return side.repeat("a", nil) }},
		{outs, func() (lanes.StagedResult, error) { return side.repeat("a", outs) }},
		{nil, func() (lanes.StagedResult, error) {
			return side.replayInto("a", [][]byte{seven}, append(side.outputs(), make([]byte, 16)))
		}},
		{nil, func() (lanes.StagedResult, error) {
			return side.replayInto("a", [][]byte{seven}, [][]byte{make([]byte, 12)})
		}},
		{nil, func() (lanes.StagedResult, error) { return side.repeat("a", [][]byte{make([]byte, 20)}) }},
		{outs, func() (lanes.StagedResult, error) { return side.replayInto("a", [][]byte{seven}, outs) }},
		{outs, func() (lanes.StagedResult, error) { return side.repeat("a", outs) }},
		{nil, func() (lanes.StagedResult, error) { return side.repeat("a", nil) }},
		{nil, func() (lanes.StagedResult, error) { return side.replay("a", [][]byte{nine}) }},
		{outs, func() (lanes.StagedResult, error) { return side.repeat("a", outs) }},
		{outs, func() (lanes.StagedResult, error) { return side.repeat("b", outs) }},
	} {
		r, err := call.run()
		s := repeatStep{step: stagedStepOf(r, err)}
		s.step.outputs = nil
		for _, out := range r.Outputs {
			s.step.outputs = append(s.step.outputs, slices.Clone(out)) // the caller's buffers are written again by the next call
		}
		if err != nil {
			c := cuda.Classify(err)
			s.code, s.notSubmitted, s.msg = c.Code, c.NotSubmitted, err.Error()
		}
		if len(call.into) > 0 && len(r.Outputs) == len(call.into) {
			s.intoCaller = &r.Outputs[0][0] == &call.into[0][0]
		}
		steps = append(steps, s)
	}
	return steps
}

// TestReplayIntoAndRepeatMatchOneProcess: through a front, ReplayInto
// writes a staged program's outputs into the caller's buffers, and Repeat
// replays the last replay's inputs without sending them (from the output
// cache, or resident), as in one process: the same outputs, the same
// results and receipts, and the same refusals (a repeat before any
// replay, buffers of the wrong number or length, another tenant), in the
// same words where the front refuses itself.
func TestReplayIntoAndRepeatMatchOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, s := oneProcess(t, 1)
	double := doubling(t)
	spec := cuda.BufferSpec{Size: 16, Elem: cuda.F32}

	a, _ := dev.Alloc(spec)
	b, _ := dev.Alloc(spec)
	h, _ := dev.AllocHost(16)
	o, _ := dev.AllocHost(16)
	if err := s.Own("a", a, b); err != nil {
		t.Fatal(err)
	}
	if err := s.OwnHost("a", h, o); err != nil {
		t.Fatal(err)
	}
	st, err := s.PrepareStaged(ctx, "a", 0, lanes.StagedSpec{Inputs: []lanes.Slot{{Staging: h.Whole(), Device: a.Whole()}}, InputMap: []int{0}, Outputs: []lanes.Slot{{Staging: o.Whole(), Device: b.Whole()}}, OutputMap: []int{0}, Compute: []lanes.Entry{double(a, b)}})
	if err != nil {
		t.Fatalf("PrepareStaged: got err %v, want nil", err)
	}
	local := repeatSide{
		replay: func(tenant string, inputs [][]byte) (lanes.StagedResult, error) {
			return s.Replay(ctx, tenant, st, inputs, true)
		},
		replayInto: func(tenant string, inputs, outputs [][]byte) (lanes.StagedResult, error) {
			return s.ReplayInto(ctx, tenant, st, inputs, outputs)
		},
		repeat: func(tenant string, outputs [][]byte) (lanes.StagedResult, error) {
			return s.Repeat(ctx, tenant, st, outputs)
		},
		outputs: st.MakeOutputs,
	}

	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "1")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	ha, err := f.Alloc(ctx, "a", spec)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := f.Alloc(ctx, "a", spec)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := f.PrepareStaged(ctx, "a", remote.StagedSpec{Inputs: []cuda.Region{ha.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{hb.Whole()}, OutputMap: []int{0}, Compute: []lanes.Entry{double(ha, hb)}})
	if err != nil {
		t.Fatalf("Front.PrepareStaged: got err %v, want nil", err)
	}
	if got, want := prog.OutputSizes(), st.OutputSizes(); !reflect.DeepEqual(got, want) {
		t.Fatalf("StagedProgram.OutputSizes: got %v, want %v as in one process", got, want)
	}
	viaHost := repeatSide{
		replay: func(tenant string, inputs [][]byte) (lanes.StagedResult, error) {
			return f.Replay(ctx, tenant, prog, inputs, true)
		},
		replayInto: func(tenant string, inputs, outputs [][]byte) (lanes.StagedResult, error) {
			return f.ReplayInto(ctx, tenant, prog, inputs, outputs)
		},
		repeat: func(tenant string, outputs [][]byte) (lanes.StagedResult, error) {
			return f.Repeat(ctx, tenant, prog, outputs)
		},
		outputs: prog.MakeOutputs,
	}

	want, got := runRepeats(t, local), runRepeats(t, viaHost)
	if w := want[5]; w.step.errs != nil || !reflect.DeepEqual(w.step.outputs, [][]byte{f32Bytes(14, 2, 4, 6)}) || !w.intoCaller {
		t.Fatalf("in one process: ReplayInto gave %+v, want the input doubled in the caller's buffer (the case tests nothing)", w)
	}
	if w := want[6]; !w.step.outputCache || !w.intoCaller {
		t.Fatalf("in one process: the Repeat after it gave %+v, want the output cache's, in the caller's buffer (the case tests nothing)", w)
	}
	if w := want[0]; w.step.errs == nil || w.code == 0 {
		t.Fatalf("in one process: a Repeat before any replay gave %+v, want it refused (the case tests nothing)", w)
	}
	if w := want[7]; !w.step.resident || w.step.outputs != nil {
		t.Fatalf("in one process: a Repeat collecting nothing gave %+v, want a resident-input replay (the case tests nothing)", w)
	}
	for i := range want {
		w, g := want[i], got[i]
		if i == len(want)-1 {
			// Another tenant's: the front refuses it itself, naming the
			// program's tenant where one process names its buffer.
			t.Logf("another tenant: in one process %q, through the lane host %q", w.msg, g.msg)
			w.msg, g.msg = "", ""
		}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("call %d through the lane host:\n%+v\nin one process:\n%+v", i, g, w)
		}
	}
}
