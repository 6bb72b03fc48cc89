package lanecore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

func TestEagerSubmissionEndsOnce(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	sub := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1), r.eagerInc(0, 2)}, Timing: lanes.TimingCompletion})
	if st, n := r.lane.State(), r.lane.InFlight(); st != lanecore.StateSubmitted || n != 1 {
		t.Fatalf("after Submit: got state %v, %d in flight; want %v, 1", st, n, lanecore.StateSubmitted)
	}
	if got := r.lane.Poll(); len(got) != 0 {
		t.Fatalf("Poll before the clock moved: got receipts %+v, want none", got)
	}
	r.settle()
	got := r.lane.Poll()
	if len(got) != 1 {
		t.Fatalf("Poll after the clock moved: got %d receipts %+v, want 1", len(got), got)
	}
	if rc := got[0]; rc.Fence != sub.Fence || rc.Outcome != lanes.OutcomeSucceeded || rc.DeviceTime <= 0 {
		t.Fatalf("receipt: got fence %d, outcome %v, device time %v; want fence %d, %v, device time > 0 (%+v)", rc.Fence, rc.Outcome, rc.DeviceTime, sub.Fence, lanes.OutcomeSucceeded, rc)
	}
	if again := r.lane.Poll(); len(again) != 0 {
		t.Fatalf("second Poll: got receipts %+v, want none: a fence ends once", again)
	}
	if st := r.lane.State(); st != lanecore.StateReady {
		t.Fatalf("after the receipt: got state %v, want %v", st, lanecore.StateReady)
	}
	if n := len(got[0].Attribution.Rows); n != 3 {
		t.Fatalf("got %d rows, want one per entry (3)", n)
	}
	for i, row := range got[0].Attribution.Rows {
		if row.Replayed || row.Reason != cache.ReasonProviderKeyMissing || row.Op != "launch:inc_i32" || row.Dispatches != 1 || row.Index != i {
			t.Fatalf("row %d: got Replayed %v, Reason %v, Op %q, Dispatches %d, Index %d; want false, %v, %q, 1, %d",
				i, row.Replayed, row.Reason, row.Op, row.Dispatches, row.Index, cache.ReasonProviderKeyMissing, "launch:inc_i32", i)
		}
	}
	if got := r.count(0); got != 3 {
		t.Fatalf("got count %d, want 3", got)
	}
}

func TestCapturedThenReplayed(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2)
	if _, err := r.lane.Configure(4); err != nil {
		t.Fatalf("Configure(4): got err %v, want nil", err)
	}
	b := lanes.Batch{Entries: r.steps(0, 1, 0), Timing: lanes.TimingReplay}
	first := r.submit(b)
	if first.Preparation.Captured != 1 || len(first.Attribution.Segments) != 1 {
		t.Fatalf("first submission: got Captured %d, %d segments; want 1, 1 (%+v)", first.Preparation.Captured, len(first.Attribution.Segments), first.Preparation)
	}
	r.settle()
	r.lane.Poll()
	second := r.submit(b)
	if second.Preparation.Hits != 1 {
		t.Fatalf("second submission: got Hits %d, want 1 (%+v)", second.Preparation.Hits, second.Preparation)
	}
	if len(second.Attribution.Segments) == 0 || second.Attribution.Segments[0].Fingerprint != first.Attribution.Segments[0].Fingerprint {
		t.Fatalf("second submission: got segments %+v, want the first's fingerprint %s first", second.Attribution.Segments, first.Attribution.Segments[0].Fingerprint)
	}
	if n := len(second.Attribution.Rows); n != len(b.Entries) {
		t.Fatalf("got %d rows, want one per entry (%d)", n, len(b.Entries))
	}
	for i, row := range second.Attribution.Rows {
		if !row.Replayed || row.GraphNodes != 1 {
			t.Fatalf("second submission, row %d: got Replayed %v, GraphNodes %d; want true, 1 (%+v)", i, row.Replayed, row.GraphNodes, row)
		}
	}
	r.settle()
	rc := r.lane.Poll()
	if len(rc) != 1 {
		t.Fatalf("Poll: got %d receipts %+v, want 1", len(rc), rc)
	}
	if sp := rc[0].Spans; len(sp) != 1 || !sp[0].Segment || sp[0].Duration <= 0 {
		t.Fatalf("receipt: got spans %+v, want one segment span with a duration > 0", sp)
	}
	if c0, c1 := r.count(0), r.count(1); c0 != 4 || c1 != 2 {
		t.Fatalf("got counts %d %d, want 4 2", c0, c1)
	}
	c := r.lane.Counters()
	if c.Captured != 1 || c.Hits != 1 || c.ReplayedSegments != 2 || c.EagerCommands != 0 {
		t.Fatalf("counters: got Captured %d, Hits %d, ReplayedSegments %d, EagerCommands %d; want 1, 1, 2, 0 (%+v)", c.Captured, c.Hits, c.ReplayedSegments, c.EagerCommands, c)
	}
}

func TestCaptureRejectedFallsBackEagerly(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1, sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1})
	_, _ = r.lane.Configure(4)
	b := lanes.Batch{Entries: r.steps(0, 0)}
	sub := r.submit(b)
	if n := len(sub.Attribution.Rows); n != len(b.Entries) {
		t.Fatalf("got %d rows, want one per entry (%d)", n, len(b.Entries))
	}
	for i, row := range sub.Attribution.Rows {
		if row.Replayed || row.Reason != cache.ReasonCaptureRejected {
			t.Fatalf("row %d: got Replayed %v, Reason %v; want false, %v (%+v)", i, row.Replayed, row.Reason, cache.ReasonCaptureRejected, row)
		}
	}
	r.settle()
	r.lane.Poll()
	sub = r.submit(b)
	if got := sub.Attribution.Rows[0].Reason; got != cache.ReasonCachedRejection {
		t.Fatalf("second submission, row 0: got reason %v, want %v", got, cache.ReasonCachedRejection)
	}
	if got := r.count(0); got != 4 {
		t.Fatalf("got count %d, want 4", got)
	}
}

func TestReplayedOnlyRefusedBeforeEnqueue(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	before := r.traceLen()
	_, err := r.lane.Submit(lanes.Batch{Entries: r.steps(0, 0), Path: lanes.PathReplayedOnly})
	var le *lanes.Error
	if !errors.As(err, &le) || !le.NotSubmitted || !errors.Is(err, lanes.ErrPathRequired) {
		t.Fatalf("replayed-only without a resident segment: got err %v (%+v), want a not-submitted *lanes.Error wrapping lanes.ErrPathRequired", err, cuda.Classify(err))
	}
	t.Log(err)
	if n, st, rej := r.traceLen()-before, r.lane.State(), r.lane.Counters().Refused; n != 0 || st != lanecore.StateReady || rej != 1 {
		t.Fatalf("after the refusal: got %d new device operations, state %v, Rejected %d; want 0, %v, 1", n, st, rej, lanecore.StateReady)
	}
	// Once resident, the same batch is accepted.
	_, _ = r.lane.Configure(2)
	r.submit(lanes.Batch{Entries: r.steps(0, 0)})
	r.settle()
	r.lane.Poll()
	r.submit(lanes.Batch{Entries: r.steps(0, 0), Path: lanes.PathReplayedOnly})
}

func TestReplayedWithBoundaries(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2)
	_, _ = r.lane.Configure(4)
	entries := []lanes.Entry{r.inc(0, 0), r.inc(0, 1), r.inc(1, 2), r.inc(0, 3)}
	b := lanes.Batch{Entries: entries, Path: lanes.PathReplayedWithBoundaries, EagerBoundaries: []int{2}}
	sub := r.submit(b)
	for _, row := range sub.Attribution.Rows {
		if row.Replayed == (row.Node == 2) {
			t.Fatalf("row at node %d: got Replayed %v, want %v: exactly node 2 must run eagerly (%+v)", row.Node, row.Replayed, row.Node != 2, row)
		}
	}
	if got := sub.Attribution.Rows[2].Reason; got != cache.ReasonEagerBoundary {
		t.Fatalf("row 2: got reason %v, want %v", got, cache.ReasonEagerBoundary)
	}
	r.settle()
	r.lane.Poll()
	b.EagerBoundaries = []int{2, 5}
	if _, err := r.lane.Submit(b); !errors.Is(err, lanes.ErrPathRequired) {
		t.Fatalf("a declared boundary (5) with no entry: got err %v, want one wrapping lanes.ErrPathRequired", err)
	}
}

func TestFencesEndExactlyOnce(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	issued := map[uint64]int{}
	for i := range 30 {
		s := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
		issued[s.Fence] = 0
		r.dev.Clock().Advance(us * 2)
		switch i % 3 {
		case 0:
			for _, rc := range r.lane.Poll() {
				issued[rc.Fence]++
			}
		case 1:
			rc, err := r.lane.Wait(s.Fence)
			if err != nil {
				t.Fatalf("Wait(%d): got err %v, want nil", s.Fence, err)
			}
			issued[rc.Fence]++
		}
	}
	rcs, _, err := r.lane.Synchronize()
	if err != nil {
		t.Fatalf("Synchronize: got err %v, want nil", err)
	}
	for _, rc := range append(rcs, r.lane.Poll()...) {
		issued[rc.Fence]++
	}
	for f, n := range issued {
		if n != 1 {
			t.Fatalf("fence %d: got it ended %d times, want once", f, n)
		}
	}
	if _, err := r.lane.Wait(1); !errors.Is(err, lanes.ErrUnknownFence) {
		t.Fatalf("Wait(1), a fence already received: got err %v, want one wrapping lanes.ErrUnknownFence", err)
	}
}

func TestAdministrationNeedsQuiescence(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
	_, err := r.lane.Configure(2)
	if !errors.Is(err, lanes.ErrNotQuiescent) || !cuda.Classify(err).Retryable {
		t.Fatalf("Configure with work in flight: got err %v (retryable %v), want a retryable one wrapping lanes.ErrNotQuiescent", err, cuda.Classify(err).Retryable)
	}
	for _, c := range []struct {
		name string
		call func() error
	}{
		{"Seal", func() error { _, err := r.lane.Seal(); return err }},
		{"Trim", func() error { _, err := r.lane.Trim(); return err }},
		{"Catalog", func() error { _, err := r.lane.Catalog(); return err }},
		{"Preparation", func() error { _, err := r.lane.Preparation(); return err }},
	} {
		if err := c.call(); !errors.Is(err, lanes.ErrNotQuiescent) {
			t.Fatalf("%s with work in flight: got err %v, want one wrapping lanes.ErrNotQuiescent", c.name, err)
		}
	}
	r.settle()
	if _, err := r.lane.Configure(2); err != nil {
		t.Fatalf("Configure once quiescent: got err %v, want nil", err)
	}
	if got := r.lane.Poll(); len(got) != 1 {
		t.Fatalf("Poll after Configure: got %d receipts, want 1: the receipt retired while configuring must still reach Poll", len(got))
	}
}

func TestTimingKernelSpansEveryEagerCommand(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1)}, Timing: lanes.TimingKernel})
	r.settle()
	rc := r.lane.Poll()[0]
	if len(rc.Spans) != 2 || rc.Spans[0].Segment || rc.Spans[1].Index != 1 || rc.Spans[0].Duration <= 0 {
		t.Fatalf("got spans %+v, want two eager (not segment) spans, the first with a duration > 0, the second of entry 1", rc.Spans)
	}
	if sum := rc.Spans[0].Duration + rc.Spans[1].Duration; rc.DeviceTime < sum {
		t.Fatalf("got device time %v, want at least its spans' sum %v (%+v)", rc.DeviceTime, sum, rc.Spans)
	}
}

func TestReadbackChecksLayout(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	reg := r.bufs[0].Whole()
	for name, c := range map[string]struct {
		layout lanecore.ReadbackLayout
		n      int
	}{
		"element type": {lanecore.ReadbackLayout{Elem: cuda.F32, Count: 16}, 64},
		"count":        {lanecore.ReadbackLayout{Elem: cuda.I32, Count: 8}, 64},
		"destination":  {lanecore.ReadbackLayout{Elem: cuda.I32, Count: 16}, 60},
	} {
		if err := r.lane.Readback(reg, c.layout, make([]byte, c.n)); !errors.Is(err, lanes.ErrReadback) {
			t.Errorf("Readback with a wrong %s: got err %v, want one wrapping lanes.ErrReadback", name, err)
		}
	}
}

func TestValidationRejectsBeforeEnqueue(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	other, _ := sim.New(sim.Config{Clock: sim.ClockVirtual})
	defer other.Close()
	foreignBuf, _ := other.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	foreign := r.eagerInc(0, 0)
	foreign.Command.Args[0] = cuda.BufferArg(foreignBuf.Whole())
	arity := r.eagerInc(0, 0)
	arity.Command.Args = arity.Command.Args[:1]
	scopes := r.inc(0, 0)
	scopes.Replay.Scopes = nil
	both := r.inc(0, 0)
	both.Invoke = &programs.Invocation{Program: programs.ID{Runtime: "lanes-test", Name: "p"}}
	badKernel := r.eagerInc(0, 0)
	badKernel.Command.Kernel = "nope"
	// Handles the device no longer (or never) handed out: each is the
	// caller's error, found before anything is enqueued.
	freedBuf, _ := r.dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	_ = r.dev.Free(freedBuf)
	freed := r.eagerInc(0, 0)
	freed.Command.Args[0] = cuda.BufferArg(freedBuf.Whole())
	forgedBuf := r.bufs[0]
	forgedBuf.Size *= 4
	forged := r.eagerInc(0, 0)
	forged.Command.Args[0] = cuda.BufferArg(forgedBuf.Whole())
	zeroFreed, _ := cuda.Zero(freedBuf.Whole())
	freedPatch := lanes.Patch{Dst: freedBuf.Whole(), Bytes: make([]byte, 64)}
	cases := map[string]lanes.Batch{
		"freed buffer":     {Entries: []lanes.Entry{freed}},
		"freed zero":       {Entries: []lanes.Entry{r.eagerInc(0, 0), {Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Command: zeroFreed}}},
		"forged size":      {Entries: []lanes.Entry{forged}},
		"patch freed":      {Entries: []lanes.Entry{r.eagerInc(0, 0)}, Patches: []lanes.Patch{freedPatch}},
		"retain freed":     {Entries: []lanes.Entry{r.eagerInc(0, 0)}, Retain: []cuda.Buffer{freedBuf}},
		"retain forged":    {Entries: []lanes.Entry{r.eagerInc(0, 0)}, Retain: []cuda.Buffer{forgedBuf}},
		"empty":            {},
		"foreign buffer":   {Entries: []lanes.Entry{foreign}},
		"kernel arity":     {Entries: []lanes.Entry{arity}},
		"unknown kernel":   {Entries: []lanes.Entry{badKernel}},
		"scope count":      {Entries: []lanes.Entry{scopes}},
		"invoke + command": {Entries: []lanes.Entry{both}},
		"bad node":         {Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: -7, Command: r.eagerInc(0, 0).Command}}},
		"bad path":         {Entries: []lanes.Entry{r.eagerInc(0, 0)}, Path: 9},
		"boundaries path":  {Entries: []lanes.Entry{r.eagerInc(0, 0)}, Path: lanes.PathReplayedWithBoundaries},
		"retain foreign":   {Entries: []lanes.Entry{r.eagerInc(0, 0)}, Retain: []cuda.Buffer{foreignBuf}},
	}
	before := r.traceLen()
	for name, b := range cases {
		_, err := r.lane.Submit(b)
		var le *lanes.Error
		if !errors.As(err, &le) || !le.NotSubmitted || le.Blame != cuda.BlameCaller || le.Code == codes.Unclassified {
			t.Errorf("%s: got err %v (%+v), want a not-submitted *lanes.Error, blame %v, with a code other than %v", name, err, cuda.Classify(err), cuda.BlameCaller, codes.Unclassified)
		}
		t.Logf("%s: %v", name, err)
	}
	if n, st := r.traceLen()-before, r.lane.State(); n != 0 || st != lanecore.StateReady {
		t.Fatalf("after the rejected batches: got %d new device operations, state %v; want 0, %v", n, st, lanecore.StateReady)
	}
}

func TestStageTimings(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	sink := &stageLog{}
	clock := r.dev.Clock()
	l, err := lanecore.New(lanecore.Config{ID: 3, Device: backend.Must(r.dev), Stream: r.s, Sections: sink, Now: clock.Now})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	if _, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}}); err != nil {
		t.Fatalf("Submit: got err %v, want nil", err)
	}
	if len(sink.stages) != 4 || sink.stages[0] != lanecore.SectionValidatePrepare || sink.stages[3] != lanecore.SectionRecordFence {
		t.Fatalf("got stages %v, want 4, the first %v, the last %v", sink.stages, lanecore.SectionValidatePrepare, lanecore.SectionRecordFence)
	}
	if _, err := lanecore.New(lanecore.Config{Device: backend.Must(r.dev), Stream: r.s, Sections: sink}); err == nil {
		t.Fatal("lanecore.New with a stage sink and no clock: got err nil, want an error")
	}
}

type stageLog struct{ stages []lanecore.Section }

func (s *stageLog) Section(_ int, st lanecore.Section, _ time.Duration) {
	s.stages = append(s.stages, st)
}
