package sim_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

const us = time.Microsecond

type rig struct {
	t   testing.TB
	dev sim.Device
}

func newRig(t testing.TB, cfg sim.Config) rig {
	t.Helper()
	d, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return rig{t, d}
}

func virtualRig(t testing.TB, faults ...sim.Fault) rig {
	return newRig(t, sim.Config{Clock: sim.ClockVirtual, Trace: true, Faults: faults, Memory: 1 << 30})
}

func (r rig) stream() backend.Stream {
	r.t.Helper()
	s, err := backend.Must(r.dev).NewStream()
	if err != nil {
		r.t.Fatalf("NewStream: got err %v, want nil", err)
	}
	return s
}

func (r rig) counter(s backend.Stream, n int) cuda.Buffer {
	r.t.Helper()
	b, err := r.dev.Alloc(cuda.BufferSpec{Size: uint64(4 * n), Elem: cuda.I32})
	if err != nil {
		r.t.Fatalf("Alloc of a %d-element counter: got err %v, want nil", n, err)
	}
	z, _ := cuda.Zero(b.Whole())
	if err := s.Enqueue(z); err != nil {
		r.t.Fatalf("Enqueue(zero counter): got err %v, want nil", err)
	}
	return b
}

func (r rig) inc(b cuda.Buffer) cuda.Command {
	r.t.Helper()
	n := int32(b.Size / 4)
	c, err := cuda.Launch(r.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(uint32(n), 256), cuda.BufferArg(b.Whole()), cuda.I32Arg(n))
	if err != nil {
		r.t.Fatalf("cuda.Launch(inc): got err %v, want nil", err)
	}
	return c
}

func (r rig) enqueue(s backend.Stream, c cuda.Command) {
	r.t.Helper()
	if err := s.Enqueue(c); err != nil {
		r.t.Fatalf("Enqueue(%v): got err %v, want nil", c, err)
	}
}

func (r rig) record(s backend.Stream) backend.Event {
	r.t.Helper()
	e, err := s.Record()
	if err != nil {
		r.t.Fatalf("Record: got err %v, want nil", err)
	}
	return e
}

func (r rig) first(s backend.Stream, b cuda.Buffer) int32 {
	r.t.Helper()
	out := make([]byte, 4)
	reg, _ := b.Region(0, 4)
	if err := s.Readback(reg, out); err != nil {
		r.t.Fatalf("Readback of a counter: got err %v, want nil", err)
	}
	return int32(binary.LittleEndian.Uint32(out))
}

// capture records k increments of b into an uploaded executable.
func (r rig) capture(s backend.Stream, b cuda.Buffer, k int) backend.Exec {
	r.t.Helper()
	incs := make([]cuda.Command, k)
	for i := range incs {
		incs[i] = r.inc(b)
	}
	_, x := r.captured(s, incs...)
	return x
}

func wantState(t testing.TB, what string, q backend.FenceQuery, want backend.FenceState) {
	t.Helper()
	if q.State != want {
		t.Fatalf("%s: got state %v (err %v), want %v", what, q.State, q.Err, want)
	}
}

// captured captures cmds on s into an instantiated executable.
func (r rig) captured(s backend.Stream, cmds ...cuda.Command) (backend.Graph, backend.Exec) {
	r.t.Helper()
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		r.t.Fatalf("BeginCapture: got err %v, want nil", err)
	}
	for _, c := range cmds {
		r.enqueue(s, c)
	}
	g, err := s.EndCapture()
	if err != nil {
		r.t.Fatalf("EndCapture: got err %v, want nil", err)
	}
	x, err := g.Instantiate()
	if err != nil {
		r.t.Fatalf("Instantiate: got err %v, want nil", err)
	}
	return g, x
}
