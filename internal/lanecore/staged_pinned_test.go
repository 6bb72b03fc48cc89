package lanecore_test

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/testdev"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// pinnedFloats is the size of each input of the pinned-upload programs:
// 2 MiB of f32, twice the smallest input a lane pins.
const pinnedFloats = 2 * lanecore.MinPinnedInput / 4

// newBigStaged is out = in[0] + in[1] over pinnedFloats f32 on a lane
// whose pin budget is pinBytes (0: the default).
func newBigStaged(t *testing.T, pinBytes int64) (sim.Device, *lanecore.Lane, *lanecore.Staged) {
	t.Helper()
	return newBigStagedOn(t, pinBytes, func(d sim.Device) backend.Device { return backend.Must(d) })
}

// newBigStagedOn is newBigStaged with the lane's device made by wrap.
func newBigStagedOn(t *testing.T, pinBytes int64, wrap func(sim.Device) backend.Device) (sim.Device, *lanecore.Lane, *lanecore.Staged) {
	t.Helper()
	dev, s := simStream(t, sim.Config{Clock: sim.ClockVirtual})
	l, err := lanecore.New(lanecore.Config{ID: 1, Device: wrap(dev), Stream: s, PinBytes: pinBytes})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	const size = 4 * pinnedFloats
	slot := func() lanes.Slot {
		b, err := dev.Alloc(cuda.BufferSpec{Size: size, Elem: cuda.F32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		h, err := dev.AllocHost(size)
		if err != nil {
			t.Fatalf("AllocHost: got err %v, want nil", err)
		}
		return lanes.Slot{Staging: h.Whole(), Device: b.Whole()}
	}
	a, b, out := slot(), slot(), slot()
	add, err := cuda.Launch(dev.Registry().MustSpec(kernels.Add), cuda.Linear(pinnedFloats, 256), cuda.BufferArg(out.Device), cuda.BufferArg(a.Device), cuda.BufferArg(b.Device), cuda.I32Arg(pinnedFloats))
	if err != nil {
		t.Fatalf("cuda.Launch(add): got err %v, want nil", err)
	}
	st, err := lanecore.NewStaged([]lanes.Slot{a, b}, []int{0, 1}, []lanes.Slot{out}, []int{0},
		[]lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("pinned-test", add), cache.PlanScope())}})
	if err != nil {
		t.Fatalf("NewStaged: got err %v, want nil", err)
	}
	if _, err := l.Configure(8); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	if err := l.Prepare(st); err != nil {
		t.Fatalf("Prepare: got err %v, want nil", err)
	}
	return dev, l, st
}

// fill writes f(i) into every f32 of b.
func fill(b []byte, f func(i int) float32) []byte {
	for i := range len(b) / 4 {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f(i)))
	}
	return b
}

// checkSum fails unless out holds x + y, reading a missing tail of x as 0.
func checkSum(t *testing.T, what string, out, x, y []byte) {
	t.Helper()
	at := func(b []byte, i int) float32 {
		if 4*i+4 > len(b) {
			return 0
		}
		return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	for i := range pinnedFloats {
		if got, want := at(out, i), at(x, i)+at(y, i); got != want {
			t.Fatalf("%s: output[%d] = %v, want %v", what, i, got, want)
		}
	}
}

func TestStagedReplayUploadsReusedBuffersFromWhereTheyAre(t *testing.T) {
	_, l, st := newBigStaged(t, 0)
	x, y := make([]byte, 4*pinnedFloats), make([]byte, 4*pinnedFloats)
	replay := func(what string, wantPinned uint64, in ...[]byte) {
		t.Helper()
		before := l.StagedCounters().PinnedUploads
		res, err := l.Replay(st, in, true)
		if err != nil {
			t.Fatalf("%s: Replay: got err %v, want nil", what, err)
		}
		if res.OutputCache || res.Resident {
			t.Fatalf("%s: got OutputCache %v, Resident %v; want new inputs staged", what, res.OutputCache, res.Resident)
		}
		checkSum(t, what, res.Outputs[0], in[0], in[1])
		if got := l.StagedCounters().PinnedUploads - before; got != wantPinned {
			t.Fatalf("%s: got %d inputs uploaded from the caller's buffers, want %d", what, got, wantPinned)
		}
	}
	replay("first use of the buffers (copied: pinning pays only for a reused buffer)", 0, fill(x, func(i int) float32 { return float32(i) }), fill(y, func(int) float32 { return 1 }))
	if n, _ := l.PinnedInputs(); n != 0 {
		t.Fatalf("after one replay: got %d pinned buffers, want 0", n)
	}
	replay("the same buffers, new bytes", 2, fill(x, func(i int) float32 { return float32(2 * i) }), y)
	if n, b := l.PinnedInputs(); n != 2 || b != 2*4*pinnedFloats {
		t.Fatalf("after reusing both buffers: got %d pinned buffers of %d bytes, want 2 of %d", n, b, 2*4*pinnedFloats)
	}
	replay("again, one byte changed", 2, fill(x, func(i int) float32 { return float32(3 * i) }), y)
	// A shorter input in a pinned buffer: uploaded from there, its slot's
	// tail zeroed on the device.
	replay("a shorter input within a pinned buffer", 2, x[:4*pinnedFloats/2], y)
	// A fresh buffer beside a pinned one: it is copied into its staging,
	// the pinned one is not.
	fresh := fill(make([]byte, 4*pinnedFloats), func(i int) float32 { return -float32(i) })
	replay("a fresh buffer beside a pinned one", 1, x, fresh)
	// The same bytes again: an output-cache hit, then Repeat, exact.
	res, err := l.Replay(st, [][]byte{x, fresh}, true)
	if err != nil || !res.OutputCache {
		t.Fatalf("identical inputs after an in-place upload: got OutputCache %v, err %v; want a hit", res.OutputCache, err)
	}
	st.ForgetOutputs()
	res, err = l.Repeat(st, st.MakeOutputs())
	if err != nil {
		t.Fatalf("Repeat after an in-place upload: got err %v, want nil", err)
	}
	checkSum(t, "Repeat after forgetting the outputs", res.Outputs[0], x, fresh)
	if err := l.UnpinInputs(); err != nil {
		t.Fatalf("UnpinInputs: got err %v, want nil", err)
	}
	if n, b := l.PinnedInputs(); n != 0 || b != 0 {
		t.Fatalf("after UnpinInputs: got %d pinned buffers of %d bytes, want none", n, b)
	}
	replay("after unpinning, a reused buffer is pinned again", 2, fill(x, func(int) float32 { return 7 }), fresh)
}

func TestStagedReplayPinBudget(t *testing.T) {
	t.Run("one buffer's worth", func(t *testing.T) {
		_, l, st := newBigStaged(t, 4*pinnedFloats+1)
		x, y := make([]byte, 4*pinnedFloats), make([]byte, 4*pinnedFloats)
		for i := range 4 {
			fill(x, func(j int) float32 { return float32(i + j) })
			res, err := l.Replay(st, [][]byte{x, y}, true)
			if err != nil {
				t.Fatalf("replay %d: got err %v, want nil", i, err)
			}
			checkSum(t, "within a one-buffer budget", res.Outputs[0], x, y)
			if n, b := l.PinnedInputs(); b > 4*pinnedFloats+1 || (i > 0 && n != 1) {
				t.Fatalf("replay %d: got %d pinned buffers of %d bytes, want 1 within the budget", i, n, b)
			}
		}
	})
	t.Run("none", func(t *testing.T) {
		_, l, st := newBigStaged(t, -1)
		x, y := make([]byte, 4*pinnedFloats), make([]byte, 4*pinnedFloats)
		for i := range 3 {
			fill(y, func(j int) float32 { return float32(i * j) })
			res, err := l.Replay(st, [][]byte{x, y}, true)
			if err != nil {
				t.Fatalf("replay %d: got err %v, want nil", i, err)
			}
			checkSum(t, "with pinning off", res.Outputs[0], x, y)
		}
		if c := l.StagedCounters(); c.PinnedUploads != 0 {
			t.Fatalf("PinBytes -1: got %d pinned uploads, want 0", c.PinnedUploads)
		}
	})
}

func TestStagedReplayCopiesWhatTheDeviceWillNotPin(t *testing.T) {
	dev, l, st := newBigStaged(t, 0)
	x, y := make([]byte, 4*pinnedFloats), make([]byte, 4*pinnedFloats)
	// Someone else pinned x's pages already: the device refuses a second
	// pin, and the lane copies x as before.
	unpin, err := testdev.Sim(dev).PinHost(x)
	if err != nil {
		t.Fatalf("PinHost(x): got err %v, want nil", err)
	}
	var ce *cuda.Error
	if _, err := testdev.Sim(dev).PinHost(x[4096:]); !errors.As(err, &ce) || ce.Code != codes.HostMemoryRegistered {
		t.Fatalf("pinning pages pinned already: got err %v, want code %d", err, codes.HostMemoryRegistered)
	}
	for i := range 3 {
		fill(x, func(j int) float32 { return float32(i - j) })
		res, err := l.Replay(st, [][]byte{x, y}, true)
		if err != nil {
			t.Fatalf("replay %d: got err %v, want nil", i, err)
		}
		checkSum(t, "x pinned by someone else", res.Outputs[0], x, y)
	}
	if c := l.StagedCounters(); c.PinnedUploads != 2 {
		t.Fatalf("x refused, y reused twice: got %d pinned uploads, want 2 (y's)", c.PinnedUploads)
	}
	if err := unpin(); err != nil {
		t.Fatalf("unpin: got err %v, want nil", err)
	}
	if err := unpin(); err != nil {
		t.Fatalf("a second unpin: got err %v, want nil (it does nothing)", err)
	}
}

func TestStagedReplayPinsDoubleBuffers(t *testing.T) {
	_, l, st := newBigStaged(t, 0)
	sets := [2][2][]byte{}
	for i := range sets {
		sets[i] = [2][]byte{make([]byte, 4*pinnedFloats), make([]byte, 4*pinnedFloats)}
	}
	for i := range 6 {
		in := sets[i%2]
		fill(in[0], func(j int) float32 { return float32(i*j + 1) })
		before := l.StagedCounters().PinnedUploads
		res, err := l.Replay(st, in[:], true)
		if err != nil {
			t.Fatalf("replay %d: got err %v, want nil", i, err)
		}
		checkSum(t, "alternating two sets of buffers", res.Outputs[0], in[0], in[1])
		want := uint64(2)
		if i < 2 {
			want = 0 // each set's first use is copied
		}
		if got := l.StagedCounters().PinnedUploads - before; got != want {
			t.Fatalf("replay %d: got %d pinned uploads, want %d", i, got, want)
		}
	}
}

// Found from outside: an input ending inside an element, a buffer pinned
// first at a shorter length, and a working set larger than the budget.
func TestStagedReplayPinningEdges(t *testing.T) {
	const size = 4 * pinnedFloats
	replay := func(t *testing.T, l *lanecore.Lane, st *lanecore.Staged, what string, x, y []byte) uint64 {
		t.Helper()
		before := l.StagedCounters().PinnedUploads
		res, err := l.Replay(st, [][]byte{x, y}, true)
		if err != nil {
			t.Fatalf("%s: Replay: got err %v, want nil", what, err)
		}
		checkSum(t, what, res.Outputs[0], x, y)
		return l.StagedCounters().PinnedUploads - before
	}
	t.Run("an input ending inside an element", func(t *testing.T) {
		_, l, st := newBigStaged(t, 0)
		x, y := fill(make([]byte, size), func(i int) float32 { return float32(i) }), make([]byte, size)
		replay(t, l, st, "whole", x, y)
		for i := range 3 {
			odd := x[:size-1-i]
			res, err := l.Replay(st, [][]byte{odd, y}, true)
			if err != nil {
				t.Fatalf("an input of %d bytes in a pinned buffer: got err %v, want nil (it is copied into the padded staging)", len(odd), err)
			}
			want := append(append([]byte(nil), odd...), make([]byte, size-len(odd))...)
			checkSum(t, "an odd length", res.Outputs[0], want, y)
		}
	})
	t.Run("a buffer pinned first at a shorter length", func(t *testing.T) {
		_, l, st := newBigStaged(t, 0)
		x, y := make([]byte, size), make([]byte, size)
		half := x[:size/2]
		next := func(in []byte) []byte { // new bytes every replay: no output-cache hit
			binary.LittleEndian.PutUint32(in, binary.LittleEndian.Uint32(in)+1)
			return in
		}
		replay(t, l, st, "half, first", next(half), y)
		replay(t, l, st, "half, again", next(half), y)
		replay(t, l, st, "whole, first", next(x), y)
		if got := replay(t, l, st, "whole, again", next(x), y); got != 2 {
			t.Fatalf("the whole buffer after its first half was pinned: got %d pinned uploads, want 2", got)
		}
		if n, b := l.PinnedInputs(); n != 2 || b != 2*size {
			t.Fatalf("after the whole buffer was pinned: got %d pins of %d bytes, want 2 of %d (the half's pin let go)", n, b, 2*size)
		}
	})
	t.Run("a working set larger than the budget", func(t *testing.T) {
		_, l, st := newBigStaged(t, 3*size)
		sets := [2][2][]byte{{make([]byte, size), make([]byte, size)}, {make([]byte, size), make([]byte, size)}}
		var got []uint64
		for i := range 10 {
			in := sets[i%2]
			fill(in[0], func(j int) float32 { return float32(i + j) })
			got = append(got, replay(t, l, st, "two sets in turn", in[0], in[1]))
		}
		// Three of the four buffers stay pinned; the fourth is copied
		// every time instead of unpinning one that comes back next.
		for i := 4; i < len(got); i++ {
			if got[i] != got[i-2] || got[i]+got[i-1] != 3 {
				t.Fatalf("pinned uploads per replay %v: want a steady 2, 1 (or 1, 2) once warm, no pin moving", got)
			}
		}
		if n, _ := l.PinnedInputs(); n != 3 {
			t.Fatalf("got %d pinned buffers, want 3 (the budget)", n)
		}
	})
	t.Run("a program whose staging the caller addresses", func(t *testing.T) {
		_, l, st := newBigStaged(t, 0)
		views, err := l.StagedInputs(st)
		if err != nil {
			t.Fatalf("StagedInputs: got err %v, want nil", err)
		}
		x, y := make([]byte, size), fill(make([]byte, size), func(int) float32 { return 5 })
		for i := range 3 {
			fill(x, func(j int) float32 { return float32(i * j) })
			if got := replay(t, l, st, "views taken", x, y); got != 0 {
				t.Fatalf("replay %d: got %d pinned uploads, want 0: the staging must keep the inputs", i, got)
			}
		}
		// Rewrite input 0 in place alone: input 1 is still the last one
		// passed.
		c := fill(make([]byte, size), func(j int) float32 { return float32(-j) })
		copy(views[0], c)
		res, err := l.ReplayWritten(st, true)
		if err != nil {
			t.Fatalf("ReplayWritten: got err %v, want nil", err)
		}
		checkSum(t, "input 0 rewritten in place, input 1 the last passed", res.Outputs[0], c, y)
	})
}

// countingPins is a simulated device counting its pins and unpins.
type countingPins struct {
	testdev.Device
	pins, unpins int
}

func (d *countingPins) PinHost(mem []byte) (func() error, error) {
	unpin, err := d.Device.PinHost(mem)
	if err != nil {
		return nil, err
	}
	d.pins++
	return func() error { d.unpins++; return unpin() }, nil
}

// Found from outside, second round: windows of one buffer used in turn,
// and the staging asked for after uploads from the caller's buffers.
func TestStagedReplayPinningWindowsAndViews(t *testing.T) {
	const size = 4 * pinnedFloats
	t.Run("overlapping windows of one buffer used in turn", func(t *testing.T) {
		var counted *countingPins
		_, l, st2 := newBigStagedOn(t, 0, func(d sim.Device) backend.Device { counted = &countingPins{Device: testdev.Sim(d)}; return counted })
		big, y := make([]byte, 4*size), make([]byte, size)
		for i := range 20 {
			w := big[(i%2)*size/2:][:size] // [0, size) and [size/2, 3size/2) in turn
			binary.LittleEndian.PutUint32(w, uint32(i))
			res, err := l.Replay(st2, [][]byte{w, y}, true)
			if err != nil {
				t.Fatalf("replay %d: got err %v, want nil", i, err)
			}
			checkSum(t, "overlapping windows", res.Outputs[0], w, y)
		}
		if counted.pins == 0 || counted.pins > 3 || counted.unpins > 1 {
			t.Fatalf("20 replays over two overlapping windows: got %d pins and %d unpins, want at most 3 and 1 (one pin across both windows)", counted.pins, counted.unpins)
		}
	})
	t.Run("the staging asked for after uploads from the caller's buffers", func(t *testing.T) {
		_, l, st := newBigStaged(t, 0)
		x, y := make([]byte, size), fill(make([]byte, size), func(int) float32 { return 3 })
		for i := range 3 {
			fill(x, func(j int) float32 { return float32(i + j) })
			if _, err := l.Replay(st, [][]byte{x, y}, true); err != nil {
				t.Fatalf("replay %d: got err %v, want nil", i, err)
			}
		}
		if l.StagedCounters().PinnedUploads == 0 {
			t.Fatal("no upload from the caller's buffers: the case is not exercised")
		}
		views, err := l.StagedInputs(st)
		if err != nil {
			t.Fatalf("StagedInputs: got err %v, want nil", err)
		}
		if string(views[1]) != string(y) {
			t.Fatal("StagedInputs after uploads from the caller's buffers: input 1's staging does not hold the last input passed")
		}
		c := fill(make([]byte, size), func(j int) float32 { return float32(7 * j) })
		copy(views[0], c)
		res, err := l.ReplayWritten(st, true)
		if err != nil {
			t.Fatalf("ReplayWritten: got err %v, want nil", err)
		}
		checkSum(t, "input 0 rewritten in place after pinned replays", res.Outputs[0], c, y)
	})
}
