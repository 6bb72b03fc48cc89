package sim_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// addOne is a library call whose reference adds 1 to every int32 of its
// one region, as the inc kernel does.
func addOne(b cuda.Buffer) *cuda.LibraryCall {
	return &cuda.LibraryCall{Name: "add_one", Regions: []cuda.Touch{{Region: b.Whole(), Access: cuda.AccessReadWrite}},
		Reference: func(mem [][]byte) error {
			for i := 0; i+4 <= len(mem[0]); i += 4 {
				binary.LittleEndian.PutUint32(mem[0][i:], binary.LittleEndian.Uint32(mem[0][i:])+1)
			}
			return nil
		}}
}

// TestLibraryCallEagerAndReplayed: a library call runs in stream order
// eagerly, is captured as one node (running nothing while capturing), and
// replays its reference at every launch of the graph.
func TestLibraryCallEagerAndReplayed(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost})
	s := r.stream()
	b := r.counter(s, 64)
	call, err := cuda.Call(addOne(b))
	if err != nil {
		t.Fatalf("cuda.Call: got err %v, want nil", err)
	}
	r.enqueue(s, call)
	r.enqueue(s, r.inc(b))
	if got := r.first(s, b); got != 2 {
		t.Fatalf("after the call and an inc: got %d, want 2", got)
	}
	if err := s.BeginCapture(cuda.CaptureRelaxed); err != nil {
		t.Fatalf("BeginCapture: got err %v, want nil", err)
	}
	r.enqueue(s, call)
	g, err := s.EndCapture()
	if err != nil {
		t.Fatalf("EndCapture: got err %v, want nil", err)
	}
	if got := g.NodeCount(); got != 1 {
		t.Fatalf("captured call: got %d graph nodes, want 1", got)
	}
	x, err := g.Instantiate()
	if err != nil {
		t.Fatalf("Instantiate: got err %v, want nil", err)
	}
	if got := r.first(s, b); got != 2 {
		t.Fatalf("after capturing the call: got %d, want 2 (capture runs nothing)", got)
	}
	for range 3 {
		if err := s.Launch(x); err != nil {
			t.Fatalf("Launch: got err %v, want nil", err)
		}
	}
	if got := r.first(s, b); got != 5 {
		t.Fatalf("after 3 replays: got %d, want 5", got)
	}
}

// TestLibraryCallRefusedAndFailing: a call the sim cannot run is refused at
// enqueue (the caller's); a reference that fails or panics fails the work
// as a faulting kernel does (a sticky launch failure), with the call's
// error reachable through errors.As.
func TestLibraryCallRefusedAndFailing(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost})
	s := r.stream()
	b := r.counter(s, 16)
	noRef := addOne(b)
	noRef.Reference, noRef.Enqueue = nil, func(uintptr) error { return nil }
	c, err := cuda.Call(noRef)
	if err != nil {
		t.Fatalf("cuda.Call(enqueue only): got err %v, want nil (the real device could run it)", err)
	}
	if err := s.Enqueue(c); !errors.Is(err, cuda.ErrInvalidCommand) {
		t.Fatalf("Enqueue(a call without Reference) on the sim: got err %v, want cuda.ErrInvalidCommand", err)
	}
	for name, bad := range map[string]*cuda.LibraryCall{
		"no name":    {Regions: addOne(b).Regions, Reference: addOne(b).Reference},
		"no regions": {Name: "x", Reference: addOne(b).Reference},
		"no code":    {Name: "x", Regions: addOne(b).Regions},
		"no access":  {Name: "x", Regions: []cuda.Touch{{Region: b.Whole()}}, Reference: addOne(b).Reference},
	} {
		if _, err := cuda.Call(bad); !errors.Is(err, cuda.ErrInvalidCommand) {
			t.Fatalf("cuda.Call(%s): got err %v, want cuda.ErrInvalidCommand", name, err)
		}
	}
	panics := addOne(b)
	panics.Reference = func([][]byte) error { panic("bug in the reference") }
	c, _ = cuda.Call(panics)
	r.enqueue(s, c)
	err = s.Synchronize()
	var ce *cuda.CallError
	if !errors.As(err, &ce) || !ce.Panicked || ce.Name != "add_one" {
		t.Fatalf("Synchronize after a panicking reference: got err %v, want a *cuda.CallError for add_one, panicked", err)
	}
	if cl := cuda.Classify(err); cl.Code != cuda.CodeLaunchFailed || !cl.Sticky {
		t.Fatalf("a panicking reference: got code %v sticky %v, want %v, sticky (as a faulting kernel)", cl.Code, cl.Sticky, cuda.CodeLaunchFailed)
	}
}
