package remote_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/internal/wire"
	"google.golang.org/protobuf/proto"
)

// sample is a batch with every kind of command that crosses the wire, replay
// contracts, work, boundaries and retained buffers, made on a simulator.
func sample(t testing.TB) lanes.Batch {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	a, _ := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.F32})
	b, _ := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.F32})
	add, err := cuda.Launch(dev.Registry().MustSpec(kernels.Add), cuda.Linear(16, 16), cuda.BufferArg(a.Whole()), cuda.BufferArg(a.Whole()), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
	if err != nil {
		t.Fatalf("cuda.Launch: got err %v, want nil", err)
	}
	up, _ := cuda.Upload(b.Whole(), make([]byte, 64))
	cp, _ := cuda.Copy(b.Whole(), a.Whole())

	z, _ := cuda.Zero(a.Whole())
	// Staging (pinned host memory of this process) has no wire form.
	in, _ := cuda.Upload(a.Whole(), make([]byte, 64))
	out, _ := cuda.Copy(a.Whole(), b.Whole())
	layout := &lanes.Layout{ID: "wave", Region: b.Whole(), Fields: []lanes.Field{{Offset: 0, Length: 16}, {Offset: 16, Length: 48}}}
	return lanes.Batch{Tenant: "t", Path: lanes.PathReplayedWithBoundaries, Timing: lanes.TimingReplay, EagerBoundaries: []int{2}, Retain: []cuda.Buffer{b},
		Program: &programs.Capture{ID: programs.ID{Runtime: "lanes/sim", Name: "step"}, Nodes: 3, EagerBoundaries: []int{2}, Bindings: []int{1}},
		Patches: []lanes.Patch{{Layout: layout, Field: 1, Bytes: make([]byte, 48)}, {Layout: layout, Field: 0, Bytes: []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}, {Dst: a.Whole(), Bytes: make([]byte, 64)}},
		Entries: []lanes.Entry{
			{Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Command: in, Replay: lanes.Replayable(in, cache.LaunchKey("p", in), cache.LaneScope(3))},
			{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("p", add), cache.PlanScope()),
				Work: lanes.Work{Form: lanes.FormBatched, ParticipantStart: 2, ParticipantCount: 5, Tokens: 9}},
			{Phase: cache.PhaseCompute, Node: 1, Command: up},
			{Phase: cache.PhaseCompute, Node: 2, Command: cp},
			{Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: z},
			{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: out},
			{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &programs.Invocation{Program: programs.ID{Runtime: "lanes/sim", Name: "prefill"}, Segment: programs.Segment{Ordinal: 1, Start: 4, End: 9, Commands: 5}}},
		}}
}

// roundTrip encodes b, marshals the message, and decodes it back.
func roundTrip(t testing.TB, b lanes.Batch) lanes.Batch {
	t.Helper()
	w, err := remote.BatchToWire(b)
	if err != nil {
		t.Fatalf("BatchToWire: got err %v, want nil", err)
	}
	raw, err := proto.Marshal(w)
	if err != nil {
		t.Fatalf("proto.Marshal: got err %v, want nil", err)
	}
	var back wirepb.Batch
	if err := proto.Unmarshal(raw, &back); err != nil {
		t.Fatalf("proto.Unmarshal: got err %v, want nil", err)
	}
	got, err := remote.BatchFromWire(&back)
	if err != nil {
		t.Fatalf("BatchFromWire: got err %v, want nil", err)
	}
	return got
}

// TestBatchRoundTrip: a batch comes back from the wire equal to itself,
// field by field, upload bytes included.
func TestBatchRoundTrip(t *testing.T) {
	b := sample(t)
	if got := roundTrip(t, b); !reflect.DeepEqual(got, b) {
		t.Fatalf("after the wire:\n got %+v\nwant %+v", got, b)
	}
}

// TestStructArgumentsCrossTheWire: a struct passed by value and a half
// scalar come back from the wire byte for byte.
func TestStructArgumentsCrossTheWire(t *testing.T) {
	buf := cuda.Buffer{Device: 1, ID: 3, Size: 64, Align: 256, Elem: cuda.F32, Addr: 1 << 20}
	byValue := cuda.Command{Kind: cuda.KindLaunch, Kernel: "affine", Config: cuda.Linear(16, 16),
		Args: []cuda.Arg{cuda.BufferArg(buf.Whole()), cuda.StructArg([]byte{9, 8, 7, 6, 5, 4, 3, 2}), cuda.F16Arg(2)}}
	b := lanes.Batch{Tenant: "t", Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Command: byValue}}}
	if got := roundTrip(t, b); !reflect.DeepEqual(got, b) {
		t.Fatalf("after the wire:\n got %+v\nwant %+v", got, b)
	}
}

// TestBatchesWithoutAWireForm: staging is pinned memory of this process,
// a call command without its LibraryCall declares nothing, and a program
// name past MaxProgramName could not be scoped on the host: refused with
// ErrWire, saying which entry. A declaration any lane refuses is refused
// as the lane says it.
func TestBatchesWithoutAWireForm(t *testing.T) {
	for name, b := range map[string]lanes.Batch{
		"a call without its LibraryCall": {Entries: []lanes.Entry{{Command: cuda.Command{Kind: cuda.KindCall}}}},
		"a kernel name not UTF-8":        {Entries: []lanes.Entry{{Command: cuda.Command{Kind: cuda.KindLaunch, Kernel: "k\xff"}}}},
		"a call name not UTF-8":          {Entries: []lanes.Entry{{Command: cuda.Command{Kind: cuda.KindCall, LibraryCall: &cuda.LibraryCall{Name: "ax\xffpy"}}}}},
		"an invocation's long name":      {Entries: []lanes.Entry{{Invoke: &programs.Invocation{Program: programs.ID{Name: string(make([]byte, wire.MaxProgramName+1))}}}}},
		"a layout id not UTF-8":          {Patches: []lanes.Patch{{Layout: &lanes.Layout{ID: "w\xff"}}}},
		"a layout of no region":          {Patches: []lanes.Patch{{Layout: &lanes.Layout{ID: "w"}}}},
		"a stage-in":                     {Entries: []lanes.Entry{{Command: cuda.Command{Kind: cuda.KindStageIn}}}},
		"a stage-out":                    {Entries: []lanes.Entry{{Command: cuda.Command{Kind: cuda.KindStageOut}}}},
	} {
		if _, err := remote.BatchToWire(b); !errors.Is(err, remote.ErrWire) {
			t.Errorf("%s: got err %v, want remote.ErrWire", name, err)
		}
	}
	// A declaration the lane would refuse is refused as the lane says.
	for name, c := range map[string]programs.Capture{
		"a program's name not UTF-8": {ID: programs.ID{Runtime: "lanes/sim", Name: "st\xffep"}, Nodes: 1},
		"a program with no name":     {ID: programs.ID{Runtime: "lanes/sim"}, Nodes: 1},
	} {
		if _, err := remote.BatchToWire(lanes.Batch{Program: &c}); !errors.Is(err, programs.ErrTopology) {
			t.Errorf("%s: got err %v, want programs.ErrTopology, as one process says", name, err)
		}
	}
	up, _ := cuda.Upload(cuda.Region{Length: wire.MaxHostBytes + 4}, make([]byte, wire.MaxHostBytes+4))
	for name, b := range map[string]lanes.Batch{
		"too many entries":   {Entries: make([]lanes.Entry, wire.MaxEntries+1)},
		"an upload too long": {Entries: []lanes.Entry{{Command: up}}},
	} {
		_, err := remote.BatchToWire(b)
		if !errors.Is(err, remote.ErrWire) || !errors.Is(err, actors.ErrBatchTooLarge) || cuda.Classify(err).Code != codes.BatchTooLarge {
			t.Errorf("%s: got err %v (code %v), want actors.ErrBatchTooLarge and its code (as one process says), and remote.ErrWire", name, err, cuda.Classify(err).Code)
		}
	}
}

// TestMalformedBatchesRefused: what a peer may send that breaks the wire's
// limits or ranges is refused with ErrWire, before any lane sees it.
func TestMalformedBatchesRefused(t *testing.T) {
	ok, err := remote.BatchToWire(sample(t))
	if err != nil {
		t.Fatalf("BatchToWire: got err %v, want nil", err)
	}
	for name, change := range map[string]func(*wirepb.Batch){
		"a nil entry":            func(w *wirepb.Batch) { w.Entries[0] = nil },
		"no command":             func(w *wirepb.Batch) { w.Entries[0].Command = nil },
		"a call, undeclared":     func(w *wirepb.Batch) { w.Entries[0].Command.Kind = uint32(cuda.KindCall) },
		"a declaration, no call": func(w *wirepb.Batch) { w.Entries[0].Command.Call = &wirepb.LibraryCall{Name: "f"} },
		"a stage-in":             func(w *wirepb.Batch) { w.Entries[0].Command.Kind = uint32(cuda.KindStageIn) },
		"kind zero":              func(w *wirepb.Batch) { w.Entries[0].Command.Kind = 0 },
		"a huge phase":           func(w *wirepb.Batch) { w.Entries[0].Phase = 1 << 20 },
		"a node past int32":      func(w *wirepb.Batch) { w.Entries[1].Node = 1 << 40 },
		"a short replay key":     func(w *wirepb.Batch) { w.Entries[1].Replay.Key = []byte{1} },
		"too many arguments":     func(w *wirepb.Batch) { w.Entries[1].Command.Args = make([]*wirepb.Arg, cuda.MaxArgs+1) },
		"a nil argument":         func(w *wirepb.Batch) { w.Entries[1].Command.Args[0] = nil },
		"a long kernel name":     func(w *wirepb.Batch) { w.Entries[1].Command.Kernel = string(make([]byte, cuda.MaxKernelName+1)) },
		"an element type":        func(w *wirepb.Batch) { w.Retain[0].Elem = 1 << 9 },
		"a path out of range":    func(w *wirepb.Batch) { w.Path = 1 << 9 },
		"too many boundaries":    func(w *wirepb.Batch) { w.EagerBoundaries = make([]int64, remote.MaxBoundaries+1) },
		"a boundary past int":    func(w *wirepb.Batch) { w.EagerBoundaries = []int64{-1 << 40} },
		"too many entries":       func(w *wirepb.Batch) { w.Entries = make([]*wirepb.Entry, wire.MaxEntries+1) },
		"too many upload bytes":  func(w *wirepb.Batch) { w.Entries[2].Command.Host = make([]byte, wire.MaxHostBytes+1) },
		"a long program name":    func(w *wirepb.Batch) { w.Program.Id.Name = string(make([]byte, wire.MaxProgramName+1)) },
		"a program with no id":   func(w *wirepb.Batch) { w.Program.Id = nil },
		"a program too large":    func(w *wirepb.Batch) { w.Program.Nodes = programs.MaxNodes + 1 },
		"a negative binding":     func(w *wirepb.Batch) { w.Program.Bindings = []int64{-1} },
		"a negative segment":     func(w *wirepb.Batch) { w.Entries[6].Invoke.Segment.Start = -1 },
		"an invocation, no id":   func(w *wirepb.Batch) { w.Entries[6].Invoke.Program = nil },
		"a nil patch":            func(w *wirepb.Batch) { w.Patches[0] = nil },
		"a layout, no region":    func(w *wirepb.Batch) { w.Patches[0].Layout.Region = nil },
		"a layout, empty region": func(w *wirepb.Batch) { w.Patches[0].Layout.Region = &wirepb.Region{} },
		"a layout's nil field":   func(w *wirepb.Batch) { w.Patches[0].Layout.Fields[0] = nil },
		"a patch field past int": func(w *wirepb.Batch) { w.Patches[0].Field = 1 << 40 },
		"too many patch bytes":   func(w *wirepb.Batch) { w.Patches[2].Bytes = make([]byte, wire.MaxHostBytes+1) },
		"too many patches":       func(w *wirepb.Batch) { w.Patches = make([]*wirepb.Patch, remote.MaxPatches+1) },
	} {
		w := proto.Clone(ok).(*wirepb.Batch)
		change(w)
		if _, err := remote.BatchFromWire(w); !errors.Is(err, remote.ErrWire) {
			t.Errorf("%s: got err %v, want remote.ErrWire", name, err)
		}
	}
	if _, err := remote.BatchFromWire(nil); !errors.Is(err, remote.ErrWire) {
		t.Errorf("a nil batch: got err %v, want remote.ErrWire", err)
	}
}

// FuzzBatchFromWire decodes arbitrary bytes as a wire batch: never a
// panic; a batch that decodes comes back the same from another round trip.
func FuzzBatchFromWire(f *testing.F) {
	w, err := remote.BatchToWire(sample(f))
	if err != nil {
		f.Fatalf("BatchToWire: got err %v, want nil", err)
	}
	seed, _ := proto.Marshal(w)
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var w wirepb.Batch
		if proto.Unmarshal(raw, &w) != nil {
			return
		}
		b, err := remote.BatchFromWire(&w)
		if err != nil {
			return
		}
		for _, e := range b.Entries {
			if e.Command.Kind == cuda.KindCall {
				t.Fatalf("a decoded batch: got a library call, want none")
			}
		}
		again := roundTrip(t, b)
		if !reflect.DeepEqual(normalize(again), normalize(b)) {
			t.Fatalf("a second round trip changed the batch:\n got %+v\nwant %+v", again, b)
		}
	})
}

// normalize makes empty and nil slices alike, as the wire does.
func normalize(b lanes.Batch) lanes.Batch {
	if c := b.Program; c != nil {
		own := *c
		if len(own.EagerBoundaries) == 0 {
			own.EagerBoundaries = nil
		}
		if len(own.Bindings) == 0 {
			own.Bindings = nil
		}
		b.Program = &own
	}
	for i := range b.Patches {
		if len(b.Patches[i].Bytes) == 0 {
			b.Patches[i].Bytes = nil
		}
		if l := b.Patches[i].Layout; l != nil && len(l.Fields) == 0 {
			l.Fields = nil
		}
	}
	if len(b.Patches) == 0 {
		b.Patches = nil
	}
	if len(b.EagerBoundaries) == 0 {
		b.EagerBoundaries = nil
	}
	if len(b.Retain) == 0 {
		b.Retain = nil
	}
	for i := range b.Entries {
		c := &b.Entries[i].Command
		if len(c.Args) == 0 {
			c.Args = nil
		}
		if len(c.Host) == 0 {
			c.Host = nil
		}
		if r := b.Entries[i].Replay; r != nil && len(r.Scopes) == 0 {
			r.Scopes = nil
		}
	}
	return b
}
