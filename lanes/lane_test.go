package lanes_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

func TestEagerSubmissionEndsOnce(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	sub := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1), r.eagerInc(0, 2)}, Timing: lanes.TimingCompletion})
	if r.lane.State() != lanes.StateSubmitted || r.lane.InFlight() != 1 {
		t.Fatalf("state %v in flight %d", r.lane.State(), r.lane.InFlight())
	}
	if got := r.lane.Poll(); len(got) != 0 {
		t.Fatalf("receipts before the clock moved: %v", got)
	}
	r.settle()
	got := r.lane.Poll()
	if len(got) != 1 || got[0].Fence != sub.Fence || got[0].Outcome != lanes.OutcomeSucceeded || got[0].DeviceTime <= 0 {
		t.Fatalf("receipts %+v", got)
	}
	if len(r.lane.Poll()) != 0 || r.lane.State() != lanes.StateReady {
		t.Fatal("a fence ended twice, or the lane did not become ready")
	}
	for i, row := range got[0].Attribution.Rows {
		if row.Replayed || row.Reason != cache.ReasonProviderKeyMissing || row.Op != "launch:inc_i32" || row.Dispatches != 1 || row.Index != i {
			t.Fatalf("row %+v", row)
		}
	}
	if r.count(0) != 3 {
		t.Fatalf("count %d", r.count(0))
	}
}

func TestCapturedThenReplayed(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2)
	if _, err := r.lane.Configure(4); err != nil {
		t.Fatal(err)
	}
	b := lanes.Batch{Entries: r.steps(0, 1, 0), Timing: lanes.TimingReplay}
	first := r.submit(b)
	if first.Preparation.Captured != 1 || len(first.Attribution.Segments) != 1 {
		t.Fatalf("first: %+v", first.Preparation)
	}
	r.settle()
	r.lane.Poll()
	second := r.submit(b)
	if second.Preparation.Hits != 1 || second.Attribution.Segments[0].Fingerprint != first.Attribution.Segments[0].Fingerprint {
		t.Fatalf("second: %+v", second.Preparation)
	}
	for _, row := range second.Attribution.Rows {
		if !row.Replayed || row.GraphNodes != 1 {
			t.Fatalf("row %+v", row)
		}
	}
	r.settle()
	rc := r.lane.Poll()
	if len(rc) != 1 || len(rc[0].Spans) != 1 || !rc[0].Spans[0].Segment || rc[0].Spans[0].Duration <= 0 {
		t.Fatalf("receipt %+v", rc)
	}
	if r.count(0) != 4 || r.count(1) != 2 {
		t.Fatalf("counts %d %d", r.count(0), r.count(1))
	}
	c := r.lane.Counters()
	if c.Captured != 1 || c.Hits != 1 || c.ReplayedSegments != 2 || c.EagerCommands != 0 {
		t.Fatalf("counters %+v", c)
	}
}

func TestCaptureRejectedFallsBackEagerly(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1, sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1})
	_, _ = r.lane.Configure(4)
	b := lanes.Batch{Entries: r.steps(0, 0)}
	sub := r.submit(b)
	for _, row := range sub.Attribution.Rows {
		if row.Replayed || row.Reason != cache.ReasonCaptureRejected {
			t.Fatalf("row %+v, want eager with capture_rejected", row)
		}
	}
	r.settle()
	r.lane.Poll()
	sub = r.submit(b)
	if sub.Attribution.Rows[0].Reason != cache.ReasonCachedRejection {
		t.Fatalf("second: %v", sub.Attribution.Rows[0].Reason)
	}
	if r.count(0) != 4 {
		t.Fatalf("count %d", r.count(0))
	}
}

func TestReplayedOnlyRefusedBeforeEnqueue(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	before := r.traceLen()
	_, err := r.lane.Submit(lanes.Batch{Entries: r.steps(0, 0), Path: lanes.PathReplayedOnly})
	var le *lanes.Error
	if !errors.As(err, &le) || !le.NotSubmitted || !errors.Is(err, lanes.ErrPathRequired) {
		t.Fatalf("replayed-only without a resident segment: %v", err)
	}
	t.Log(err)
	if r.traceLen() != before || r.lane.State() != lanes.StateReady || r.lane.Counters().Rejected != 1 {
		t.Fatal("a refused batch reached the stream or changed the lane")
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
			t.Fatalf("row %+v: exactly node 2 must run eagerly", row)
		}
	}
	if sub.Attribution.Rows[2].Reason != cache.ReasonEagerBoundary {
		t.Fatalf("boundary reason %v", sub.Attribution.Rows[2].Reason)
	}
	r.settle()
	r.lane.Poll()
	b.EagerBoundaries = []int{2, 5}
	if _, err := r.lane.Submit(b); !errors.Is(err, lanes.ErrPathRequired) {
		t.Fatalf("a declared boundary with no entry: %v", err)
	}
}

func TestFailureMidBatchQuarantines(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2, sim.Fault{Kind: sim.FaultLaunch, Nth: 2})
	scratch := r.bufs[1]
	_, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1), r.eagerInc(0, 2)}, Retain: []cuda.Buffer{scratch}})
	var le *lanes.Error
	if !errors.As(err, &le) || le.NotSubmitted || !errors.Is(err, cuda.ErrLaunchResources) {
		t.Fatalf("failure after enqueue began: %v", err)
	}
	if r.lane.State() != lanes.StateFailed || r.lane.Quarantined() != 1 {
		t.Fatalf("state %v quarantined %d", r.lane.State(), r.lane.Quarantined())
	}
	if c := cuda.Classify(err); c.Code != cuda.CodeLaunchOutOfResources || c.Blame != cuda.BlameStream || c.Retryable || c.NotSubmitted {
		t.Fatalf("classified %+v", c)
	}
	if _, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}}); !errors.Is(err, lanes.ErrFailed) || !errors.As(err, &le) || !le.NotSubmitted {
		t.Fatalf("submit to a failed lane: %v", err)
	}
	if _, err := r.lane.Configure(1); !errors.Is(err, lanes.ErrFailed) {
		t.Fatalf("configure a failed lane: %v", err)
	}
	receipts, released, err := r.lane.Synchronize()
	if err != nil || len(receipts) != 0 || len(released) != 1 || released[0] != scratch || r.lane.Quarantined() != 0 {
		t.Fatalf("synchronize: %v %v %v", receipts, released, err)
	}
}

func TestStickyFaultEndsInFlightIndeterminate(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1, sim.Fault{Kind: sim.FaultSticky, Nth: 3})
	a := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1)}})
	b := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}, Retain: []cuda.Buffer{r.bufs[0]}})
	r.settle()
	got := r.lane.Poll()
	if len(got) != 2 || got[0].Fence != a.Fence || got[1].Fence != b.Fence {
		t.Fatalf("receipts %+v", got)
	}
	for _, rc := range got {
		if rc.Outcome != lanes.OutcomeIndeterminate || !cuda.Classify(rc.Err).Sticky || cuda.Classify(rc.Err).Blame != cuda.BlameDevice || !errors.Is(rc.Err, cuda.ErrIllegalAddress) || len(rc.Released) != 0 {
			t.Fatalf("receipt %+v", rc)
		}
	}
	if r.lane.State() != lanes.StateFailed || len(r.lane.Poll()) != 0 {
		t.Fatal("the lane must be failed, with every fence ended once")
	}
	if _, released, err := r.lane.Synchronize(); err == nil || len(released) != 0 {
		t.Fatal("synchronize of a poisoned device must fail and release nothing")
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
				t.Fatal(err)
			}
			issued[rc.Fence]++
		}
	}
	rcs, _, err := r.lane.Synchronize()
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range append(rcs, r.lane.Poll()...) {
		issued[rc.Fence]++
	}
	for f, n := range issued {
		if n != 1 {
			t.Fatalf("fence %d ended %d times", f, n)
		}
	}
	if _, err := r.lane.Wait(1); !errors.Is(err, lanes.ErrUnknownFence) {
		t.Fatalf("waiting on a received fence: %v", err)
	}
}

func TestAdministrationNeedsQuiescence(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
	_, err := r.lane.Configure(2)
	if !errors.Is(err, lanes.ErrNotQuiescent) || !cuda.Classify(err).Retryable {
		t.Fatalf("configure with work in flight: %v", err)
	}
	for _, call := range []func() error{
		func() error { _, err := r.lane.Seal(); return err },
		func() error { _, err := r.lane.Trim(); return err },
		func() error { _, err := r.lane.Catalog(); return err },
		func() error { _, err := r.lane.Preparation(); return err },
	} {
		if err := call(); !errors.Is(err, lanes.ErrNotQuiescent) {
			t.Fatalf("administration with work in flight: %v", err)
		}
	}
	r.settle()
	if _, err := r.lane.Configure(2); err != nil {
		t.Fatalf("configure once quiescent: %v", err)
	}
	if len(r.lane.Poll()) != 1 {
		t.Fatal("the receipt retired while configuring must still reach Poll")
	}
}

func TestTimingKernelSpansEveryEagerCommand(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1)}, Timing: lanes.TimingKernel})
	r.settle()
	rc := r.lane.Poll()[0]
	if len(rc.Spans) != 2 || rc.Spans[0].Segment || rc.Spans[1].Index != 1 || rc.Spans[0].Duration <= 0 {
		t.Fatalf("spans %+v", rc.Spans)
	}
	if rc.DeviceTime < rc.Spans[0].Duration+rc.Spans[1].Duration {
		t.Fatalf("device time %v shorter than its spans %+v", rc.DeviceTime, rc.Spans)
	}
}

func TestReadbackChecksLayout(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	reg := r.bufs[0].Whole()
	for name, c := range map[string]struct {
		layout lanes.ReadbackLayout
		n      int
	}{
		"element type": {lanes.ReadbackLayout{Elem: cuda.F32, Count: 16}, 64},
		"count":        {lanes.ReadbackLayout{Elem: cuda.I32, Count: 8}, 64},
		"destination":  {lanes.ReadbackLayout{Elem: cuda.I32, Count: 16}, 60},
	} {
		if err := r.lane.Readback(reg, c.layout, make([]byte, c.n)); !errors.Is(err, lanes.ErrReadback) {
			t.Errorf("%s: %v", name, err)
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
		if !errors.As(err, &le) || !le.NotSubmitted || le.Blame != cuda.BlameCaller || le.Code == cuda.CodeUnclassified {
			t.Errorf("%s: %v (%+v)", name, err, cuda.Classify(err))
		}
		t.Logf("%s: %v", name, err)
	}
	if r.traceLen() != before || r.lane.State() != lanes.StateReady {
		t.Fatal("a rejected batch reached the stream")
	}
}

// TestCallerErrorMidwayKeepsTheLane: a handle freed between the batch's
// check and its command's enqueue (a stream decorator frees it here, as a
// racing caller would) is still the caller's error: the lane stays healthy,
// fences what it enqueued, and the submission ends Refused at that fence.
func TestCallerErrorMidwayKeepsTheLane(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2)
	victim := r.bufs[1]
	s := &freeingStream{Stream: r.s, dev: r.dev, buf: victim, after: 1}
	l, err := lanes.New(lanes.Config{ID: 2, Device: r.dev, Stream: s, Runtime: "lanes-test"})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(1, 1)}, Retain: []cuda.Buffer{r.bufs[0]}})
	var le *lanes.Error
	if !errors.As(err, &le) || le.NotSubmitted || le.Blame != cuda.BlameCaller || !errors.Is(err, cuda.ErrStaleHandle) || sub.Fence == 0 {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	if l.State() == lanes.StateFailed {
		t.Fatalf("the caller's error failed the lane: %v", l.Err())
	}
	rcs, _, err := l.Synchronize()
	if err != nil || len(rcs) != 1 || rcs[0].Fence != sub.Fence || rcs[0].Outcome != lanes.OutcomeRefused || !errors.Is(rcs[0].Err, cuda.ErrStaleHandle) || len(rcs[0].Released) != 1 {
		t.Fatalf("receipts %+v, %v", rcs, err)
	}
	if got := r.count(0); got != 1 {
		t.Fatalf("the enqueued part ran %d times, want once", got)
	}
	next := r.eagerInc(0, 0)
	if _, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{next}}); err != nil {
		t.Fatalf("the lane refused the next batch: %v", err)
	}
}

// freeingStream frees buf on the device right after its after-th enqueue.
type freeingStream struct {
	cuda.Stream
	dev   *sim.Device
	buf   cuda.Buffer
	after int
	n     int
}

func (s *freeingStream) Unwrap() cuda.Stream { return s.Stream }

func (s *freeingStream) Enqueue(c cuda.Command) error {
	err := s.Stream.Enqueue(c)
	if s.n++; s.n == s.after {
		if err := s.Stream.Synchronize(); err != nil {
			return err
		}
		if err := s.dev.Free(s.buf); err != nil {
			return err
		}
	}
	return err
}

func TestProviderPanicFailsTheLane(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	l, err := lanes.New(lanes.Config{ID: 2, Device: r.dev, Stream: panicStream{r.s}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
	if !errors.Is(err, lanes.ErrProviderPanic) || l.State() != lanes.StateFailed {
		t.Fatalf("a panicking backend: %v, state %v", err, l.State())
	}
}

// panicStream is a stream whose enqueue panics, as a buggy backend would.
type panicStream struct{ cuda.Stream }

func (panicStream) Enqueue(cuda.Command) error { panic("backend bug") }

func TestStageTimings(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	sink := &stageLog{}
	clock := r.dev.Clock()
	l, err := lanes.New(lanes.Config{ID: 3, Device: r.dev, Stream: r.s, Stages: sink, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}}); err != nil {
		t.Fatal(err)
	}
	if len(sink.stages) != 4 || sink.stages[0] != lanes.StageValidatePrepare || sink.stages[3] != lanes.StageRecordFence {
		t.Fatalf("stages %v", sink.stages)
	}
	if _, err := lanes.New(lanes.Config{Device: r.dev, Stream: r.s, Stages: sink}); err == nil {
		t.Fatal("a sink without a clock was accepted")
	}
}

type stageLog struct{ stages []lanes.Stage }

func (s *stageLog) Stage(_ uint64, st lanes.Stage, _ time.Duration) { s.stages = append(s.stages, st) }

// countingWaiter gives up after limit pauses without progress.
type countingWaiter struct {
	limit, idle, begun int
	give               error
}

func (w *countingWaiter) Begin() { w.begun++; w.idle = 0 }

func (w *countingWaiter) Pause(progressed bool) error {
	if progressed {
		w.idle = 0
	}
	if w.idle++; w.idle > w.limit {
		return w.give
	}
	time.Sleep(100 * us)
	return nil
}

// TestWaiterBoundsWaitsOnAHungKernel: with a Waiter, Synchronize on a
// stream whose kernel never finishes returns the waiter's error instead of
// blocking forever; the lane fails and its submissions end Indeterminate,
// each exactly once, the finished one Succeeded.
func TestWaiterBoundsWaitsOnAHungKernel(t *testing.T) {
	r := newRig(t, sim.ClockRealTime, 1, sim.Fault{Kind: sim.FaultHang, Nth: 2})
	hung := errors.New("test: hung")
	w := &countingWaiter{limit: 50, give: hung}
	l, err := lanes.New(lanes.Config{ID: 3, Device: r.dev, Stream: r.s, Runtime: "lanes-test", Waiter: w})
	if err != nil {
		t.Fatal(err)
	}
	done, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	stuck, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	rcs, _, err := l.Synchronize()
	if !errors.Is(err, hung) || l.State() != lanes.StateFailed || w.begun != 1 {
		t.Fatalf("synchronize on a hung stream: %v, state %v", err, l.State())
	}
	byFence := map[uint64]lanes.Outcome{}
	for _, rc := range rcs {
		if _, dup := byFence[rc.Fence]; dup {
			t.Fatalf("fence %d ended twice", rc.Fence)
		}
		byFence[rc.Fence] = rc.Outcome
	}
	if byFence[done.Fence] != lanes.OutcomeSucceeded || byFence[stuck.Fence] != lanes.OutcomeIndeterminate || len(byFence) != 2 {
		t.Fatalf("outcomes %v", byFence)
	}
	if got := l.Abandon(hung); len(got) != 0 {
		t.Fatalf("abandon after the end: %+v", got)
	}
}

// slowEvents makes every event the stream records answer "pending" to its
// first two queries, as a fence that ends between two queries does.
type slowEvents struct{ cuda.Stream }

func (s slowEvents) Record() (cuda.Event, error) {
	e, err := s.Stream.Record()
	return &slowEvent{Event: e}, err
}
func (s slowEvents) RecordFence() (cuda.Event, error) {
	e, err := s.Stream.RecordFence()
	return &slowEvent{Event: e}, err
}

type slowEvent struct {
	cuda.Event
	queries int
}

func (e *slowEvent) Query() cuda.FenceQuery {
	if e.queries++; e.queries <= 2 {
		return cuda.FenceQuery{State: cuda.FencePending}
	}
	if e.queries == 3 {
		_ = e.Event.Synchronize() // it has ended by the third query
	}
	return e.Event.Query()
}

// TestWaitSurvivesItsFenceEndingMidWait: a fence that ends while Wait is
// paced by a Waiter is retired by the wait's own collection; Wait answers
// its receipt instead of querying the retired (released) event and failing
// the lane.
func TestWaitSurvivesItsFenceEndingMidWait(t *testing.T) {
	r := newRig(t, sim.ClockZeroCost, 1)
	l, err := lanes.New(lanes.Config{ID: 4, Device: r.dev, Stream: slowEvents{r.s}, Runtime: "lanes-test", Waiter: &countingWaiter{limit: 100}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		sub, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Wait(sub.Fence)
		if err != nil || rc.Outcome != lanes.OutcomeSucceeded || l.State() == lanes.StateFailed {
			t.Fatalf("wait %d: %+v %v (lane %v: %v)", i, rc, err, l.State(), l.Err())
		}
	}
}
