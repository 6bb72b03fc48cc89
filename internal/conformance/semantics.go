// Conformance: memory, kernels, in-order streams, events and the free
// fence.

package conformance

import (
	"bytes"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

func testMemory(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	before := dev.Memory()
	b := f.alloc(cuda.F32, 1000)
	if b.Addr%b.Align != 0 || b.Align != cuda.DefaultAlignment {
		t.Fatalf("buffer %+v is not aligned to the default alignment", b)
	}
	mid := dev.Memory()
	if mid.InUse < before.InUse+4000 || mid.Allocations != before.Allocations+1 {
		t.Fatalf("memory after alloc %+v, before %+v", mid, before)
	}
	big, err := dev.Alloc(cuda.BufferSpec{Size: 64, Align: 4096, Elem: cuda.U8})
	if err != nil || big.Addr%4096 != 0 {
		t.Fatalf("4096-aligned alloc: %+v, %v", big, err)
	}
	for _, x := range []cuda.Buffer{b, big} {
		if err := dev.Free(x); err != nil {
			t.Fatalf("free: %v", err)
		}
	}
	if after := dev.Memory(); after.InUse != before.InUse || after.Allocations != before.Allocations {
		t.Fatalf("memory after free %+v, want %+v", after, before)
	}
	wantContract(t, dev.Free(b), cuda.ErrStaleHandle)
}

func testUploadReadback(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	b := f.alloc(cuda.U8, 300)
	data := make([]byte, 300)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f.upload(s, b, data)
	want := bytes.Clone(data)
	data[1] = 99 // the command retained its own copy
	if got := f.read(s, b); !bytes.Equal(got, want) {
		t.Fatalf("readback %v… does not match the upload %v…", got[:4], want[:4])
	}
	part, _ := b.Region(100, 50)
	z, err := cuda.Zero(part)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(z); err != nil {
		t.Fatal(err)
	}
	clear(want[100:150])
	got := f.read(s, b)
	if !bytes.Equal(got, want) {
		t.Fatalf("after zeroing [100,150): %v", got)
	}
	dst := f.alloc(cuda.U8, 300)
	cp, err := cuda.Copy(dst.Whole(), b.Whole())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(cp); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.read(s, dst), got) {
		t.Fatal("device copy differs from its source")
	}
}

func testKernels(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	const rows, cols = 37, 53
	a := randF32(1, rows*cols)
	x := randF32(2, cols)
	y := randF32(3, rows)
	bufA, bufX, bufY, out := f.alloc(cuda.F32, rows*cols), f.alloc(cuda.F32, cols), f.alloc(cuda.F32, rows), f.alloc(cuda.F32, rows)
	f.upload(s, bufA, EncodeF32(a))
	f.upload(s, bufX, EncodeF32(x))
	f.upload(s, bufY, EncodeF32(y))

	f.launch(s, kernels.Gemv, rows, cuda.BufferArg(out.Whole()), cuda.BufferArg(bufA.Whole()), cuda.BufferArg(bufX.Whole()), cuda.I32Arg(rows), cuda.I32Arg(cols))
	want := make([]float32, rows)
	for r := range rows {
		var acc float32
		for c := range cols {
			acc = float32(acc + float32(a[r*cols+c]*x[c]))
		}
		want[r] = acc
	}
	equalF32(t, "gemv", f.f32s(s, out), want)

	f.launch(s, kernels.RowSum, rows, cuda.BufferArg(out.Whole()), cuda.BufferArg(bufA.Whole()), cuda.I32Arg(rows), cuda.I32Arg(cols))
	for r := range rows {
		var acc float32
		for c := range cols {
			acc = float32(acc + a[r*cols+c])
		}
		want[r] = acc
	}
	equalF32(t, "row_sum", f.f32s(s, out), want)

	f.launch(s, kernels.Axpy, rows, cuda.BufferArg(bufY.Whole()), cuda.BufferArg(out.Whole()), cuda.F32Arg(0.75), cuda.I32Arg(rows))
	for r := range rows {
		want[r] = float32(float32(0.75*want[r]) + y[r])
	}
	equalF32(t, "axpy", f.f32s(s, bufY), want)

	f.launch(s, kernels.Add, rows, cuda.BufferArg(out.Whole()), cuda.BufferArg(bufY.Whole()), cuda.BufferArg(bufY.Whole()), cuda.I32Arg(rows))
	for r := range rows {
		want[r] = float32(want[r] + want[r])
	}
	equalF32(t, "add", f.f32s(s, out), want)

	half, _ := out.Region(0, 4*20)
	f.launch(s, kernels.Fill, 20, cuda.BufferArg(half), cuda.F32Arg(-2.5), cuda.I32Arg(20))
	for r := range 20 {
		want[r] = -2.5
	}
	equalF32(t, "fill", f.f32s(s, out), want)
}

// testInOrder enqueues a chain where every step reads the last one's output.
func testInOrder(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	const n = 1000
	p := f.alloc(cuda.I32, n)
	z, _ := cuda.Zero(p.Whole())
	if err := s.Enqueue(z); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		f.launch(s, kernels.Inc, n, cuda.BufferArg(p.Whole()), cuda.I32Arg(n))
	}
	for i, v := range f.i32s(s, p) {
		if v != 50 {
			t.Fatalf("element %d = %d after 50 in-order increments", i, v)
		}
	}
}

// testStreams runs independent chains on several streams at once.
func testStreams(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	const n, streams = 512, 4
	ss := make([]backend.Stream, streams)
	bs := make([]cuda.Buffer, streams)
	for i := range ss {
		ss[i], bs[i] = f.stream(), f.alloc(cuda.I32, n)
		z, _ := cuda.Zero(bs[i].Whole())
		if err := ss[i].Enqueue(z); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 20 {
		for i := range ss {
			if round < 5*(i+1) {
				f.launch(ss[i], kernels.Inc, n, cuda.BufferArg(bs[i].Whole()), cuda.I32Arg(n))
			}
		}
	}
	if err := dev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range ss {
		if q := ss[i].Query(); q.State != backend.FenceComplete {
			t.Fatalf("stream %d after device synchronize: %v %v", i, q.State, q.Err)
		}
		if got := f.i32s(ss[i], bs[i])[n-1]; got != int32(5*(i+1)) {
			t.Fatalf("stream %d counted %d, want %d", i, got, 5*(i+1))
		}
	}
}

func testEmptyStream(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	if q := s.Query(); q.State != backend.FenceComplete || q.Err != nil {
		t.Fatalf("query of an empty stream: %v %v", q.State, q.Err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("synchronize of an empty stream: %v", err)
	}
	ev, err := s.Record()
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if q := ev.Query(); q.State != backend.FenceComplete {
		t.Fatalf("event on an empty stream: %v", q.State)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	wantContract(t, s.Synchronize(), cuda.ErrStaleHandle)
}

func testEvents(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	p := f.zeroed(s, cuda.I32, 4096)
	start := f.record(s, true)
	for range 20 {
		f.launch(s, kernels.Inc, 4096, cuda.BufferArg(p.Whole()), cuda.I32Arg(4096))
	}
	end := f.record(s, true)
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, ev := range []backend.Event{start, end} {
		if q := ev.Query(); q.State != backend.FenceComplete {
			t.Fatalf("event after synchronize: %v %v", q.State, q.Err)
		}
	}
	d, err := end.Elapsed(start)
	if err != nil || d < 0 {
		t.Fatalf("elapsed %v, %v", d, err)
	}
	if got := f.i32s(s, p)[4095]; got != 20 {
		t.Fatalf("count %d after the end event, want 20", got)
	}
}

// testEventReuse checks fence events (no timing) and the release-and-reuse
// contract: a released handle is stale, a reused event tracks only its new
// recording, and a fence cannot be timed.
func testEventReuse(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	p := f.zeroed(s, cuda.I32, 4096)
	start, fence := f.record(s, true), f.record(s, false)
	if err := fence.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if q := fence.Query(); q.State != backend.FenceComplete || q.Err != nil {
		t.Fatalf("fence after synchronize: %v %v", q.State, q.Err)
	}
	_, err := fence.Elapsed(start)
	wantCode(t, err, codes.InvalidHandle)
	_, err = start.Elapsed(fence)
	wantCode(t, err, codes.InvalidHandle)

	// Released handles are stale; a second release does nothing.
	fence.Release()
	fence.Release()
	q := fence.Query()
	wantContract(t, q.Err, cuda.ErrStaleHandle)
	if q.State != backend.FenceIndeterminate {
		t.Fatalf("query of a released event: %v", q.State)
	}
	wantContract(t, fence.Synchronize(), cuda.ErrStaleHandle)
	start.Release()
	_, err = start.Elapsed(start)
	wantContract(t, err, cuda.ErrStaleHandle)

	// Cycles of record, wait, release: reused events time and fence only
	// their own recording, in stream order.
	for round := 1; round <= 50; round++ {
		begin := f.record(s, true)
		for range 4 {
			f.launch(s, kernels.Inc, 4096, cuda.BufferArg(p.Whole()), cuda.I32Arg(4096))
		}
		end, done := f.record(s, true), f.record(s, false)
		if err := done.Synchronize(); err != nil {
			t.Fatal(err)
		}
		for _, ev := range []backend.Event{begin, end, done} {
			if q := ev.Query(); q.State != backend.FenceComplete || q.Err != nil {
				t.Fatalf("round %d: event after its fence: %v %v", round, q.State, q.Err)
			}
		}
		if d, err := end.Elapsed(begin); err != nil || d < 0 {
			t.Fatalf("round %d: elapsed %v, %v", round, d, err)
		}
		begin.Release()
		end.Release()
		done.Release()
	}
	if got := f.i32s(s, p)[4095]; got != 200 {
		t.Fatalf("count %d after 50 rounds of 4 increments, want 200", got)
	}
	// A pending event is tracked by a reused one correctly too: record,
	// release at once (nothing waits), record again after more work.
	f.record(s, false).Release()
	f.launch(s, kernels.Inc, 4096, cuda.BufferArg(p.Whole()), cuda.I32Arg(4096))
	second := f.record(s, false)
	if err := second.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if got := f.i32s(s, p)[4095]; got != 201 {
		t.Fatalf("count %d after the reused fence, want 201", got)
	}
	if err := s.Destroy(); err != nil {
		t.Fatal(err)
	}
	second.Release() // after the stream is gone: nothing to reuse, no fault
}

// testFreeFencesWork: work enqueued or replayed after Free began never
// touches the freed buffer: an executable captured over a buffer that was
// freed is refused at launch (the caller's error), eager work naming it is
// refused at enqueue, and the device stays healthy (on a GPU, a replay over
// freed memory would poison the context).
func testFreeFencesWork(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	b := f.zeroed(s, cuda.I32, 64)
	inc, err := cuda.Launch(f.spec(kernels.Inc), cuda.Linear(64, 64), cuda.BufferArg(b.Whole()), cuda.I32Arg(64))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(inc); err != nil {
		t.Fatal(err)
	}
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	x, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Launch(x); err != nil {
		t.Fatal(err)
	}
	if err := dev.Free(b); err != nil {
		t.Fatal(err)
	}
	wantContract(t, s.Launch(x), cuda.ErrStaleHandle)
	wantContract(t, s.Enqueue(inc), cuda.ErrStaleHandle)
	wantContract(t, dev.CheckBuffer(b), cuda.ErrStaleHandle)
	if err := s.Synchronize(); err != nil || dev.Err() != nil {
		t.Fatalf("after refusing work over a freed buffer: %v, device %v", err, dev.Err())
	}
	_ = x.Destroy()
	_ = g.Destroy()
}
