package lanecore_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

func TestProgramRegisteredThenInvoked(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2)
	_, _ = r.lane.Configure(4)
	id := programs.ID{Runtime: r.lane.Runtime(), Name: "decode"}
	capture := &programs.Capture{ID: id, Nodes: 3}
	sub := r.submit(lanes.Batch{Entries: r.steps(0, 1, 0), Program: capture})
	if seg := sub.Attribution.Segments[0]; seg.Program == nil || *seg.Program != id || seg.Ordinal != 0 {
		t.Fatalf("segment 0: got program %v, ordinal %d; want %v, 0 (%+v)", seg.Program, seg.Ordinal, id, seg)
	}
	r.settle()
	r.lane.Poll()
	if _, err := r.lane.Seal(); err != nil {
		t.Fatalf("Seal: got err %v, want nil", err)
	}
	cat, err := r.lane.Catalog()
	if err != nil {
		t.Fatalf("Catalog: got err %v, want nil", err)
	}
	if len(cat) != 1 || len(cat[0].Segments) != 1 || !cat[0].DeterminismReady() {
		t.Fatalf("got catalog %+v, want one determinism-ready program of one segment", cat)
	}
	inv := programs.Invocation{Program: id, Segment: cat[0].Segments[0]}
	sub = r.submit(lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &inv}}, Timing: lanes.TimingVerification})
	if len(sub.Attribution.Segments) != 1 || len(sub.Attribution.Segments[0].Logical) != 3 || sub.Attribution.Rows[0].Op != "invoke" {
		t.Fatalf("invocation: got attribution %+v, want one segment of 3 logical commands and row 0 op %q", sub.Attribution, "invoke")
	}
	r.settle()
	r.lane.Poll()
	if c0, c1 := r.count(0), r.count(1); c0 != 4 || c1 != 2 {
		t.Fatalf("got counts %d %d, want 4 2", c0, c1)
	}
	bad := inv
	bad.Segment.Commands = 9
	_, err = r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &bad}}})
	var le *lanes.Error
	if !errors.Is(err, programs.ErrSegmentMismatch) || !errors.As(err, &le) || !le.NotSubmitted {
		t.Fatalf("a mismatched invocation: got err %v (%+v), want a not-submitted *lanes.Error wrapping programs.ErrSegmentMismatch", err, cuda.Classify(err))
	}
	t.Log(err)
}

func TestBindingPatches(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	bind, _ := r.dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.U8})
	side, _ := r.dev.Alloc(cuda.BufferSpec{Size: 4, Elem: cuda.U8})
	layout := &lanes.Layout{ID: "wave", Region: bind.Whole(), Fields: []lanes.Field{{Offset: 0, Length: 4}, {Offset: 4, Length: 8}, {Offset: 12, Length: 4}}}
	typed := func(field int, fill byte, n int) lanes.Patch {
		return lanes.Patch{Layout: layout, Field: field, Bytes: bytes.Repeat([]byte{fill}, n)}
	}
	opaque := lanes.Patch{Dst: side.Whole(), Bytes: []byte{9, 9, 9, 9}}
	sub := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}, Patches: []lanes.Patch{typed(2, 3, 4), opaque, typed(0, 1, 4), typed(1, 2, 8)}})
	if sub.Attribution.Prelude != 2 {
		t.Fatalf("got a prelude of %d commands, want 2: one aggregate and one opaque", sub.Attribution.Prelude)
	}
	out := make([]byte, 16)
	if err := r.lane.Readback(bind.Whole(), lanecore.ReadbackLayout{Elem: cuda.U8, Count: 16}, out); err != nil {
		t.Fatalf("Readback of the binding: got err %v, want nil", err)
	}
	if want := []byte{1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3}; !bytes.Equal(out, want) {
		t.Fatalf("got binding bytes %v, want %v", out, want)
	}
	other := &lanes.Layout{ID: "other", Region: side.Whole(), Fields: []lanes.Field{{Offset: 0, Length: 4}}}
	bad := map[string][]lanes.Patch{
		"missing field": {typed(0, 1, 4), typed(1, 2, 8)},
		"field twice":   {typed(0, 1, 4), typed(0, 1, 4), typed(1, 2, 8), typed(2, 3, 4)},
		"wrong length":  {typed(0, 1, 5), typed(1, 2, 8), typed(2, 3, 4)},
		"two layouts":   {typed(0, 1, 4), {Layout: other, Field: 0, Bytes: []byte{1, 2, 3, 4}}},
		"unknown field": {typed(5, 1, 4)},
		"overlap":       {typed(0, 1, 4), typed(1, 2, 8), typed(2, 3, 4), {Dst: bind.Whole(), Bytes: make([]byte, 16)}},
		"empty opaque":  {{Dst: side.Whole()}},
		"gappy layout":  {{Layout: &lanes.Layout{ID: "g", Region: bind.Whole(), Fields: []lanes.Field{{Offset: 0, Length: 4}, {Offset: 8, Length: 8}}}, Field: 0, Bytes: make([]byte, 4)}},
	}
	for name, patches := range bad {
		_, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}, Patches: patches})
		if !errors.Is(err, lanes.ErrPatch) {
			t.Errorf("patches with %s: got err %v, want one wrapping lanes.ErrPatch", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}
