package sim

import (
	"slices"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

func TestWrittenSpans(t *testing.T) {
	var w written
	steps := []struct {
		lo, hi uint64
		want   []span
	}{
		{10, 20, []span{{10, 20}}},
		{30, 40, []span{{10, 20}, {30, 40}}},
		{0, 5, []span{{0, 5}, {10, 20}, {30, 40}}},
		{20, 25, []span{{0, 5}, {10, 25}, {30, 40}}}, // adjacent: merged
		{50, 60, []span{{0, 5}, {10, 25}, {30, 40}, {50, 60}}},
		{24, 52, []span{{0, 5}, {10, 60}}}, // spans several
		{5, 10, []span{{0, 60}}},
		{3, 3, []span{{0, 60}}}, // empty
	}
	for _, s := range steps {
		w.add(s.lo, s.hi)
		if !slices.Equal(w.spans, s.want) {
			t.Fatalf("add [%d, %d): got %v, want %v", s.lo, s.hi, w.spans, s.want)
		}
	}

	w = written{spans: []span{{10, 20}, {30, 40}}}
	for _, c := range []struct {
		lo, hi uint64
		off    uint64
		gap    bool
	}{{0, 5, 0, true}, {10, 20, 0, false}, {12, 18, 0, false}, {10, 25, 20, true}, {15, 35, 20, true}, {30, 40, 0, false}, {35, 50, 40, true}, {45, 50, 45, true}} {
		off, gap := w.firstGap(c.lo, c.hi)
		if gap != c.gap || (gap && off != c.off) {
			t.Fatalf("firstGap(%d, %d): got (%d, %v), want (%d, %v)", c.lo, c.hi, off, gap, c.off, c.gap)
		}
	}
	var got []span
	w.gaps(5, 45, func(lo, hi uint64) { got = append(got, span{lo, hi}) })
	if want := []span{{5, 10}, {20, 30}, {40, 45}}; !slices.Equal(got, want) {
		t.Fatalf("gaps(5, 45): got %v, want %v", got, want)
	}
	got = nil
	w.gaps(12, 38, func(lo, hi uint64) { got = append(got, span{lo, hi}) })
	if want := []span{{20, 30}}; !slices.Equal(got, want) {
		t.Fatalf("gaps(12, 38): got %v, want %v", got, want)
	}
}

// TestInitCheckOffCostsNothing: with the switch off an allocation tracks
// nothing, and executing a launch (the worker's work for every eager
// launch and every graph node) allocates nothing; with it on, a launch
// whose regions are written throughout allocates nothing either.
func TestInitCheckOffCostsNothing(t *testing.T) {
	t.Setenv(InitCheckEnv, "") // off means off, whatever the test command set
	for _, on := range []bool{false, true} {
		dev, err := New(Config{Clock: ClockZeroCost, InitCheck: on})
		d, _ := dev.(*device)
		if err != nil {
			t.Fatalf("New: got err %v, want nil", err)
		}
		defer d.Close()
		b, err := d.Alloc(cuda.BufferSpec{Size: 4 * 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		zero, _ := cuda.Zero(b.Whole())
		inc, err := cuda.Launch(d.Registry().MustSpec(kernels.Inc), cuda.Linear(64, 64), cuda.BufferArg(b.Whole()), cuda.I32Arg(64))
		if err != nil {
			t.Fatalf("cuda.Launch: got err %v, want nil", err)
		}
		run := func(c cuda.Command) {
			d.execMu.Lock()
			defer d.execMu.Unlock()
			if err := d.execute([]node{{cmd: c}}); err != nil {
				t.Fatalf("execute %v (check %v): got err %v, want nil", c, on, err)
			}
		}
		run(zero)
		run(inc)
		a, _ := d.lookup("test", b)
		if tracked := a.written.spans != nil; tracked != on {
			t.Fatalf("check %v: allocation tracks writes: %v", on, tracked)
		}
		if n := testing.AllocsPerRun(100, func() { run(inc) }); n != 0 {
			t.Fatalf("check %v: executing a launch allocates %v times, want 0", on, n)
		}
	}
}
