// In-place parameter updates (Exec.Rebind) and what an executable holds
// on the device (Exec.DeviceBytes).

package conformance

import (
	"bytes"
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// testRebind gives an executable new pointers, scalars and launch shapes
// in place, without a capture: its replay writes what a fresh capture of
// the same commands writes, bit for bit; what it cannot take is refused
// with a typed reason and leaves it as it was.
func testRebind(t *testing.T, dev backend.Device) {
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
	capture := func(cmds []cuda.Command) backend.Exec { t.Helper(); return f.instantiated(s, cmds) }
	launch := func(x backend.Exec) {
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
	refused := func(cmds []cuda.Command, want backend.RebindRefusal) {
		t.Helper()
		err := rebound.Rebind(cmds)
		var re *backend.RebindRefusedError
		if !errors.As(err, &re) || re.Refusal != want || !errors.Is(err, cuda.ErrUpdateRefused) || cuda.Classify(err).Code != codes.GraphExecUpdateFailure {
			t.Fatalf("Rebind: got %v, want a *backend.RebindRefusedError %s matching ErrUpdateRefused", err, want)
		}
	}
	refused(next[:2], backend.RebindNodeCount)
	zero, _ := cuda.Zero(y2.Whole())
	refused([]cuda.Command{next[0], next[1], zero}, backend.RebindNodeKind)
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
	// A command of another kind than its node was captured from is refused.
	mixed := capture([]cuda.Command{zero, next[1]})
	defer mixed.Destroy()
	err := mixed.Rebind([]cuda.Command{next[1], next[1]})
	var re *backend.RebindRefusedError
	if !errors.As(err, &re) || re.Refusal != backend.RebindNodeKind || re.Node != 0 {
		t.Fatalf("Rebind of a memset node with a launch: got %v, want refusal %s at node 0", err, backend.RebindNodeKind)
	}
	// An upload's node (its source pinned memory the graph holds) takes
	// no parameters in place.
	up, _ := cuda.Upload(x2.Whole(), EncodeF32(randF32(3, n)))
	withUpload := capture([]cuda.Command{up, next[1]})
	defer withUpload.Destroy()
	if err := withUpload.Rebind([]cuda.Command{up, next[1]}); !errors.As(err, &re) || re.Refusal != backend.RebindNodeKind {
		t.Fatalf("Rebind of an executable with an upload node: got %v, want refusal %s", err, backend.RebindNodeKind)
	}
	if err := rebound.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := rebound.Rebind(next); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Fatalf("Rebind of a destroyed executable: got %v, want ErrStaleHandle", err)
	}
}

// testRebindCopies rebinds an executable of copy, memset and kernel nodes
// (a decode step's shape: its input staged in, its output staged out) to
// another tenant's staging and buffers: its replay writes what a fresh
// capture of the same commands writes, and the first tenant's memory is
// untouched.
func testRebindCopies(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	hm := cuda.HostMemory(dev)
	const n = 64
	type tenant struct {
		in, out cuda.HostBuffer
		x, y, h cuda.Buffer
	}
	newTenant := func(seed int64) tenant {
		in, err := hm.AllocHost(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		out, err := hm.AllocHost(4 * n)
		if err != nil {
			t.Fatal(err)
		}
		if err := hm.WriteHost(in.Whole(), EncodeF32(randF32(seed, n))); err != nil {
			t.Fatal(err)
		}
		return tenant{in: in, out: out, x: f.zeroed(s, cuda.F32, n), y: f.zeroed(s, cuda.F32, n), h: f.zeroed(s, cuda.F32, n)}
	}
	step := func(tn tenant, a float32) []cuda.Command {
		t.Helper()
		in, err1 := cuda.StageIn(tn.x.Whole(), tn.in.Whole())
		cp, err2 := cuda.Copy(tn.h.Whole(), tn.x.Whole())
		z, err3 := cuda.Zero(tn.y.Whole())
		axpy, err4 := cuda.Launch(f.spec(kernels.Axpy), cuda.Linear(n, 32), cuda.BufferArg(tn.y.Whole()), cuda.BufferArg(tn.h.Whole()), cuda.F32Arg(a), cuda.I32Arg(n))
		out, err5 := cuda.StageOut(tn.out.Whole(), tn.y.Whole())
		if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
			t.Fatal(err)
		}
		return []cuda.Command{in, cp, z, axpy, out}
	}
	capture := func(cmds []cuda.Command) backend.Exec { t.Helper(); return f.instantiated(s, cmds) }
	readOut := func(tn tenant) []byte {
		t.Helper()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 4*n)
		if err := hm.ReadHost(tn.out.Whole(), b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := newTenant(1), newTenant(2)
	x := capture(step(a, 2))
	defer x.Destroy()
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	firstA := readOut(a)
	if err := x.Rebind(step(b, -0.5)); err != nil {
		t.Fatalf("Rebind of stage-in, copy, memset, kernel and stage-out nodes to another tenant's memory: %v", err)
	}
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	gotB := readOut(b)
	if again := readOut(a); !bytes.Equal(again, firstA) {
		t.Fatal("the rebound replay changed the first tenant's output")
	}
	fresh := capture(step(b, -0.5))
	defer fresh.Destroy()
	if err := hm.WriteHost(b.out.Whole(), make([]byte, 4*n)); err != nil {
		t.Fatal(err)
	}
	if err := s.Launch(fresh); err != nil {
		t.Fatal(err)
	}
	if want := readOut(b); !bytes.Equal(gotB, want) {
		t.Fatalf("the rebound executable staged out\n%v\na fresh capture of the same commands\n%v", DecodeF32(gotB), DecodeF32(want))
	}
	want := randF32(2, n)
	for i := range want {
		want[i] *= -0.5
	}
	equalF32(t, "the rebound step's output", DecodeF32(gotB), want)
	// Rebound while its launch is in flight, as a serving loop does: the
	// launch runs what it was launched with, the next one the new.
	for _, tn := range []tenant{a, b} {
		if err := hm.WriteHost(tn.out.Whole(), make([]byte, 4*n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Rebind(step(a, 2)); err != nil {
		t.Fatal(err)
	}
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	if err := x.Rebind(step(b, -0.5)); err != nil {
		t.Fatalf("Rebind with a launch in flight: %v", err)
	}
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	if got := readOut(a); !bytes.Equal(got, firstA) {
		t.Fatalf("a launch in flight took a later Rebind's parameters: tenant a's output\n%v\nwant\n%v", DecodeF32(got), DecodeF32(firstA))
	}
	equalF32(t, "the launch after the in-flight rebind", DecodeF32(readOut(b)), want)
}

// instantiated captures cmds on s, instantiates the graph and uploads the
// executable (the graph is destroyed).
func (f fixture) instantiated(s backend.Stream, cmds []cuda.Command) backend.Exec {
	t := f.t
	t.Helper()
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
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
