package remote_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// receiptShape is what of a receipt holds on either side: the same batch
// names other buffers (so other fingerprints and ids) and runs at other
// times there.
type receiptShape struct {
	outcome          lanes.Outcome
	rows             []lanes.Row
	segments         [][4]int // start, end, commands, graph nodes
	programs         []string // each segment's program, "" for none
	logical          []string // each segment's logical commands
	fingerprinted    bool
	prelude          int
	events           []string // kind and reason
	preparation      [][2]int // stage, nodes (their times are the lane clock's)
	launches         int
	spans            [][2]int // index, segment
	timed, hostTimed bool
	released         int
}

func shapeOf(r lanes.Receipt) receiptShape {
	s := receiptShape{outcome: r.Outcome, rows: r.Attribution.Rows, prelude: r.Attribution.Prelude, launches: r.Attribution.Launches,
		timed: r.DeviceTime > 0, hostTimed: r.HostTimed, released: len(r.Released), fingerprinted: true}
	for _, seg := range r.Attribution.Segments {
		s.segments = append(s.segments, [4]int{seg.Start, seg.End, seg.Commands, seg.GraphNodes})
		name := ""
		if seg.Program != nil {
			name = seg.Program.String()
		}
		s.programs = append(s.programs, name)
		s.logical = append(s.logical, fmt.Sprint(seg.Logical))
		s.fingerprinted = s.fingerprinted && seg.Fingerprint != ""
	}
	for _, e := range r.Attribution.Events {
		s.events = append(s.events, e.Kind+":"+e.Reason)
	}
	for _, p := range r.Attribution.Preparation {
		s.preparation = append(s.preparation, [2]int{int(p.Stage), p.Nodes})
	}
	for _, sp := range r.Spans {
		seg := 0
		if sp.Segment {
			seg = 1
		}
		s.spans = append(s.spans, [2]int{sp.Index, seg})
	}
	return s
}

// TestReceiptsMatchOneProcess: a receipt through a lane host is the whole
// receipt one process gets: its rows, replayed segments, cache events,
// timed spans, released buffers and host start, for a step captured, then
// replayed, then submitted encoded.
func TestReceiptsMatchOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, s := oneProcess(t, 1)
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "1")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	step := func(t *testing.T, b, keep cuda.Buffer) lanes.Batch {
		var es []lanes.Entry
		for i := range 3 {
			cmd, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, lanes.Replayed("receipt", i, cmd))
		}
		first, _ := b.Region(0, 4)
		up, _ := cuda.Upload(first, []byte{1, 0, 0, 0})
		es = append(es, lanes.Eager(0, up))
		return lanes.Batch{Entries: es, Timing: lanes.TimingKernel, Retain: []cuda.Buffer{keep}}
	}
	spec := cuda.BufferSpec{Size: 64, Elem: cuda.I32}
	localB, _ := dev.Alloc(spec)
	localKeep, _ := dev.Alloc(spec)
	hostB, err := f.Alloc(ctx, "a", spec)
	if err != nil {
		t.Fatal(err)
	}
	hostKeep, _ := f.Alloc(ctx, "a", spec)
	testdev.Zero(t, dev, localB, localKeep)
	zeroOnFront(t, f, "a", hostB)
	zeroOnFront(t, f, "a", hostKeep)
	enc, err := f.Encode(step(t, hostB, hostKeep))
	if err != nil {
		t.Fatal(err)
	}
	for i, how := range []string{"its first, captured", "replayed", "replayed again", "encoded", "encoded again"} {
		want, err := s.Submit(ctx, "a", step(t, localB, localKeep))
		if err != nil {
			t.Fatalf("step %d in one process: %v", i, err)
		}
		var got lanes.Receipt
		if i < 3 {
			got, err = f.Submit(ctx, "a", step(t, hostB, hostKeep))
		} else {
			var p lanes.Pending
			if p, err = f.SubmitEncoded(ctx, "a", enc); err == nil {
				got, err = p.Result()
			}
		}
		if err != nil {
			t.Fatalf("step %d through the lane host: %v", i, err)
		}
		ws, gs := shapeOf(want), shapeOf(got)
		if len(ws.segments) == 0 || !ws.timed || !ws.hostTimed || ws.released != 1 || len(ws.spans) == 0 || len(want.Attribution.Segments[0].Logical) == 0 {
			t.Fatalf("step %d (%s) in one process: %+v: want replayed segments with logical commands, timed spans, a released buffer (the case tests nothing)", i, how, ws)
		}
		if i == 0 && len(ws.preparation) == 0 {
			t.Fatalf("the first step in one process: %+v: want its capture's preparation timed (the case tests nothing)", ws)
		}
		if !equalShape(ws, gs) {
			t.Errorf("step %d (%s):\n through the lane host %+v\n in one process       %+v\nwant the same", i, how, gs, ws)
		}
		if got.Released[0] != hostKeep {
			t.Errorf("step %d: released %+v, want the retained buffer %+v", i, got.Released, hostKeep)
		}
	}
}

func equalShape(a, b receiptShape) bool {
	return a.outcome == b.outcome && slices.Equal(a.rows, b.rows) && slices.Equal(a.segments, b.segments) && slices.Equal(a.programs, b.programs) && a.fingerprinted == b.fingerprinted &&
		slices.Equal(a.logical, b.logical) && slices.Equal(a.preparation, b.preparation) &&
		a.prelude == b.prelude && slices.Equal(a.events, b.events) && a.launches == b.launches && slices.Equal(a.spans, b.spans) &&
		a.timed == b.timed && a.hostTimed == b.hostTimed && a.released == b.released
}
