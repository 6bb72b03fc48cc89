package sim_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

// TestVirtualEagerTiming pins the cost model on the virtual clock: each
// eager launch costs 3.5 µs of host time before the device may start it,
// and runs 1.5 µs on the device.
func TestVirtualEagerTiming(t *testing.T) {
	r := virtualRig(t)
	s := r.stream()
	b := r.counter(s, 1) // zero: 2 µs host, 1.2 µs device
	for range 3 {
		r.enqueue(s, r.inc(b))
	}
	e := r.record(s)
	var starts []time.Duration
	for _, te := range r.dev.Trace() {
		starts = append(starts, te.Start)
	}
	want := []time.Duration{2 * us, 5500 * time.Nanosecond, 9 * us, 12500 * time.Nanosecond}
	if !reflect.DeepEqual(starts, want) {
		t.Fatalf("got starts %v, want %v", starts, want)
	}
	clk := r.dev.Clock()
	clk.AdvanceTo(13 * us)
	wantState(t, "event at 13µs", e.Query(), backend.FencePending)
	clk.AdvanceTo(14 * us)
	wantState(t, "event at 14µs", e.Query(), backend.FenceComplete)
	if got := r.first(s, b); got != 3 {
		t.Fatalf("got counter %d, want 3", got)
	}
}

// TestVirtualGraphVersusEager compares one step of K tiny kernels eagerly and
// as one graph launch, as the anchors do on the H200.
func TestVirtualGraphVersusEager(t *testing.T) {
	const k = 64
	r := virtualRig(t)
	s := r.stream()
	b := r.counter(s, 1024)
	x := r.capture(s, b, k)
	if err := x.Upload(s); err != nil {
		t.Fatalf("Upload: got err %v, want nil", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize after upload: got err %v, want nil", err)
	}
	clk := r.dev.Clock()
	t0 := clk.Now()
	for range k {
		r.enqueue(s, r.inc(b))
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize after the eager step: got err %v, want nil", err)
	}
	eager := clk.Now() - t0
	t0 = clk.Now()
	if err := s.Launch(x); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize after the graph step: got err %v, want nil", err)
	}
	graph := clk.Now() - t0
	if eager < 224*us || eager > 226*us {
		t.Errorf("eager step of %d: got %v, want about 225 µs [224, 226] (H200: 224)", k, eager)
	}
	if graph < 60*us || graph > 62*us {
		t.Errorf("graph step of %d: got %v, want about 61 µs [60, 62] (H200: 59)", k, graph)
	}
	if got := r.first(s, b); got != 2*k {
		t.Fatalf("got counter %d, want %d", got, 2*k)
	}
}

func TestStreamsRunConcurrently(t *testing.T) {
	r := virtualRig(t)
	a, b := r.stream(), r.stream()
	ba, bb := r.counter(a, 256), r.counter(b, 256)
	x, y := r.capture(a, ba, 100), r.capture(b, bb, 100)
	if err := backend.Must(r.dev).Synchronize(); err != nil {
		t.Fatalf("device Synchronize: got err %v, want nil", err)
	}
	clk := r.dev.Clock()
	t0 := clk.Now()
	if err := a.Launch(x); err != nil {
		t.Fatalf("Launch on stream a: got err %v, want nil", err)
	}
	if err := b.Launch(y); err != nil {
		t.Fatalf("Launch on stream b: got err %v, want nil", err)
	}
	ea, eb := r.record(a), r.record(b)
	// Each: 2.5 µs host, then 1.3 µs launch + 100 × 0.9 µs nodes + 10 µs
	// first-launch upload: due at t0 + 103.8 µs.
	clk.Advance(100 * us)
	wantState(t, "stream a", ea.Query(), backend.FencePending)
	wantState(t, "stream b", eb.Query(), backend.FencePending)
	clk.Advance(5 * us)
	wantState(t, "stream a", ea.Query(), backend.FenceComplete)
	wantState(t, "stream b", eb.Query(), backend.FenceComplete)
	if d := clk.Now() - t0; d > 120*us {
		t.Fatalf("two streams of 100 nodes: got %v, want at most 120 µs: they must overlap", d)
	}
}

// TestContention: more busy streams than the device runs at full speed
// stretch every stream's work (eight streams: five times one, as measured).
func TestContention(t *testing.T) {
	r := virtualRig(t)
	const streams = 8
	var ss []backend.Stream
	var xs []backend.Exec
	for range streams {
		s := r.stream()
		xs = append(xs, r.capture(s, r.counter(s, 256), 64))
		ss = append(ss, s)
	}
	if err := backend.Must(r.dev).Synchronize(); err != nil {
		t.Fatalf("device Synchronize: got err %v, want nil", err)
	}
	clk := r.dev.Clock()
	t0 := clk.Now()
	for i, s := range ss {
		if err := s.Launch(xs[i]); err != nil {
			t.Fatalf("Launch on stream %d: got err %v, want nil", i, err)
		}
	}
	if err := backend.Must(r.dev).Synchronize(); err != nil {
		t.Fatalf("device Synchronize after the launches: got err %v, want nil", err)
	}
	all := clk.Now() - t0
	single := 2500*time.Nanosecond + 1300*time.Nanosecond + 64*900*time.Nanosecond
	if ratio := float64(streams) * float64(single) / float64(all); ratio < 4.5 || ratio > 5.5 {
		t.Fatalf("8 streams: got %.2fx the throughput of one (%v for all, %v for one), want about 5x [4.5, 5.5]", ratio, all, single)
	}
}

func TestVirtualRunsAreDeterministic(t *testing.T) {
	run := func(seed int64) ([]sim.TraceEntry, []string) {
		d, err := sim.New(sim.Config{Clock: sim.ClockVirtual, Trace: true, Seed: seed, Faults: []sim.Fault{
			{Kind: sim.FaultLaunch, Rate: 0.2},
			{Kind: sim.FaultCaptureReject, Rate: 0.1},
		}})
		if err != nil {
			t.Fatalf("sim.New(seed %d): got err %v, want nil", seed, err)
		}
		defer d.Close()
		r := rig{t, d}
		var outcomes []string
		ss := []backend.Stream{r.stream(), r.stream(), r.stream()}
		bs := []cuda.Buffer{r.counter(ss[0], 64), r.counter(ss[1], 4096), r.counter(ss[2], 16)}
		for step := range 40 {
			i := step % 3
			if step%7 == 0 {
				_ = ss[i].BeginCapture(backend.CaptureRelaxed)
				_ = ss[i].Enqueue(r.inc(bs[i]))
				_, err := ss[i].EndCapture()
				outcomes = append(outcomes, cuda.Classify(err).Code.String())
				continue
			}
			err := ss[i].Enqueue(r.inc(bs[i]))
			outcomes = append(outcomes, cuda.Classify(err).Code.String())
			d.Clock().Advance(time.Duration(step) * us)
			outcomes = append(outcomes, ss[(i+1)%3].Query().State.String())
		}
		return d.Trace(), outcomes
	}
	t1, o1 := run(42)
	t2, o2 := run(42)
	if !reflect.DeepEqual(t1, t2) {
		t.Fatalf("two virtual runs with seed 42: got traces that differ (%s), want identical", traceDiff(t1, t2))
	}
	if !reflect.DeepEqual(o1, o2) {
		t.Fatalf("two virtual runs with seed 42: got outcomes\n%v\n%v\nwant identical", o1, o2)
	}
	t3, o3 := run(7)
	if reflect.DeepEqual(t1, t3) && reflect.DeepEqual(o1, o3) {
		t.Fatalf("runs with seeds 42 and 7: got identical traces and outcomes %v, want them to differ: the seed must reach the faults", o1)
	}
}

// traceDiff says where two traces first differ.
func traceDiff(a, b []sim.TraceEntry) string {
	for i := range min(len(a), len(b)) {
		if !reflect.DeepEqual(a[i], b[i]) {
			return fmt.Sprintf("entry %d: %+v vs %+v", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("%d entries vs %d", len(a), len(b))
}

func TestZeroCostChargesNothing(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost, Trace: true})
	s := r.stream()
	b := r.counter(s, 16)
	for range 10 {
		r.enqueue(s, r.inc(b))
	}
	if got := r.first(s, b); got != 10 {
		t.Fatalf("got counter %d, want 10", got)
	}
	for _, te := range r.dev.Trace() {
		if te.Finish != te.Start {
			t.Fatalf("zero-cost work %+v: got duration %v, want 0", te, te.Finish-te.Start)
		}
	}
}

func TestRealTimeChargesHostCost(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockRealTime})
	s := r.stream()
	b := r.counter(s, 16)
	t0 := time.Now()
	for range 200 {
		r.enqueue(s, r.inc(b))
	}
	if host := time.Since(t0); host < 200*3500*time.Nanosecond {
		t.Fatalf("200 eager launches: got %v of host time, want at least %v (the model charges 3.5 µs each)", host, 200*3500*time.Nanosecond)
	}
	if got := r.first(s, b); got != 200 {
		t.Fatalf("got counter %d, want 200", got)
	}
}

// TestNoDataWorkBehindNothingEndsAtOnce: with no bytes and no time (what
// lanedemo's --clock none measures), work behind nothing is retired as it
// is enqueued, as the idle worker would have at once; a fault still takes
// the worker's way, and a hung launch still holds everything behind it.
func TestNoDataWorkBehindNothingEndsAtOnce(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost, NoData: true, Faults: []sim.Fault{{Kind: sim.FaultHang, Nth: 3}}})
	s := r.stream()
	b := r.counter(s, 16)
	for i := range 2 {
		r.enqueue(s, r.inc(b))
		if q := s.Query(); q.State != backend.FenceComplete || q.Err != nil {
			t.Fatalf("launch %d behind nothing: got %+v, want complete at once", i, q)
		}
	}
	r.enqueue(s, r.inc(b)) // the third launch hangs
	r.enqueue(s, r.inc(b)) // behind it: never ends
	for range 3 {
		if q := s.Query(); q.State != backend.FencePending {
			t.Fatalf("behind a hung launch: got %+v, want pending", q)
		}
		time.Sleep(time.Millisecond)
	}
}
