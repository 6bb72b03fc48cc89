// How a lane fails and what it keeps: a stream fault mid-batch, a sticky
// fault, the caller's error found midway, a provider panic, and waits on
// a hung kernel or a fence that ends mid-wait.

package lanecore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

func TestFailureMidBatchQuarantines(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 2, sim.Fault{Kind: sim.FaultLaunch, Nth: 2})
	scratch := r.bufs[1]
	_, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1), r.eagerInc(0, 2)}, Retain: []cuda.Buffer{scratch}})
	var le *lanes.Error
	if !errors.As(err, &le) {
		t.Fatalf("failure after enqueue began: got err %v (%T), want a *lanes.Error", err, err)
	}
	if le.NotSubmitted || !errors.Is(err, cuda.ErrLaunchResources) {
		t.Fatalf("failure after enqueue began: got err %v, NotSubmitted %v; want one wrapping cuda.ErrLaunchResources, NotSubmitted false", err, le.NotSubmitted)
	}
	if st, q := r.lane.State(), r.lane.Held(); st != lanecore.StateFailed || q != 1 {
		t.Fatalf("after the failure: got state %v, %d held; want %v, 1", st, q, lanecore.StateFailed)
	}
	if c := cuda.Classify(err); c.Code != codes.LaunchOutOfResources || c.Blame != cuda.BlameStream || c.Retryable || c.NotSubmitted {
		t.Fatalf("Classify: got Code %v, Blame %v, Retryable %v, NotSubmitted %v; want %v, %v, false, false", c.Code, c.Blame, c.Retryable, c.NotSubmitted, codes.LaunchOutOfResources, cuda.BlameStream)
	}
	if _, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}}); !errors.Is(err, lanes.ErrFailed) || !errors.As(err, &le) || !le.NotSubmitted {
		t.Fatalf("Submit to a failed lane: got err %v (%+v), want a not-submitted *lanes.Error wrapping lanes.ErrFailed", err, cuda.Classify(err))
	}
	if _, err := r.lane.Configure(1); !errors.Is(err, lanes.ErrFailed) {
		t.Fatalf("Configure on a failed lane: got err %v, want one wrapping lanes.ErrFailed", err)
	}
	receipts, released, err := r.lane.Synchronize()
	if q := r.lane.Held(); err != nil || len(receipts) != 0 || len(released) != 1 || released[0] != scratch || q != 0 {
		t.Fatalf("Synchronize: got receipts %+v, released %v, err %v, %d held; want no receipts, released [%v], nil, 0", receipts, released, err, q, scratch)
	}
}

func TestStickyFaultEndsInFlightIndeterminate(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1, sim.Fault{Kind: sim.FaultSticky, Nth: 3})
	a := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1)}})
	b := r.submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}, Retain: []cuda.Buffer{r.bufs[0]}})
	r.settle()
	got := r.lane.Poll()
	if len(got) != 2 || got[0].Fence != a.Fence || got[1].Fence != b.Fence {
		t.Fatalf("Poll: got receipts for fences %v, want [%d %d] (%+v)", receiptFences(got), a.Fence, b.Fence, got)
	}
	for _, rc := range got {
		if c := cuda.Classify(rc.Err); rc.Outcome != lanes.OutcomeIndeterminate || !c.Sticky || c.Blame != cuda.BlameDevice || !errors.Is(rc.Err, cuda.ErrIllegalAddress) || len(rc.Released) != 0 {
			t.Fatalf("receipt of fence %d: got outcome %v, err %v (sticky %v, blame %v), %d released; want %v, one wrapping cuda.ErrIllegalAddress (sticky, blame %v), none released",
				rc.Fence, rc.Outcome, rc.Err, c.Sticky, c.Blame, len(rc.Released), lanes.OutcomeIndeterminate, cuda.BlameDevice)
		}
	}
	if st := r.lane.State(); st != lanecore.StateFailed {
		t.Fatalf("after the sticky fault: got state %v, want %v", st, lanecore.StateFailed)
	}
	if again := r.lane.Poll(); len(again) != 0 {
		t.Fatalf("second Poll: got receipts %+v, want none: every fence ends once", again)
	}
	if _, released, err := r.lane.Synchronize(); err == nil || len(released) != 0 {
		t.Fatalf("Synchronize of a poisoned device: got err %v, released %v; want an error, nothing released", err, released)
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
	l, err := lanecore.New(lanecore.Config{ID: 2, Device: backend.Must(r.dev), Stream: s, Runtime: "lanes-test"})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	sub, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(1, 1)}, Retain: []cuda.Buffer{r.bufs[0]}})
	var le *lanes.Error
	if !errors.As(err, &le) {
		t.Fatalf("Submit: got err %v (%T), want a *lanes.Error", err, err)
	}
	if le.NotSubmitted || le.Blame != cuda.BlameCaller || !errors.Is(err, cuda.ErrStaleHandle) || sub.Fence == 0 {
		t.Fatalf("Submit: got err %v (NotSubmitted %v, blame %v), fence %d; want one wrapping cuda.ErrStaleHandle, NotSubmitted false, blame %v, a fence",
			err, le.NotSubmitted, le.Blame, sub.Fence, cuda.BlameCaller)
	}
	if l.State() == lanecore.StateFailed {
		t.Fatalf("after the caller's error: got state %v (%v), want the lane not failed", l.State(), l.Err())
	}
	rcs, _, err := l.Synchronize()
	if err != nil || len(rcs) != 1 {
		t.Fatalf("Synchronize: got %d receipts %+v, err %v; want 1, nil", len(rcs), rcs, err)
	}
	if rc := rcs[0]; rc.Fence != sub.Fence || rc.Outcome != lanes.OutcomeRefused || !errors.Is(rc.Err, cuda.ErrStaleHandle) || len(rc.Released) != 1 {
		t.Fatalf("receipt: got fence %d, outcome %v, err %v, %d released; want fence %d, %v, one wrapping cuda.ErrStaleHandle, 1 released",
			rc.Fence, rc.Outcome, rc.Err, len(rc.Released), sub.Fence, lanes.OutcomeRefused)
	}
	if got := r.count(0); got != 1 {
		t.Fatalf("the enqueued part: got it run %d times, want once", got)
	}
	next := r.eagerInc(0, 0)
	if _, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{next}}); err != nil {
		t.Fatalf("Submit of the next batch: got err %v, want nil", err)
	}
}

// freeingStream frees buf on the device right after its after-th enqueue.
type freeingStream struct {
	backend.Stream
	dev   sim.Device
	buf   cuda.Buffer
	after int
	n     int
}

func (s *freeingStream) Unwrap() backend.Stream { return s.Stream }

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
	l, err := lanecore.New(lanecore.Config{ID: 2, Device: backend.Must(r.dev), Stream: panicStream{r.s}})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	_, err = l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
	if !errors.Is(err, lanes.ErrProviderPanic) || l.State() != lanecore.StateFailed {
		t.Fatalf("Submit to a panicking backend: got err %v, state %v; want one wrapping lanes.ErrProviderPanic, %v", err, l.State(), lanecore.StateFailed)
	}
}

// panicStream is a stream whose enqueue panics, as a buggy backend would.
type panicStream struct{ backend.Stream }

func (panicStream) Enqueue(cuda.Command) error { panic("backend bug") }

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
	l, err := lanecore.New(lanecore.Config{ID: 3, Device: backend.Must(r.dev), Stream: r.s, Runtime: "lanes-test", Waiter: w})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	done, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
	if err != nil {
		t.Fatalf("first Submit: got err %v, want nil", err)
	}
	stuck, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 1)}})
	if err != nil {
		t.Fatalf("second Submit: got err %v, want nil", err)
	}
	rcs, _, err := l.Synchronize()
	if !errors.Is(err, hung) || l.State() != lanecore.StateFailed || w.begun != 1 {
		t.Fatalf("Synchronize on a hung stream: got err %v, state %v, %d waits begun; want the waiter's error %q, %v, 1", err, l.State(), w.begun, hung, lanecore.StateFailed)
	}
	byFence := map[uint64]lanes.Outcome{}
	for _, rc := range rcs {
		if _, dup := byFence[rc.Fence]; dup {
			t.Fatalf("fence %d: got it ended twice, want once", rc.Fence)
		}
		byFence[rc.Fence] = rc.Outcome
	}
	if byFence[done.Fence] != lanes.OutcomeSucceeded || byFence[stuck.Fence] != lanes.OutcomeIndeterminate || len(byFence) != 2 {
		t.Fatalf("got outcomes by fence %v, want exactly fence %d %v and fence %d %v", byFence, done.Fence, lanes.OutcomeSucceeded, stuck.Fence, lanes.OutcomeIndeterminate)
	}
	if got := l.Abandon(hung); len(got) != 0 {
		t.Fatalf("Abandon after the end: got receipts %+v, want none", got)
	}
}

// slowEvents makes every event the stream records answer "pending" to its
// first two queries, as a fence that ends between two queries does.
type slowEvents struct{ backend.Stream }

func (s slowEvents) Record() (backend.Event, error) {
	e, err := s.Stream.Record()
	return &slowEvent{Event: e}, err
}

func (s slowEvents) RecordFence() (backend.Event, error) {
	e, err := s.Stream.RecordFence()
	return &slowEvent{Event: e}, err
}

type slowEvent struct {
	backend.Event
	queries int
}

func (e *slowEvent) Query() backend.FenceQuery {
	if e.queries++; e.queries <= 2 {
		return backend.FenceQuery{State: backend.FencePending}
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
	l, err := lanecore.New(lanecore.Config{ID: 4, Device: backend.Must(r.dev), Stream: slowEvents{r.s}, Runtime: "lanes-test", Waiter: &countingWaiter{limit: 100}})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	for i := range 3 {
		sub, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}})
		if err != nil {
			t.Fatalf("Submit %d: got err %v, want nil", i, err)
		}
		rc, err := l.Wait(sub.Fence)
		if err != nil || rc.Outcome != lanes.OutcomeSucceeded || l.State() == lanecore.StateFailed {
			t.Fatalf("Wait %d: got outcome %v, err %v, lane %v (%v); want %v, nil, the lane not failed (%+v)", i, rc.Outcome, err, l.State(), l.Err(), lanes.OutcomeSucceeded, rc)
		}
	}
}
