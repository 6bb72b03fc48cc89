package lanecore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	discovery "github.com/lanesched/lanes/internal/discovery"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// tally is a library whose per-lane workspace holds a count: each call
// adds one to its lane's count and writes the count into its region. A
// lane that shared another's workspace, or lost its own, would count
// wrong.
type tally struct {
	lib    *cuda.Library
	setups []cuda.LibraryLane
	downs  int
}

const tallyMark = 0x5eed

func newTally() *tally {
	t := &tally{}
	t.lib = &cuda.Library{Name: "tally", WorkspaceBytes: 8,
		Setup: func(l cuda.LibraryLane) (any, error) {
			t.setups = append(t.setups, l)
			return len(t.setups), nil
		},
		Teardown: func(cuda.LibraryLane) error { t.downs++; return nil }}
	return t
}

// call is a replayable entry of the tally library writing into out.
func (t *tally) call(tb testing.TB, out cuda.Buffer) lanes.Entry {
	tb.Helper()
	c, err := cuda.Call(&cuda.LibraryCall{Name: "tally", Library: t.lib, Workspace: cuda.AccessReadWrite,
		Regions: []cuda.Touch{{Region: out.Whole(), Access: cuda.AccessWrite}},
		Reference: func(mem [][]byte) error {
			ws := mem[len(mem)-1] // the lane's workspace comes last
			n := binary.LittleEndian.Uint32(ws)
			if binary.LittleEndian.Uint32(ws[4:]) != tallyMark { // a fresh workspace holds garbage
				n = 0
				binary.LittleEndian.PutUint32(ws[4:], tallyMark)
			}
			n++
			binary.LittleEndian.PutUint32(ws, n)
			binary.LittleEndian.PutUint32(mem[0], n)
			return nil
		}})
	if err != nil {
		tb.Fatalf("cuda.Call: got err %v, want nil", err)
	}
	return lanes.Replayed("lanes-test", 0, c)
}

// TestLibraryStatePerLane: each lane sets a library up once, before its
// first call, with a workspace of its own that every call of it on that
// lane (eager, captured, replayed) touches and nobody else's does.
func TestLibraryStatePerLane(t *testing.T) {
	r := newRig(t, sim.ClockZeroCost, 2)
	if _, err := r.lane.Configure(4); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	tl := newTally()
	for i := 1; i <= 3; i++ {
		sub := r.submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[0]), r.inc(1, 1)}})
		if row := sub.Attribution.Rows[0]; row.Op != "call:tally" || !row.Replayed {
			t.Fatalf("step %d: got op %q replayed %v (%v), want call:tally replayed", i, row.Op, row.Replayed, row.Reason)
		}
		r.settle()
		if got := r.count(0); got != int32(i) {
			t.Fatalf("step %d: the lane's count is %d, want %d", i, got, i)
		}
	}
	if len(tl.setups) != 1 || tl.setups[0].Lane != 1 || tl.setups[0].Workspace.Length != 8 || tl.setups[0].Stream != 0 {
		t.Fatalf("setups after three steps on one lane: got %+v, want one, of lane 1 with an 8-byte workspace and no native stream", tl.setups)
	}
	if c := r.lane.Counters(); c.LibrarySetups != 1 || c.LibraryWorkspaceBytes != 8 {
		t.Fatalf("counters: got %d setups, %d workspace bytes; want 1, 8", c.LibrarySetups, c.LibraryWorkspaceBytes)
	}

	// A second lane of the same device counts in a workspace of its own.
	st, err := backend.Must(r.dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	other, err := lanecore.New(lanecore.Config{ID: 2, Device: backend.Must(r.dev), Stream: st, Libraries: []*cuda.Library{tl.lib}})
	if err != nil {
		t.Fatalf("lanecore.New with the library configured: got err %v, want nil", err)
	}
	if len(tl.setups) != 2 || tl.setups[1].Lane != 2 || tl.setups[1].Workspace.Buffer == tl.setups[0].Workspace.Buffer {
		t.Fatalf("a lane configured with the library: got setups %+v, want it set up at once, in a workspace of its own", tl.setups)
	}
	if _, err := other.Submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[1])}}); err != nil {
		t.Fatalf("Submit on the second lane: got err %v, want nil", err)
	}
	if _, _, err := other.Synchronize(); err != nil {
		t.Fatalf("Synchronize: got err %v, want nil", err)
	}
	if got := r.count(1); got != 1 {
		t.Fatalf("the second lane's first call: got count %d, want 1 (its own workspace)", got)
	}
	if err := other.ReleaseLibraries(); err != nil {
		t.Fatalf("ReleaseLibraries: got err %v, want nil", err)
	}
	if n, b := other.Libraries(); n != 0 || b != 0 || tl.downs != 1 {
		t.Fatalf("after ReleaseLibraries: got %d libraries, %d bytes, %d teardowns; want 0, 0, 1", n, b, tl.downs)
	}
	if err := backend.Must(r.dev).CheckBuffer(tl.setups[1].Workspace.Buffer); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Fatalf("the released workspace: got CheckBuffer %v, want it freed (cuda.ErrStaleHandle)", err)
	}
	_, err = other.Submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[1])}})
	if c := cuda.Classify(err); !errors.Is(err, lanes.ErrInvalidBatch) || !c.NotSubmitted || c.Retryable {
		t.Fatalf("a call after ReleaseLibraries: got err %v (%+v), want a not-submitted, not retryable lanes.ErrInvalidBatch (its executables may use the freed workspace)", err, c)
	}
}

// TestLibraryStateAfterRecover: a lane recovered onto a fresh stream tears
// its libraries down and sets them up again for the new stream, in the
// same workspace, so the executables it kept replay as before.
func TestLibraryStateAfterRecover(t *testing.T) {
	r := newRig(t, sim.ClockZeroCost, 2)
	if _, err := r.lane.Configure(4); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	tl := newTally()
	for range 2 {
		r.submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[0])}})
		r.settle()
	}
	if err := r.dev.InjectFault(sim.Fault{Kind: sim.FaultLaunch, Nth: 1}); err != nil {
		t.Fatalf("InjectFault: got err %v, want nil", err)
	}
	if _, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[0])}}); err == nil || r.lane.State() != lanecore.StateFailed {
		t.Fatalf("a step whose launch fails: got err %v, lane %v; want an error and a failed lane", err, r.lane.State())
	}
	_, _, _ = r.lane.Synchronize()
	st, err := backend.Must(r.dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	if err := r.lane.Recover(st); err != nil {
		t.Fatalf("Recover: got err %v, want nil", err)
	}
	if tl.downs != 1 || len(tl.setups) != 1 {
		t.Fatalf("after Recover: got %d teardowns, %d setups; want 1, 1 (set up again before the next call)", tl.downs, len(tl.setups))
	}
	sub := r.submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[0])}})
	r.settle()
	if got := sub.Preparation.Dispositions[0]; got != discovery.DispositionHit {
		t.Fatalf("the step after recovery: got disposition %v, want a hit (the executable kept its workspace)", got)
	}
	if len(tl.setups) != 2 || tl.setups[1].Workspace != tl.setups[0].Workspace {
		t.Fatalf("setups: got %+v, want a second, in the same workspace", tl.setups)
	}
	if got := r.count(0); got != 3 {
		t.Fatalf("count after recovery: got %d, want 3 (two before, the failed launch ran nothing)", got)
	}
}

// TestLibrarySetupFails: a Setup that fails or panics refuses the
// submission (nothing enqueued, classified library_setup_failed, the
// caller's) and is tried again by the next one.
func TestLibrarySetupFails(t *testing.T) {
	r := newRig(t, sim.ClockZeroCost, 1)
	fail := errors.New("no handle for you")
	calls := 0
	lib := &cuda.Library{Name: "flaky", Setup: func(cuda.LibraryLane) (any, error) {
		calls++
		switch calls {
		case 1:
			return nil, fail
		case 2:
			panic("setup exploded")
		}
		return "ok", nil
	}}
	entry := func() lanes.Entry {
		c, err := cuda.Call(&cuda.LibraryCall{Name: "flaky", Library: lib,
			Regions:   []cuda.Touch{{Region: r.bufs[0].Whole(), Access: cuda.AccessWrite}},
			Reference: func(mem [][]byte) error { mem[0][0] = 7; return nil }})
		if err != nil {
			t.Fatalf("cuda.Call: got err %v, want nil", err)
		}
		return lanes.Eager(cache.PhaseCompute, c)
	}
	before := r.traceLen()
	for i, want := range []string{"no handle for you", "setup exploded"} {
		_, err := r.lane.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), entry()}})
		var ce *cuda.CallError
		c := cuda.Classify(err)
		if !errors.Is(err, lanes.ErrLibrarySetup) || !errors.As(err, &ce) || ce.Name != "flaky" || c.Code != codes.LibrarySetupFailed || !c.NotSubmitted || c.Blame != cuda.BlameCaller {
			t.Fatalf("submission %d: got err %v (%+v), want lanes.ErrLibrarySetup with a *cuda.CallError, not submitted, the caller's", i, err, c)
		}
		if ce.Panicked != (i == 1) || !errors.Is(err, fail) && i == 0 {
			t.Fatalf("submission %d: got %+v, want the setup's own failure (%q)", i, ce, want)
		}
	}
	if r.traceLen() != before || r.lane.State() != lanecore.StateReady {
		t.Fatalf("after refused setups: %d commands reached the device, lane %v; want none, ready", r.traceLen()-before, r.lane.State())
	}
	r.submit(lanes.Batch{Entries: []lanes.Entry{entry()}})
	r.settle()
	if calls != 3 || r.count(0) != 7 {
		t.Fatalf("third try: got %d setups, buffer %d; want 3, 7", calls, r.count(0))
	}
}

// TestLibraryCallDeclarations: a call's library declaration is checked
// when it is built, and a stream refuses a library's call no lane bound.
func TestLibraryCallDeclarations(t *testing.T) {
	dev, s := simStream(t, sim.Config{})
	buf, err := dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.U8})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	region := []cuda.Touch{{Region: buf.Whole(), Access: cuda.AccessRead}}
	ref := func([][]byte) error { return nil }
	lib := &cuda.Library{Name: "lib", WorkspaceBytes: 64}
	for _, tc := range []struct {
		name string
		lc   cuda.LibraryCall
	}{
		{"workspace without a library", cuda.LibraryCall{Name: "c", Regions: region, Reference: ref, Workspace: cuda.AccessRead}},
		{"EnqueueOn without a library", cuda.LibraryCall{Name: "c", Regions: region, EnqueueOn: func(cuda.LibraryLane) error { return nil }}},
		{"Enqueue with a library", cuda.LibraryCall{Name: "c", Regions: region, Library: lib, Enqueue: func(uintptr) error { return nil }}},
		{"workspace of a library with none", cuda.LibraryCall{Name: "c", Regions: region, Reference: ref, Library: &cuda.Library{Name: "bare"}, Workspace: cuda.AccessWrite}},
		{"a bad workspace access", cuda.LibraryCall{Name: "c", Regions: region, Reference: ref, Library: lib, Workspace: 9}},
		{"a library without a name", cuda.LibraryCall{Name: "c", Regions: region, Reference: ref, Library: &cuda.Library{}}},
		{"a workspace too large", cuda.LibraryCall{Name: "c", Regions: region, Reference: ref, Library: &cuda.Library{Name: "big", WorkspaceBytes: cuda.MaxWorkspaceBytes + 1}}},
	} {
		if _, err := cuda.Call(&tc.lc); !errors.Is(err, cuda.ErrInvalidCommand) {
			t.Errorf("%s: got err %v, want cuda.ErrInvalidCommand", tc.name, err)
		}
	}
	c, err := cuda.Call(&cuda.LibraryCall{Name: "c", Library: lib, Workspace: cuda.AccessReadWrite, Reference: ref})
	if err != nil {
		t.Fatalf("a call touching only its workspace: got err %v, want nil", err)
	}
	if err := s.Enqueue(c); !errors.Is(err, cuda.ErrInvalidCommand) {
		t.Fatalf("a library's call enqueued on a stream directly: got err %v, want cuda.ErrInvalidCommand (only a lane binds it)", err)
	}
}

// TestLibrariesALaneCannotHold: a second library of a name the lane holds
// (its calls would share the first's replay keys) and libraries past
// MaxLibraries are refused, not submitted; the workspace hook hears of
// every workspace; AbandonLibraries lets go without freeing.
func TestLibrariesALaneCannotHold(t *testing.T) {
	dev, s := simStream(t, sim.Config{Clock: sim.ClockZeroCost})
	var live []cuda.Buffer
	hook := func(b cuda.Buffer, allocated bool) {
		if allocated {
			live = append(live, b)
			return
		}
		for i, x := range live {
			if x == b {
				live = append(live[:i], live[i+1:]...)
				return
			}
		}
		t.Fatalf("workspace %d let go of, never allocated", b.ID)
	}
	l, err := lanecore.New(lanecore.Config{ID: 7, Device: backend.Must(dev), Stream: s, OnWorkspace: hook})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	if err := l.SetUpLibrary(&cuda.Library{Name: "blas", WorkspaceBytes: 64}); err != nil {
		t.Fatalf("SetUpLibrary: got err %v, want nil", err)
	}
	err = l.SetUpLibrary(&cuda.Library{Name: "blas", WorkspaceBytes: 64})
	if c := cuda.Classify(err); !errors.Is(err, lanes.ErrInvalidBatch) || !c.NotSubmitted {
		t.Fatalf("a second library named blas: got err %v (%+v), want a not-submitted lanes.ErrInvalidBatch", err, c)
	}
	for i := 1; i < lanecore.MaxLibraries; i++ {
		if err := l.SetUpLibrary(&cuda.Library{Name: fmt.Sprintf("lib%d", i), WorkspaceBytes: 8}); err != nil {
			t.Fatalf("library %d: got err %v, want nil", i, err)
		}
	}
	if err := l.SetUpLibrary(&cuda.Library{Name: "one-too-many"}); !errors.Is(err, lanes.ErrInvalidBatch) {
		t.Fatalf("library %d: got err %v, want lanes.ErrInvalidBatch", lanecore.MaxLibraries+1, err)
	}
	if n, b := l.Libraries(); n != lanecore.MaxLibraries || b != 64+8*(lanecore.MaxLibraries-1) || len(live) != lanecore.MaxLibraries {
		t.Fatalf("held: got %d libraries, %d bytes, %d workspaces heard of; want %d, %d, %d", n, b, len(live), lanecore.MaxLibraries, 64+8*(lanecore.MaxLibraries-1), lanecore.MaxLibraries)
	}
	kept := live[0]
	l.AbandonLibraries()
	if n, b := l.Libraries(); n != 0 || b != 0 || len(live) != lanecore.MaxLibraries {
		t.Fatalf("after AbandonLibraries: got %d libraries, %d bytes, %d workspaces live; want none, 0, all %d (still allocated)", n, b, len(live), lanecore.MaxLibraries)
	}
	if err := backend.Must(dev).CheckBuffer(kept); err != nil {
		t.Fatalf("an abandoned workspace: got CheckBuffer %v, want it still allocated (the device's close frees it)", err)
	}
}

// TestForgetLibraryState: a lane that forgets what its libraries' Setup
// made (its device still runs hung work, so Teardown would wait) runs no
// Teardown, keeps its workspaces, and sets each library up again before
// its next call, which runs in the same workspace.
func TestForgetLibraryState(t *testing.T) {
	r := newRig(t, sim.ClockZeroCost, 1)
	tl := newTally()
	r.submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[0])}})
	r.settle()
	r.lane.ForgetLibraryState()
	if n, b := r.lane.Libraries(); n != 1 || b != 8 {
		t.Fatalf("after ForgetLibraryState: got %d libraries, %d workspace bytes; want 1, 8 (kept)", n, b)
	}
	r.submit(lanes.Batch{Entries: []lanes.Entry{tl.call(t, r.bufs[0])}})
	r.settle()
	if len(tl.setups) != 2 || tl.downs != 0 || tl.setups[1].Workspace != tl.setups[0].Workspace {
		t.Fatalf("the next call: got setups %+v, %d teardowns; want a second setup in the same workspace, no teardown", tl.setups, tl.downs)
	}
	if got := r.count(0); got != 2 {
		t.Fatalf("count: got %d, want 2 (the workspace kept its count)", got)
	}
}
