package sim_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

func TestFaultLaunchFailsOneCallOnly(t *testing.T) {
	r := virtualRig(t, sim.Fault{Kind: sim.FaultLaunch, Nth: 2})
	s := r.stream()
	b := r.counter(s, 8)
	r.enqueue(s, r.inc(b))
	err := s.Enqueue(r.inc(b))
	if !errors.Is(err, cuda.ErrLaunchResources) || cuda.Classify(err).Sticky {
		t.Fatalf("second launch: got err %v (sticky %v), want a non-sticky one wrapping cuda.ErrLaunchResources", err, cuda.Classify(err).Sticky)
	}
	r.enqueue(s, r.inc(b))
	if got := r.first(s, b); got != 2 {
		t.Fatalf("got counter %d, want 2: the failed launch must not run, the others must", got)
	}
	if err := r.dev.Err(); err != nil {
		t.Fatalf("device Err after a launch failure: got %v, want nil (not poisoned)", err)
	}
}

func TestFaultCaptureRejectInvalidates(t *testing.T) {
	r := virtualRig(t, sim.Fault{Kind: sim.FaultCaptureReject, Kernel: kernels.Inc, Nth: 1})
	s := r.stream()
	b := r.counter(s, 8)
	r.enqueue(s, r.inc(b)) // not capturing: the rule does not match
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		t.Fatalf("BeginCapture: got err %v, want nil", err)
	}
	if err := s.Enqueue(r.inc(b)); !errors.Is(err, cuda.ErrCaptureUnsupported) {
		t.Fatalf("Enqueue under a rejecting capture: got err %v, want one wrapping cuda.ErrCaptureUnsupported", err)
	}
	if got := s.Capture(); got != backend.CaptureInvalidated {
		t.Fatalf("capture state after the rejection: got %v, want %v", got, backend.CaptureInvalidated)
	}
	if _, err := s.EndCapture(); !errors.Is(err, cuda.ErrCaptureInvalidated) {
		t.Fatalf("EndCapture: got err %v, want one wrapping cuda.ErrCaptureInvalidated", err)
	}
	x := r.capture(s, b, 2) // the rule fired once; capture works again
	if err := s.Launch(x); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	if got := r.first(s, b); got != 3 {
		t.Fatalf("got counter %d, want 3", got)
	}
}

func TestFaultOutOfMemory(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockVirtual, Memory: 4096, Faults: []sim.Fault{{Kind: sim.FaultOutOfMemory, Nth: 2}}})
	if _, err := r.dev.Alloc(cuda.BufferSpec{Size: 1024, Elem: cuda.U8}); err != nil {
		t.Fatalf("first Alloc: got err %v, want nil", err)
	}
	_, err := r.dev.Alloc(cuda.BufferSpec{Size: 1024, Elem: cuda.U8})
	if !errors.Is(err, cuda.ErrOutOfMemory) || !cuda.Classify(err).Retryable {
		t.Fatalf("second Alloc (injected OOM): got err %v (retryable %v), want a retryable one wrapping cuda.ErrOutOfMemory", err, cuda.Classify(err).Retryable)
	}
	b, err := r.dev.Alloc(cuda.BufferSpec{Size: 1024, Elem: cuda.U8})
	if err != nil {
		t.Fatalf("Alloc retried after OOM: got err %v, want nil", err)
	}
	if _, err := r.dev.Alloc(cuda.BufferSpec{Size: 4096, Elem: cuda.U8}); !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Fatalf("Alloc over capacity: got err %v, want one wrapping cuda.ErrOutOfMemory", err)
	}
	m := r.dev.Memory()
	if m.InUse != 2048 || m.Allocations != 2 || m.Free() != 2048 || m.Peak != 2048 {
		t.Fatalf("memory: got InUse %d, Allocations %d, Free %d, Peak %d; want 2048, 2, 2048, 2048 (%+v)", m.InUse, m.Allocations, m.Free(), m.Peak, m)
	}
	if err := r.dev.Free(b); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	if m := r.dev.Memory(); m.InUse != 1024 || m.Peak != 2048 {
		t.Fatalf("memory after Free: got InUse %d, Peak %d; want 1024, 2048 (%+v)", m.InUse, m.Peak, m)
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
		t.Fatalf("Synchronize of the bystander's event: got err %v, want nil", err)
	}
	r.enqueue(a, r.inc(ba)) // the second inc: faults when it runs
	ea := r.record(a)
	wantState(t, "victim before the fault runs", ea.Query(), backend.FencePending)
	wantState(t, "bystander before the fault runs", b.Query(), backend.FenceComplete)
	if err := r.dev.Err(); err != nil {
		t.Fatalf("device Err before the fault ran: got %v, want nil", err)
	}
	r.dev.Clock().Advance(time.Millisecond)
	for name, q := range map[string]backend.FenceQuery{"victim": ea.Query(), "bystander": eb.Query(), "bystander stream": b.Query()} {
		if q.State != backend.FenceIndeterminate || !errors.Is(q.Err, cuda.ErrIllegalAddress) {
			t.Fatalf("%s after the fault: got state %v, err %v; want %v, one wrapping cuda.ErrIllegalAddress", name, q.State, q.Err, backend.FenceIndeterminate)
		}
	}
	if _, err := backend.Must(r.dev).NewStream(); !cuda.Classify(err).Sticky {
		t.Fatalf("NewStream on a poisoned device: got err %v, want a sticky one", err)
	}
	if err := r.dev.Close(); err != nil {
		t.Fatalf("Close of a poisoned device: got err %v, want nil", err)
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
	wantState(t, "hung stream after 1 s", after.Query(), backend.FencePending)
	if got := r.first(ok, bo); got != 1 {
		t.Fatalf("the healthy stream: got counter %d, want 1", got)
	}
	done := make(chan error, 1)
	go func() { done <- hung.Synchronize() }()
	select {
	case err := <-done:
		t.Fatalf("Synchronize of a hung stream: got a return (err %v) within 20 ms, want it blocked until Close", err)
	case <-time.After(20 * time.Millisecond):
	}
	if err := r.dev.Close(); err != nil {
		t.Fatalf("Close: got err %v, want nil", err)
	}
	if err := <-done; !errors.Is(err, cuda.ErrDeinitialized) {
		t.Fatalf("Synchronize of the hung stream after Close: got err %v, want one wrapping cuda.ErrDeinitialized", err)
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
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	if err := r.dev.Free(b); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	if err := s.Launch(x); !errors.Is(err, cuda.ErrStaleHandle) || cuda.Classify(err).Blame != cuda.BlameCaller {
		t.Fatalf("Launch over a freed buffer: got err %v (blame %v), want one wrapping cuda.ErrStaleHandle, blame %v", err, cuda.Classify(err).Blame, cuda.BlameCaller)
	}
	if err := s.Synchronize(); err != nil || r.dev.Err() != nil {
		t.Fatalf("after a refused replay: got Synchronize err %v, device Err %v; want nil, nil", err, r.dev.Err())
	}
}

// TestFreeRacingWorkNeverPoisons: buffers freed while other goroutines
// enqueue and replay work naming them, as a careless caller would: every
// enqueue or launch either runs before the free or is refused; the device
// is never poisoned.
func TestFreeRacingWorkNeverPoisons(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
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
						t.Errorf("round %d: enqueue or launch racing a free: got err %v, want nil or one wrapping cuda.ErrStaleHandle", round, err)
					}
					return
				}
			}
		}()
		if err := dev.Free(b); err != nil {
			t.Fatalf("round %d: Free: got err %v, want nil", round, err)
		}
		<-done
		if err := s.Synchronize(); err != nil || dev.Err() != nil {
			t.Fatalf("round %d: got Synchronize err %v, device Err %v; want nil, nil (never poisoned)", round, err, dev.Err())
		}
	}
}

func TestFaultRulesAreValidated(t *testing.T) {
	for _, f := range []sim.Fault{{Kind: 0, Nth: 1}, {Kind: sim.FaultHang}, {Kind: sim.FaultSticky, Rate: 2}, {Kind: sim.FaultLaunch, Nth: 1, Times: -1}} {
		if _, err := sim.New(sim.Config{Faults: []sim.Fault{f}}); !errors.Is(err, cuda.ErrInvalidCommand) {
			t.Errorf("sim.New with fault %+v: got err %v, want one wrapping cuda.ErrInvalidCommand", f, err)
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
			s, err := backend.Must(r.dev).NewStream()
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
			if got := int(out[0]) | int(out[1])<<8; out[0] != launches%256 || out[1] != launches/256 {
				errs <- fmt.Errorf("got count %d (low bytes %v), want %d", got, out[:2], launches)
				return
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatalf("worker: got err %v, want nil", err)
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
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	defer dev.Close()
	r := rig{t, dev}
	s := r.stream()
	b := r.counter(s, 8)
	huge := cuda.LaunchConfig{Grid: cuda.Dim3{X: 1, Y: 65535, Z: 65535}, Block: cuda.Dim3{X: 1, Y: 1, Z: 64}}
	if _, err := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), huge, cuda.BufferArg(b.Whole()), cuda.I32Arg(8)); !errors.Is(err, cuda.ErrLaunchConfig) {
		t.Fatalf("cuda.Launch of %d threads: got err %v, want one wrapping cuda.ErrLaunchConfig", huge.Threads(), err)
	}
	big := cuda.Linear(1<<21, 256)
	c := cuda.Command{Kind: cuda.KindLaunch, Kernel: kernels.Inc, Config: big, Args: []cuda.Arg{cuda.BufferArg(b.Whole()), cuda.I32Arg(8)}}
	if err := s.Enqueue(c); !errors.Is(err, cuda.ErrLaunchConfig) {
		t.Fatalf("Enqueue of a launch of %d threads, over the configured limit %d: got err %v, want one wrapping cuda.ErrLaunchConfig", big.Threads(), 1<<20, err)
	}
}
