package sim_test

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
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
	g, x := r.captured(s, call)
	if got := g.NodeCount(); got != 1 {
		t.Fatalf("captured call: got %d graph nodes, want 1", got)
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
	if cl := cuda.Classify(err); cl.Code != codes.LaunchFailed || !cl.Sticky {
		t.Fatalf("a panicking reference: got code %v sticky %v, want %v, sticky (as a faulting kernel)", cl.Code, cl.Sticky, codes.LaunchFailed)
	}
}

// TestCapturedWorkIsFrozen: as CUDA copies a launch's arguments when it is
// captured, a command changed after its capture (its scalar, its call's
// reference) or a kernel body that writes into its arguments changes no
// replay.
func TestCapturedWorkIsFrozen(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost})
	s := r.stream()
	b, err := r.dev.Alloc(cuda.BufferSpec{Size: 256, Elem: cuda.F32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	fill, err := cuda.LaunchNamed(r.dev.Kernels(), "fill_f32", cuda.Linear(64, 64), cuda.BufferArg(b.Whole()), cuda.F32Arg(1), cuda.I32Arg(64))
	if err != nil {
		t.Fatalf("LaunchNamed(fill_f32): got err %v, want nil", err)
	}
	lc := addOne(b)
	call, err := cuda.Call(lc)
	if err != nil {
		t.Fatalf("cuda.Call: got err %v, want nil", err)
	}
	_, x := r.captured(s, fill, call)
	fill.Args[1] = cuda.F32Arg(2)
	lc.Reference = func([][]byte) error { return errors.New("the replaced reference ran") }
	if err := s.Launch(x); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	host := make([]byte, 4)
	if err := s.Readback(cuda.Region{Buffer: b, Length: 4}, host); err != nil {
		t.Fatalf("Readback after the replay: got err %v, want nil (the captured reference)", err)
	}
	// fill wrote 1.0f (bits 0x3f800000), then add_one added 1 to its bits.
	if got := binary.LittleEndian.Uint32(host); got != 0x3f800001 {
		t.Fatalf("replay after the command changed: got bits %#x, want %#x (fill 1.0, then +1)", got, 0x3f800001)
	}
}

// TestCallWithoutReferenceRefusedUpFront: the check a lane runs on every
// entry before enqueueing any (backend.ValidateFor with the device's kernels)
// already refuses a call the simulated device cannot run.
func TestCallWithoutReferenceRefusedUpFront(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost})
	b := r.counter(r.stream(), 16)
	lc := addOne(b)
	lc.Reference, lc.Enqueue = nil, func(uintptr) error { return nil }
	c, err := cuda.Call(lc)
	if err != nil {
		t.Fatalf("cuda.Call(enqueue only): got err %v, want nil", err)
	}
	err = backend.ValidateFor("validate", c, r.dev.Kernels(), func(cuda.Buffer) error { return nil })
	if !errors.Is(err, cuda.ErrInvalidCommand) || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("ValidateFor(call without Reference): got err %v, want cuda.ErrInvalidCommand, not submitted", err)
	}
}

// TestPublishedKernelsAreACopy: what a caller changes in the kernels a
// device publishes (Kernels) changes nothing the device enforces, and an
// upload's bytes changed after its capture change no replay.
func TestPublishedKernelsAreACopy(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost})
	s := r.stream()
	ints := r.counter(s, 16)
	spec, _ := r.dev.Kernels().Kernel("fill_f32")
	spec.Params[0].Elem = cuda.I32 // the published Params: shared, but not the device's
	bad := cuda.Command{Kind: cuda.KindLaunch, Kernel: "fill_f32", Config: cuda.Linear(16, 16),
		Args: []cuda.Arg{cuda.BufferArg(ints.Whole()), cuda.F32Arg(1), cuda.I32Arg(16)}}
	if err := s.Enqueue(bad); err == nil || cuda.Classify(err).Blame != cuda.BlameCaller {
		t.Fatalf("Enqueue of fill_f32 into an i32 buffer after editing the published spec: got err %v, want the device's own refusal (the caller's)", err)
	}

	up, err := cuda.Upload(ints.Whole(), make([]byte, 64))
	if err != nil {
		t.Fatalf("cuda.Upload: got err %v, want nil", err)
	}
	_, x := r.captured(s, up)
	up.Host[0] = 7
	if err := s.Launch(x); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	if got := r.first(s, ints); got != 0 {
		t.Fatalf("replayed upload after its bytes changed: got %d, want 0 (the captured bytes)", got)
	}
}

// TestNoDataKeepsSemantics: a device with NoData computes no bytes, but
// its streams keep their order, capture rules and replays, and an injected
// sticky fault still poisons it.
func TestNoDataKeepsSemantics(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost, NoData: true, Faults: []sim.Fault{{Kind: sim.FaultSticky, Nth: 3}}})
	s := r.stream()
	b := r.counter(s, 16) // its zeroing runs no bytes either
	before := r.first(s, b)
	r.enqueue(s, r.inc(b))
	if got := r.first(s, b); got != before {
		t.Fatalf("an inc on a NoData device: got %d, want %d, as before it (no bytes computed)", got, before)
	}
	_, x := r.captured(s, r.inc(b))
	if err := s.Launch(x); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize after a replay: got err %v, want nil", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("second Synchronize: got err %v, want nil", err)
	}
	r.enqueue(s, r.inc(b)) // the third launch: the injected sticky fault
	if err := s.Synchronize(); !errors.Is(err, cuda.ErrIllegalAddress) {
		t.Fatalf("Synchronize after the injected sticky fault: got err %v, want cuda.ErrIllegalAddress", err)
	}
}
