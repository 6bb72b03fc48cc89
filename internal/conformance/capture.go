// Conformance: stream capture, replay equal to eager execution, capture
// rules and in-place executable update.

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

// decodeStep is a model's decode step in miniature: h = W·x; h += b; y =
// rowsum(h as rows×1) … enough distinct kernels to make replay meaningful.
type decodeStep struct {
	w, x, b, h, y, p cuda.Buffer
	rows, cols       int32
}

func newDecodeStep(f fixture, s backend.Stream) decodeStep {
	const rows, cols = 64, 48
	d := decodeStep{rows: rows, cols: cols,
		w: f.alloc(cuda.F32, rows*cols), x: f.alloc(cuda.F32, cols), b: f.alloc(cuda.F32, rows),
		h: f.alloc(cuda.F32, rows), y: f.alloc(cuda.F32, rows), p: f.alloc(cuda.I32, rows)}
	f.upload(s, d.w, EncodeF32(randF32(10, rows*cols)))
	f.upload(s, d.x, EncodeF32(randF32(11, cols)))
	f.upload(s, d.b, EncodeF32(randF32(12, rows)))
	for _, z := range []cuda.Buffer{d.h, d.y, d.p} {
		c, _ := cuda.Zero(z.Whole())
		if err := s.Enqueue(c); err != nil {
			f.t.Fatal(err)
		}
	}
	return d
}

// enqueue adds the step's commands: five launches and a copy.
func (d decodeStep) enqueue(f fixture, s backend.Stream) int {
	f.launch(s, kernels.Gemv, uint32(d.rows), cuda.BufferArg(d.h.Whole()), cuda.BufferArg(d.w.Whole()), cuda.BufferArg(d.x.Whole()), cuda.I32Arg(d.rows), cuda.I32Arg(d.cols))
	f.launch(s, kernels.Axpy, uint32(d.rows), cuda.BufferArg(d.h.Whole()), cuda.BufferArg(d.b.Whole()), cuda.F32Arg(0.5), cuda.I32Arg(d.rows))
	f.launch(s, kernels.Add, uint32(d.rows), cuda.BufferArg(d.y.Whole()), cuda.BufferArg(d.y.Whole()), cuda.BufferArg(d.h.Whole()), cuda.I32Arg(d.rows))
	f.launch(s, kernels.RowSum, 1, cuda.BufferArg(d.h.Whole()), cuda.BufferArg(d.y.Whole()), cuda.I32Arg(1), cuda.I32Arg(d.rows))
	f.launch(s, kernels.Inc, uint32(d.rows), cuda.BufferArg(d.p.Whole()), cuda.I32Arg(d.rows))
	xs, _ := d.x.Region(0, 4*16)
	bs, _ := d.b.Region(4*16, 4*16)
	c, err := cuda.Copy(bs, xs)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := s.Enqueue(c); err != nil {
		f.t.Fatal(err)
	}
	return 6
}

func (d decodeStep) snapshot(f fixture, s backend.Stream) [][]byte {
	var out [][]byte
	for _, b := range []cuda.Buffer{d.b, d.h, d.y, d.p} {
		out = append(out, f.read(s, b))
	}
	return out
}

func testCaptureRecords(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	d := newDecodeStep(f, s)
	before := d.snapshot(f, s)
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if got := s.Capture(); got != backend.CaptureActive {
		t.Fatalf("capture status %v while capturing", got)
	}
	n := d.enqueue(f, s)
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Capture(); got != backend.CaptureNone {
		t.Fatalf("capture status %v after EndCapture", got)
	}
	if g.NodeCount() != n {
		t.Fatalf("graph has %d nodes, want %d", g.NodeCount(), n)
	}
	after := d.snapshot(f, s)
	for i := range before {
		if !bytes.Equal(before[i], after[i]) {
			t.Fatalf("buffer %d changed during capture: captured work must not execute", i)
		}
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	if exec.NodeCount() != n {
		t.Fatalf("executable has %d nodes, want %d", exec.NodeCount(), n)
	}
	if err := exec.Destroy(); err != nil {
		t.Fatal(err)
	}
	wantContract(t, s.Launch(exec), cuda.ErrStaleHandle)
}

// testReplayEqualsEager runs the same step eagerly on one set of buffers and
// by graph replay on another, several times, and compares every byte.
func testReplayEqualsEager(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	eager, replay := newDecodeStep(f, s), newDecodeStep(f, s)
	if err := s.BeginCapture(backend.CaptureGlobal); err != nil {
		t.Fatal(err)
	}
	replay.enqueue(f, s)
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Upload(s); err != nil {
		t.Fatal(err)
	}
	const steps = 7
	for range steps {
		eager.enqueue(f, s)
		if err := s.Launch(exec); err != nil {
			t.Fatal(err)
		}
	}
	a, b := eager.snapshot(f, s), replay.snapshot(f, s)
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("buffer %d differs between %d eager steps and %d replays", i, steps, steps)
		}
	}
	if got := f.i32s(s, replay.p)[0]; got != steps {
		t.Fatalf("replayed counter %d, want %d", got, steps)
	}
	// Launching a graph into a capturing stream is unsupported (as the H200
	// with CUDA 13 answers) and invalidates the capture.
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	wantCode(t, s.Launch(exec), codes.StreamCaptureUnsupported)
	if got := s.Capture(); got != backend.CaptureInvalidated {
		t.Fatalf("capture status %v after a graph launch into it, want invalidated", got)
	}
	_, err = s.EndCapture()
	wantCode(t, err, codes.StreamCaptureInvalidated)
}

func testCaptureRules(t *testing.T, open Open) {
	syncCalls := map[string]func(f fixture, s backend.Stream, b cuda.Buffer) error{
		"synchronize": func(_ fixture, s backend.Stream, _ cuda.Buffer) error { return s.Synchronize() },
		"query":       func(_ fixture, s backend.Stream, _ cuda.Buffer) error { return s.Query().Err },
		"readback": func(_ fixture, s backend.Stream, b cuda.Buffer) error {
			return s.Readback(b.Whole(), make([]byte, b.Size))
		},
		"global-alloc": func(f fixture, _ backend.Stream, _ cuda.Buffer) error {
			_, err := f.dev.Alloc(cuda.BufferSpec{Size: 4, Elem: cuda.I32})
			return err
		},
		"global-free":        func(f fixture, _ backend.Stream, b cuda.Buffer) error { return f.dev.Free(b) },
		"global-device-sync": func(f fixture, _ backend.Stream, _ cuda.Buffer) error { return f.dev.Synchronize() },
	}
	for name, call := range syncCalls {
		t.Run(name+"-invalidates", func(t *testing.T) {
			f := fixture{t, open(t)}
			s := f.stream()
			b := f.alloc(cuda.I32, 16)
			if err := s.BeginCapture(backend.CaptureGlobal); err != nil {
				t.Fatal(err)
			}
			f.launch(s, kernels.Inc, 16, cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
			wantCode(t, call(f, s, b), codes.StreamCaptureUnsupported)
			if got := s.Capture(); got != backend.CaptureInvalidated {
				t.Fatalf("capture status %v after %s, want invalidated", got, name)
			}
			c, _ := cuda.Zero(b.Whole())
			wantCode(t, s.Enqueue(c), codes.StreamCaptureInvalidated)
			_, err := s.EndCapture()
			wantCode(t, err, codes.StreamCaptureInvalidated)
			if !errors.Is(err, cuda.ErrCaptureInvalidated) {
				t.Fatalf("%v does not match ErrCaptureInvalidated", err)
			}
			// The stream works again after the failed capture.
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
		})
	}
	t.Run("relaxed-allows-alloc", func(t *testing.T) {
		f := fixture{t, open(t)}
		s := f.stream()
		if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
			t.Fatal(err)
		}
		b := f.alloc(cuda.I32, 16)
		f.launch(s, kernels.Inc, 16, cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		g, err := s.EndCapture()
		if err != nil || g.NodeCount() != 1 {
			t.Fatalf("relaxed capture with an alloc: %v", err)
		}
	})
	t.Run("begin-twice-end-without-begin", func(t *testing.T) {
		f := fixture{t, open(t)}
		s := f.stream()
		_, err := s.EndCapture()
		wantCode(t, err, codes.IllegalState)
		if err := s.BeginCapture(backend.CaptureGlobal); err != nil {
			t.Fatal(err)
		}
		wantCode(t, s.BeginCapture(backend.CaptureGlobal), codes.IllegalState)
		g, err := s.EndCapture()
		if err != nil || g.NodeCount() != 0 {
			t.Fatalf("empty capture: %v", err)
		}
		exec, err := g.Instantiate()
		if err != nil {
			t.Fatalf("instantiate an empty graph: %v", err)
		}
		if err := s.Launch(exec); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("other-streams-unaffected-in-relaxed", func(t *testing.T) {
		f := fixture{t, open(t)}
		s, other := f.stream(), f.stream()
		b := f.alloc(cuda.I32, 16)
		if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
			t.Fatal(err)
		}
		z, _ := cuda.Zero(b.Whole())
		if err := other.Enqueue(z); err != nil {
			t.Fatal(err)
		}
		if err := other.Synchronize(); err != nil {
			t.Fatalf("synchronizing another stream during a relaxed capture: %v", err)
		}
		if got := s.Capture(); got != backend.CaptureActive {
			t.Fatalf("capture status %v, want active", got)
		}
		if _, err := s.EndCapture(); err != nil {
			t.Fatal(err)
		}
	})
}

// testUpdate updates an executable in place: the new graph's pointers and
// host bytes take effect, and a topology or node-type change is refused
// with the executable left as it was.
func testUpdate(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	a, b := f.alloc(cuda.I32, 16), f.alloc(cuda.I32, 16)
	for _, x := range []cuda.Buffer{a, b} {
		z, _ := cuda.Zero(x.Whole())
		if err := s.Enqueue(z); err != nil {
			t.Fatal(err)
		}
	}
	capture := func(enqueue func()) backend.Graph {
		t.Helper()
		if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
			t.Fatal(err)
		}
		enqueue()
		g, err := s.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	incOf := func(x cuda.Buffer) func() {
		return func() { f.launch(s, kernels.Inc, 16, cuda.BufferArg(x.Whole()), cuda.I32Arg(16)) }
	}
	exec, err := capture(incOf(a)).Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := exec.Upload(s); err != nil {
		t.Fatal(err)
	}
	if err := exec.Update(capture(incOf(b))); err != nil {
		t.Fatalf("update to another buffer: %v", err)
	}
	if err := s.Launch(exec); err != nil {
		t.Fatal(err)
	}
	if ga, gb := f.i32s(s, a)[0], f.i32s(s, b)[0]; ga != 0 || gb != 1 {
		t.Fatalf("after the update the replay incremented a=%d b=%d, want 0 1", ga, gb)
	}
	twice := capture(func() { incOf(a)(); incOf(a)() })
	err = exec.Update(twice)
	wantCode(t, err, codes.GraphExecUpdateFailure)
	if !errors.Is(err, cuda.ErrUpdateRefused) {
		t.Fatalf("%v does not match ErrUpdateRefused", err)
	}
	zero := capture(func() {
		z, _ := cuda.Zero(a.Whole())
		if err := s.Enqueue(z); err != nil {
			t.Fatal(err)
		}
	})
	wantCode(t, exec.Update(zero), codes.GraphExecUpdateFailure)
	if err := s.Launch(exec); err != nil {
		t.Fatal(err)
	}
	if gb := f.i32s(s, b)[0]; gb != 2 {
		t.Fatalf("a refused update changed the executable: b=%d, want 2", gb)
	}
	// An upload node reads the new graph's retained host bytes.
	up := func(v byte) func() {
		return func() { f.upload(s, a, bytes.Repeat([]byte{v}, 64)) }
	}
	x2, err := capture(up(1)).Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	g7 := capture(up(7))
	if err := x2.Update(g7); err != nil {
		t.Fatalf("update of an upload: %v", err)
	}
	if err := g7.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := s.Launch(x2); err != nil {
		t.Fatal(err)
	}
	if got := f.read(s, a); !bytes.Equal(got, bytes.Repeat([]byte{7}, 64)) {
		t.Fatalf("updated upload wrote %v…, want 7s", got[:4])
	}
}
