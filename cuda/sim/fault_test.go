package sim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
)

func TestFaultLaunchFailsOneCallOnly(t *testing.T) {
	r := virtualRig(t, sim.Fault{Kind: sim.FaultLaunch, Nth: 2})
	s := r.stream()
	b := r.counter(s, 8)
	r.enqueue(s, r.inc(b))
	err := s.Enqueue(r.inc(b))
	if !errors.Is(err, cuda.ErrLaunchResources) || cuda.Classify(err).Sticky {
		t.Fatalf("second launch: %v; want a non-sticky launch failure", err)
	}
	r.enqueue(s, r.inc(b))
	if got := r.first(s, b); got != 2 {
		t.Fatalf("counter %d: the failed launch must not run, the others must", got)
	}
	if err := r.dev.Err(); err != nil {
		t.Fatalf("a launch failure poisoned the device: %v", err)
	}
}

func TestFaultCaptureRejectInvalidates(t *testing.T) {
	r := virtualRig(t, sim.Fault{Kind: sim.FaultCaptureReject, Kernel: kernels.Inc, Nth: 1})
	s := r.stream()
	b := r.counter(s, 8)
	r.enqueue(s, r.inc(b)) // not capturing: the rule does not match
	if err := s.BeginCapture(cuda.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(r.inc(b)); !errors.Is(err, cuda.ErrCaptureUnsupported) {
		t.Fatalf("rejected capture: %v", err)
	}
	if s.Capture() != cuda.CaptureInvalidated {
		t.Fatal("capture not invalidated")
	}
	if _, err := s.EndCapture(); !errors.Is(err, cuda.ErrCaptureInvalidated) {
		t.Fatalf("end capture: %v", err)
	}
	x := r.capture(s, b, 2) // the rule fired once; capture works again
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	if got := r.first(s, b); got != 3 {
		t.Fatalf("counter %d, want 3", got)
	}
}

func TestFaultOutOfMemory(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockVirtual, Memory: 4096, Faults: []sim.Fault{{Kind: sim.FaultOutOfMemory, Nth: 2}}})
	if _, err := r.dev.Alloc(cuda.BufferSpec{Size: 1024, Elem: cuda.U8}); err != nil {
		t.Fatal(err)
	}
	_, err := r.dev.Alloc(cuda.BufferSpec{Size: 1024, Elem: cuda.U8})
	if !errors.Is(err, cuda.ErrOutOfMemory) || !cuda.Classify(err).Retryable {
		t.Fatalf("injected OOM: %v", err)
	}
	b, err := r.dev.Alloc(cuda.BufferSpec{Size: 1024, Elem: cuda.U8})
	if err != nil {
		t.Fatalf("retry after OOM: %v", err)
	}
	if _, err := r.dev.Alloc(cuda.BufferSpec{Size: 4096, Elem: cuda.U8}); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("over capacity: %v", err)
	}
	m := r.dev.Memory()
	if m.InUse != 2048 || m.Allocations != 2 || m.Free() != 2048 || m.Peak != 2048 {
		t.Fatalf("memory %+v", m)
	}
	if err := r.dev.Free(b); err != nil {
		t.Fatal(err)
	}
	if m := r.dev.Memory(); m.InUse != 1024 || m.Peak != 2048 {
		t.Fatalf("after free %+v", m)
	}
}

// TestFaultStickyPoisonsAtItsTime: the device fails when the faulting
// kernel runs, not before; work that finished earlier was complete, and from
// then on every stream answers with the sticky error.
func TestFaultStickyPoisonsAtItsTime(t *testing.T) {
	r := virtualRig(t, sim.Fault{Kind: sim.FaultSticky, Kernel: kernels.Inc, Nth: 2})
	a, b := r.stream(), r.stream()
	ba, bb := r.counter(a, 8), r.counter(b, 8)
	r.enqueue(b, r.inc(bb))
	eb := r.record(b)
	if err := eb.Synchronize(); err != nil {
		t.Fatal(err)
	}
	r.enqueue(a, r.inc(ba)) // the second inc: faults when it runs
	ea := r.record(a)
	wantState(t, "victim before the fault runs", ea.Query(), cuda.FencePending)
	wantState(t, "bystander before the fault runs", b.Query(), cuda.FenceComplete)
	if r.dev.Err() != nil {
		t.Fatal("poisoned before the fault ran")
	}
	r.dev.Clock().Advance(time.Millisecond)
	for name, q := range map[string]cuda.FenceQuery{"victim": ea.Query(), "bystander": eb.Query(), "bystander stream": b.Query()} {
		if q.State != cuda.FenceIndeterminate || !errors.Is(q.Err, cuda.ErrIllegalAddress) {
			t.Fatalf("%s after the fault: %v %v", name, q.State, q.Err)
		}
	}
	if _, err := r.dev.NewStream(); !cuda.Classify(err).Sticky {
		t.Fatalf("new stream on a poisoned device: %v", err)
	}
	if err := r.dev.Close(); err != nil {
		t.Fatalf("close of a poisoned device: %v", err)
	}
}

// TestFaultHangStopsOneStream: a kernel that never finishes stalls its
// stream forever; other streams go on; Close abandons it and wakes waiters.
func TestFaultHangStopsOneStream(t *testing.T) {
	r := virtualRig(t, sim.Fault{Kind: sim.FaultHang, Kernel: kernels.Inc, Nth: 1})
	hung, ok := r.stream(), r.stream()
	bh, bo := r.counter(hung, 8), r.counter(ok, 8)
	r.enqueue(hung, r.inc(bh))
	after := r.record(hung)
	r.enqueue(ok, r.inc(bo))
	r.dev.Clock().Advance(time.Second)
	wantState(t, "hung stream after 1 s", after.Query(), cuda.FencePending)
	if got := r.first(ok, bo); got != 1 {
		t.Fatalf("the healthy stream counted %d", got)
	}
	done := make(chan error, 1)
	go func() { done <- hung.Synchronize() }()
	select {
	case err := <-done:
		t.Fatalf("synchronize of a hung stream returned %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	if err := r.dev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, cuda.ErrDeinitialized) {
		t.Fatalf("waiter after close: %v", err)
	}
}

// TestReplayOfFreedBufferIsRefused: an executable keeps device addresses,
// and replaying one whose buffer was freed would fault the device as on a
// GPU; the device refuses the launch instead, and stays healthy.
func TestReplayOfFreedBufferIsRefused(t *testing.T) {
	r := virtualRig(t)
	s := r.stream()
	b := r.counter(s, 8)
	x := r.capture(s, b, 1)
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	if err := r.dev.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := s.Launch(x); !errors.Is(err, cuda.ErrStaleHandle) || cuda.Classify(err).Blame != cuda.BlameCaller {
		t.Fatalf("replay over a freed buffer: %v", err)
	}
	if err := s.Synchronize(); err != nil || r.dev.Err() != nil {
		t.Fatalf("the device after a refused replay: %v %v", err, r.dev.Err())
	}
}

// TestFreeRacingWorkNeverPoisons: buffers freed while other goroutines
// enqueue and replay work naming them, as a careless caller would: every
// enqueue or launch either runs before the free or is refused; the device
// is never poisoned.
func TestFreeRacingWorkNeverPoisons(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	r := rig{t, dev}
	inc := dev.Registry().MustSpec(kernels.Inc)
	for round := range 200 {
		s := r.stream()
		b := r.counter(s, 8)
		x := r.capture(s, b, 2)
		c, _ := cuda.Launch(inc, cuda.Linear(8, 8), cuda.BufferArg(b.Whole()), cuda.I32Arg(8))
		done := make(chan struct{})
		go func() {
			defer close(done)
			for i := 0; ; i++ {
				var err error
				if i%2 == 0 {
					err = s.Enqueue(c)
				} else {
					err = s.Launch(x)
				}
				if err != nil {
					if !errors.Is(err, cuda.ErrStaleHandle) {
						t.Errorf("round %d: %v", round, err)
					}
					return
				}
			}
		}()
		if err := dev.Free(b); err != nil {
			t.Fatal(err)
		}
		<-done
		if err := s.Synchronize(); err != nil || dev.Err() != nil {
			t.Fatalf("round %d: the device was poisoned: %v %v", round, err, dev.Err())
		}
	}
}

func TestFaultRulesAreValidated(t *testing.T) {
	for _, f := range []sim.Fault{{Kind: 0, Nth: 1}, {Kind: sim.FaultHang}, {Kind: sim.FaultSticky, Rate: 2}, {Kind: sim.FaultLaunch, Nth: 1, Times: -1}} {
		if _, err := sim.New(sim.Config{Faults: []sim.Fault{f}}); !errors.Is(err, cuda.ErrInvalidCommand) {
			t.Errorf("fault %+v: %v", f, err)
		}
	}
}

// TestConcurrentStreams hammers one device from many goroutines, each with
// its own stream, under the race detector.
func TestConcurrentStreams(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost})
	const workers, launches = 8, 200
	errs := make(chan error, workers)
	for range workers {
		go func() {
			s, err := r.dev.NewStream()
			if err != nil {
				errs <- err
				return
			}
			b, err := r.dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
			if err != nil {
				errs <- err
				return
			}
			z, _ := cuda.Zero(b.Whole())
			if err := s.Enqueue(z); err != nil {
				errs <- err
				return
			}
			for i := range launches {
				if err := s.Enqueue(r.inc(b)); err != nil {
					errs <- err
					return
				}
				if i%50 == 0 {
					_ = s.Query()
				}
			}
			out := make([]byte, 4)
			reg, _ := b.Region(0, 4)
			if err := s.Readback(reg, out); err != nil {
				errs <- err
				return
			}
			if out[0] != launches%256 || out[1] != launches/256 {
				errs <- errors.New("wrong count")
				return
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestHugeLaunchIsRefused: a launch the simulator could not run in
// reasonable time on the host (tens of billions of threads, which a GPU
// finishes in seconds) is refused before it is enqueued, as a launch
// configuration error; a smaller limit is configurable.
func TestHugeLaunchIsRefused(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost, MaxLaunchThreads: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	r := rig{t, dev}
	s := r.stream()
	b := r.counter(s, 8)
	huge := cuda.LaunchConfig{Grid: cuda.Dim3{X: 1, Y: 65535, Z: 65535}, Block: cuda.Dim3{X: 1, Y: 1, Z: 64}}
	if _, err := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), huge, cuda.BufferArg(b.Whole()), cuda.I32Arg(8)); !errors.Is(err, cuda.ErrLaunchConfig) {
		t.Fatalf("a launch of %d threads: %v", huge.Threads(), err)
	}
	big := cuda.Linear(1<<21, 256)
	c := cuda.Command{Kind: cuda.KindLaunch, Kernel: kernels.Inc, Config: big, Args: []cuda.Arg{cuda.BufferArg(b.Whole()), cuda.I32Arg(8)}}
	if err := s.Enqueue(c); !errors.Is(err, cuda.ErrLaunchConfig) {
		t.Fatalf("a launch over the configured limit: %v", err)
	}
}
