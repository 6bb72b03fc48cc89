// In-place parameter updates (Exec.Rebind) and what an executable holds
// on the device (Exec.DeviceBytes).

package conformance

import (
	"bytes"
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// testRebind gives an executable new pointers, scalars and launch shapes
// in place, without a capture: its replay writes what a fresh capture of
// the same commands writes, bit for bit; what it cannot take is refused
// with a typed reason and leaves it as it was.
func testRebind(t *testing.T, dev cuda.Device) {
	f := fixture{t, dev}
	s := f.stream()
	const n = 64
	y1, x1 := f.zeroed(s, cuda.F32, n), f.zeroed(s, cuda.F32, n)
	y2, x2 := f.zeroed(s, cuda.F32, n), f.zeroed(s, cuda.F32, n)
	build := func(name string, threads uint32, args ...cuda.Arg) cuda.Command {
		t.Helper()
		c, err := cuda.Launch(f.spec(name), cuda.Linear(threads, 32), args...)
		if err != nil {
			t.Fatalf("build %s: %v", name, err)
		}
		return c
	}
	step := func(y, x cuda.Buffer, v, a float32, threads uint32) []cuda.Command {
		return []cuda.Command{
			build(kernels.Fill, threads, cuda.BufferArg(x.Whole()), cuda.F32Arg(v), cuda.I32Arg(n)),
			build(kernels.Axpy, threads, cuda.BufferArg(y.Whole()), cuda.BufferArg(x.Whole()), cuda.F32Arg(a), cuda.I32Arg(n)),
			build(kernels.Axpy, threads, cuda.BufferArg(y.Whole()), cuda.BufferArg(x.Whole()), cuda.F32Arg(a), cuda.I32Arg(n)),
		}
	}
	capture := func(cmds []cuda.Command) cuda.Exec {
		t.Helper()
		if err := s.BeginCapture(cuda.CaptureRelaxed); err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if err := s.Enqueue(c); err != nil {
				t.Fatal(err)
			}
		}
		g, err := s.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		defer g.Destroy()
		x, err := g.Instantiate()
		if err != nil {
			t.Fatal(err)
		}
		if err := x.Upload(s); err != nil {
			t.Fatal(err)
		}
		return x
	}
	launch := func(x cuda.Exec) {
		t.Helper()
		if err := s.Launch(x); err != nil {
			t.Fatal(err)
		}
	}
	rebound := capture(step(y1, x1, 1, 1, n))
	defer rebound.Destroy()
	if b := rebound.DeviceBytes(); b <= 0 {
		t.Fatalf("DeviceBytes of an uploaded executable of 3 nodes: got %d, want > 0", b)
	}
	// The same executable, rebound: other buffers, scalars and shape.
	next := step(y2, x2, 0.375, -2.5, n/2)
	if err := rebound.Rebind(next); err != nil {
		t.Fatalf("Rebind to other buffers, scalars and shape: %v", err)
	}
	launch(rebound)
	fresh := capture(next)
	defer fresh.Destroy()
	got := f.read(s, y2)
	if y := f.f32s(s, y1); y[0] != 0 {
		t.Fatalf("after the rebind the replay wrote the old buffer: y1[0]=%v, want 0", y[0])
	}
	z, _ := cuda.Zero(y2.Whole())
	if err := s.Enqueue(z); err != nil {
		t.Fatal(err)
	}
	launch(fresh)
	if want := f.read(s, y2); !bytes.Equal(got, want) {
		t.Fatalf("the rebound executable wrote\n%v\na fresh capture of the same commands\n%v", DecodeF32(got), DecodeF32(want))
	}
	if y := f.f32s(s, y2); y[0] != 2*-2.5*0.375 || y[n/2-1] != 2*-2.5*0.375 || y[n/2] != 0 {
		t.Fatalf("y2 after the rebound replay: got %v, want its first half %v (the new launch shape's threads), the rest 0", y, 2*-2.5*0.375)
	}
	// Refusals leave the executable as it was.
	refused := func(cmds []cuda.Command, want cuda.RebindRefusal) {
		t.Helper()
		err := rebound.Rebind(cmds)
		var re *cuda.RebindRefusedError
		if !errors.As(err, &re) || re.Refusal != want || !errors.Is(err, cuda.ErrUpdateRefused) || cuda.Classify(err).Code != cuda.CodeGraphExecUpdateFailure {
			t.Fatalf("Rebind: got %v, want a *cuda.RebindRefusedError %s matching ErrUpdateRefused", err, want)
		}
	}
	refused(next[:2], cuda.RebindNodeCount)
	zero, _ := cuda.Zero(y2.Whole())
	refused([]cuda.Command{next[0], next[1], zero}, cuda.RebindNodeKind)
	// A contract error (a freed buffer) is the caller's, and changes nothing.
	gone := f.zeroed(s, cuda.F32, n)
	stale := step(y2, gone, 1, 1, n)
	if err := dev.Free(gone); err != nil {
		t.Fatal(err)
	}
	if err := rebound.Rebind(stale); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Fatalf("Rebind naming a freed buffer: got %v, want ErrStaleHandle", err)
	}
	if err := s.Enqueue(z); err != nil {
		t.Fatal(err)
	}
	launch(rebound)
	if y := f.f32s(s, y2); y[0] != 2*-2.5*0.375 {
		t.Fatalf("a refused rebind changed the executable: y2[0]=%v, want %v", y[0], 2*-2.5*0.375)
	}
	// An executable with a memset node takes no parameters in place.
	mixed := capture([]cuda.Command{zero, next[1]})
	defer mixed.Destroy()
	err := mixed.Rebind([]cuda.Command{next[1], next[1]})
	var re *cuda.RebindRefusedError
	if !errors.As(err, &re) || re.Refusal != cuda.RebindNodeKind {
		t.Fatalf("Rebind of an executable with a memset node: got %v, want refusal %s", err, cuda.RebindNodeKind)
	}
	if err := rebound.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := rebound.Rebind(next); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Fatalf("Rebind of a destroyed executable: got %v, want ErrStaleHandle", err)
	}
}
