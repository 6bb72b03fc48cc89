package sim_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// gather is a test kernel whose reads depend on its data, as an attention
// kernel's on its position: out[i] = in[idx[i]] for i < n.
const gather = "gather_f32"

// discard is a test kernel that reads its input and ignores its value:
// out[i] = in[i] - in[i] (every pattern the check tries is finite).
const discard = "discard_f32"

func testKernels() kernels.Registry {
	buf := func(name string, e cuda.ElementType, a cuda.Access) cuda.Param {
		return cuda.Param{Name: name, Kind: cuda.ParamBuffer, Elem: e, Access: a}
	}
	n := cuda.Param{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I32}
	return kernels.Builtin().With(kernels.Registry{
		gather: {
			Spec: cuda.KernelSpec{Name: gather, Params: []cuda.Param{buf("out", cuda.F32, cuda.AccessWrite), buf("in", cuda.F32, cuda.AccessRead), buf("idx", cuda.I32, cuda.AccessRead), n}},
			Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
				for i := range int(a[3].I32()) {
					j := int(int32(binary.LittleEndian.Uint32(m[2][4*i:])))
					if j < 0 || 4*j+4 > len(m[1]) {
						return kernels.ErrIllegalAddress
					}
					copy(m[0][4*i:4*i+4], m[1][4*j:4*j+4])
				}
				return nil
			},
		},
		discard: {
			Spec: cuda.KernelSpec{Name: discard, Params: []cuda.Param{buf("out", cuda.F32, cuda.AccessWrite), buf("in", cuda.F32, cuda.AccessRead), n}},
			Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
				for i := range int(a[2].I32()) {
					v := math.Float32frombits(binary.LittleEndian.Uint32(m[1][4*i:]))
					binary.LittleEndian.PutUint32(m[0][4*i:], math.Float32bits(v-v))
				}
				return nil
			},
		},
	})
}

// checkRig is a zero-cost device with the test kernels, checked or not.
func checkRig(t testing.TB, on bool) rig {
	return newRig(t, sim.Config{Clock: sim.ClockZeroCost, InitCheck: on, Kernels: testKernels(), Memory: 1 << 24})
}

func (r rig) alloc(n int, e cuda.ElementType) cuda.Buffer {
	r.t.Helper()
	b, err := r.dev.Alloc(cuda.BufferSpec{Size: uint64(n) * e.Size(), Elem: e})
	if err != nil {
		r.t.Fatalf("Alloc of %d %v: got err %v, want nil", n, e, err)
	}
	return b
}

// region is elements [from, to) of b.
func (r rig) region(b cuda.Buffer, from, to int) cuda.Region {
	r.t.Helper()
	size := b.Elem.Size()
	reg, err := b.Region(uint64(from)*size, uint64(to-from)*size)
	if err != nil {
		r.t.Fatalf("Region [%d, %d) of buffer %d: got err %v, want nil", from, to, b.ID, err)
	}
	return reg
}

// upload writes the 4-byte values vs to elements [from, from+len(vs)) of b.
func (r rig) upload(s backend.Stream, b cuda.Buffer, from int, vs ...uint32) {
	r.t.Helper()
	data := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(data[4*i:], v)
	}
	c, err := cuda.Upload(r.region(b, from, from+len(vs)), data)
	if err != nil {
		r.t.Fatalf("cuda.Upload: got err %v, want nil", err)
	}
	r.enqueue(s, c)
}

// floats are n float32 values 1, 2, 3, ... as bits.
func floats(n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = math.Float32bits(float32(i + 1))
	}
	return out
}

func (r rig) launch(name string, n int, args ...cuda.Arg) cuda.Command {
	r.t.Helper()
	c, err := cuda.LaunchNamed(r.dev.Kernels(), name, cuda.Linear(uint32(n), 64), args...)
	if err != nil {
		r.t.Fatalf("launch %s: got err %v, want nil", name, err)
	}
	return c
}

// axpy is y[:n] += 2*x[:n] over regions y and x.
func (r rig) axpy(y, x cuda.Region, n int) cuda.Command {
	return r.launch(kernels.Axpy, n, cuda.BufferArg(y), cuda.BufferArg(x), cuda.F32Arg(2), cuda.I32Arg(int32(n)))
}

func (r rig) zero(s backend.Stream, reg cuda.Region) {
	r.t.Helper()
	z, err := cuda.Zero(reg)
	if err != nil {
		r.t.Fatalf("cuda.Zero: got err %v, want nil", err)
	}
	r.enqueue(s, z)
}

// wantUninit checks that err reports a read by op (and name) of byte off
// of buffer b, and classifies as a stream's error that is not sticky.
func wantUninit(t testing.TB, what string, err error, op, name string, b cuda.Buffer, off uint64) {
	t.Helper()
	var ue *sim.UninitializedReadError
	if !errors.As(err, &ue) || !errors.Is(err, sim.ErrUninitializedRead) {
		t.Fatalf("%s: got err %v (%T), want a *sim.UninitializedReadError wrapping sim.ErrUninitializedRead", what, err, err)
	}
	want := sim.UninitializedReadError{Op: op, Name: name, Buffer: b.ID, Offset: off}
	if *ue != want {
		t.Fatalf("%s: got %+v, want %+v", what, *ue, want)
	}
	c := cuda.Classify(err)
	if c.Blame != cuda.BlameStream || c.Sticky || c.NotSubmitted || c.Code != codes.UninitializedRead {
		t.Fatalf("%s: classified %+v, want the stream's, not sticky, submitted, code %v", what, c, codes.UninitializedRead)
	}
}

func wantSync(t testing.TB, what string, s backend.Stream) {
	t.Helper()
	if err := s.Synchronize(); err != nil {
		t.Fatalf("%s: Synchronize: got err %v, want nil", what, err)
	}
}

func (r rig) read(s backend.Stream, reg cuda.Region) ([]byte, error) {
	out := make([]byte, reg.Length)
	err := s.Readback(reg, out)
	return out, err
}

func TestInitCheckKernelReadsNeverWritten(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, y.Whole())
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
	wantUninit(t, "axpy of a never-written x", s.Synchronize(), "launch", kernels.Axpy, x, 0)
	if err := r.dev.Err(); err != nil {
		t.Fatalf("device Err after the report: got %v, want nil (not poisoned)", err)
	}
	wantSync(t, "once reported", s)

	r.upload(s, x, 0, floats(64)...) // the same launch, now over written bytes
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
	got, err := r.read(s, r.region(y, 63, 64))
	if err != nil {
		t.Fatalf("Readback after the upload: got err %v, want nil", err)
	}
	// y was 2*0xA5A5A5A5 (a tiny float, lost in rounding) + 0, then + 2*64.
	if v := math.Float32frombits(binary.LittleEndian.Uint32(got)); v != 128 {
		t.Fatalf("y[63]: got %v, want 128", v)
	}

	u := r.alloc(16, cuda.I32) // read-write: inc of a buffer never written
	r.enqueue(s, r.inc(u))
	wantUninit(t, "inc of a never-written buffer", s.Synchronize(), "launch", kernels.Inc, u, 0)
}

func TestInitCheckPartialWriteReportsFirstUnwritten(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, y.Whole())
	r.upload(s, x, 0, floats(16)...)
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
	wantUninit(t, "axpy past a 16-element upload", s.Synchronize(), "launch", kernels.Axpy, x, 64)

	r.upload(s, x, 16, floats(24)...) // one element (40) left unwritten in the middle
	r.upload(s, x, 41, floats(23)...)
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
	wantUninit(t, "axpy over a hole", s.Synchronize(), "launch", kernels.Axpy, x, 160)

	// A read-write y whose tail was never written: y is reported.
	y2 := r.alloc(64, cuda.F32)
	r.zero(s, r.region(y2, 0, 32))
	r.upload(s, x, 40, 0)
	r.enqueue(s, r.axpy(y2.Whole(), x.Whole(), 64))
	wantUninit(t, "axpy into a half-written y", s.Synchronize(), "launch", kernels.Axpy, y2, 128)
}

func TestInitCheckReadingTheWrittenPrefixPasses(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, y.Whole())
	r.upload(s, x, 0, floats(16)...)
	// Both regions are whole, 48 elements of x never written; the kernel
	// reads 16.
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 16))
	wantSync(t, "axpy of the written prefix", s)
	got, err := r.read(s, r.region(y, 0, 16))
	if err != nil {
		t.Fatalf("Readback: got err %v, want nil", err)
	}
	for i := range 16 {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:])); v != float32(2*(i+1)) {
			t.Fatalf("y[%d]: got %v, want %v", i, v, 2*(i+1))
		}
	}
}

// TestInitCheckSubRegions: regions that start inside their buffers, the
// read one partly written.
func TestInitCheckSubRegions(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, r.region(y, 16, 48))
	r.upload(s, x, 32, floats(8)...)
	r.enqueue(s, r.axpy(r.region(y, 16, 48), r.region(x, 32, 64), 8))
	wantSync(t, "axpy of the written part", s)
	r.enqueue(s, r.axpy(r.region(y, 16, 48), r.region(x, 32, 64), 16))
	wantUninit(t, "axpy past the written part", s.Synchronize(), "launch", kernels.Axpy, x, 160)
}

// TestInitCheckDataDependentReads: a gather reads what its indices say;
// only a read of a byte never written that its result depends on is
// reported, at that byte.
func TestInitCheckDataDependentReads(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	out, in, idx := r.alloc(4, cuda.F32), r.alloc(64, cuda.F32), r.alloc(4, cuda.I32)
	r.upload(s, in, 0, floats(10)...)
	r.upload(s, in, 20, floats(10)...)
	g := r.launch(gather, 1, cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(idx.Whole()), cuda.I32Arg(4))
	r.upload(s, idx, 0, 0, 5, 25, 29)
	r.enqueue(s, g)
	wantSync(t, "gather of written elements", s)
	r.upload(s, idx, 0, 0, 5, 25, 12)
	r.enqueue(s, g)
	wantUninit(t, "gather of element 12", s.Synchronize(), "launch", gather, in, 48)

	// Indices never written, but none read.
	idx2 := r.alloc(4, cuda.I32)
	r.enqueue(s, r.launch(gather, 1, cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(idx2.Whole()), cuda.I32Arg(0)))
	wantSync(t, "gather of no elements", s)

	// Indices never written, and read: the garbage points outside the
	// allocation, and the kernel faults as it would unchecked (the sticky
	// illegal address); its error says what it read first.
	r.enqueue(s, r.launch(gather, 1, cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(idx2.Whole()), cuda.I32Arg(4)))
	err := s.Synchronize()
	if !errors.Is(err, cuda.ErrIllegalAddress) || !strings.Contains(err.Error(), "byte 0 of buffer "+strconv.FormatUint(idx2.ID, 10)+" was never written") {
		t.Fatalf("gather of never-written indices: got err %v, want the illegal address, saying it read byte 0 of buffer %d unwritten", err, idx2.ID)
	}
}

// TestInitCheckIgnoredValueNotReported: unlike compute-sanitizer's
// initcheck, a read whose value affects no output is not reported.
func TestInitCheckIgnoredValueNotReported(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	out, in := r.alloc(8, cuda.F32), r.alloc(8, cuda.F32)
	r.enqueue(s, r.launch(discard, 8, cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.I32Arg(8)))
	wantSync(t, "a kernel that ignores what it read", s)
	if _, err := r.read(s, out.Whole()); err != nil {
		t.Fatalf("Readback of its output: got err %v, want nil (a kernel's write region counts as written)", err)
	}
}

func TestInitCheckCopies(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	src, dst := r.alloc(32, cuda.I32), r.alloc(32, cuda.I32)
	cp, err := cuda.Copy(dst.Whole(), src.Whole())
	if err != nil {
		t.Fatalf("cuda.Copy: got err %v, want nil", err)
	}
	r.enqueue(s, cp)
	wantUninit(t, "copy of a never-written source", s.Synchronize(), "copy", "", src, 0)
	if _, err := r.read(s, dst.Whole()); err != nil {
		t.Fatalf("Readback of the copy's destination: got err %v, want nil (written by the copy)", err)
	}
	r.upload(s, src, 0, make([]uint32, 20)...)
	r.enqueue(s, cp)
	wantUninit(t, "copy past a partial upload", s.Synchronize(), "copy", "", src, 80)
	r.upload(s, src, 20, make([]uint32, 12)...)
	r.enqueue(s, cp)
	wantSync(t, "copy of a written source", s)

	other := r.alloc(32, cuda.I32)
	got, err := r.read(s, other.Whole())
	wantUninit(t, "Readback of never-written bytes", err, "readback", "", other, 0)
	if !bytes.Equal(got, bytes.Repeat([]byte{0xA5}, len(got))) {
		t.Fatalf("Readback's destination: got % x, want Alloc's fill byte 0xa5 (the read is made, and reported)", got[:8])
	}
	r.upload(s, other, 0, make([]uint32, 31)...)
	_, err = r.read(s, other.Whole())
	wantUninit(t, "Readback past a partial upload", err, "readback", "", other, 124)

	h, err := r.dev.AllocHost(128)
	if err != nil {
		t.Fatalf("AllocHost: got err %v, want nil", err)
	}
	hr, _ := h.Region(0, 128)
	out, err := cuda.StageOut(hr, other.Whole())
	if err != nil {
		t.Fatalf("cuda.StageOut: got err %v, want nil", err)
	}
	r.enqueue(s, out)
	wantUninit(t, "stage_out of never-written bytes", s.Synchronize(), "stage_out", "", other, 124)
	in, err := cuda.StageIn(other.Whole(), hr)
	if err != nil {
		t.Fatalf("cuda.StageIn: got err %v, want nil", err)
	}
	r.enqueue(s, in)
	r.enqueue(s, out)
	wantSync(t, "stage_out after a stage_in wrote it", s)
}

// TestInitCheckWritesCount: a memset, a copy's destination and a kernel's
// write region all count as written.
func TestInitCheckWritesCount(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, y.Whole())
	r.zero(s, x.Whole())
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
	wantSync(t, "axpy after memsets", s)

	f := r.alloc(64, cuda.F32)
	r.enqueue(s, r.launch(kernels.Fill, 64, cuda.BufferArg(f.Whole()), cuda.F32Arg(1), cuda.I32Arg(64)))
	c := r.alloc(64, cuda.F32)
	cp, _ := cuda.Copy(c.Whole(), f.Whole())
	r.enqueue(s, cp)
	r.enqueue(s, r.axpy(c.Whole(), f.Whole(), 64))
	wantSync(t, "axpy of a filled buffer into a copied one", s)
	if _, err := r.read(s, c.Whole()); err != nil {
		t.Fatalf("Readback: got err %v, want nil", err)
	}
}

func TestInitCheckGraphReplay(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, y.Whole())
	_, ex := r.captured(s, r.axpy(y.Whole(), x.Whole(), 64), r.axpy(y.Whole(), x.Whole(), 64))
	if err := s.Launch(ex); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	wantUninit(t, "replay over a never-written x", s.Synchronize(), "launch", kernels.Axpy, x, 0)
	r.upload(s, x, 0, floats(64)...)
	if err := s.Launch(ex); err != nil {
		t.Fatalf("Launch: got err %v, want nil", err)
	}
	wantSync(t, "replay after the upload", s)
}

// TestInitCheckStreamReport: the report is the stream's, at the work's
// point: fences before it complete, fences after it answer it until a
// Synchronize returned it; other streams and the device are untouched.
func TestInitCheckStreamReport(t *testing.T) {
	r := checkRig(t, true)
	s, other := r.stream(), r.stream()
	y, x := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32)
	r.zero(s, y.Whole())
	before := r.record(s)
	r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
	after := r.record(s)
	if err := before.Synchronize(); err != nil {
		t.Fatalf("event before the read: Synchronize got err %v, want nil", err)
	}
	wantState(t, "event before the read", before.Query(), backend.FenceComplete)
	wantUninit(t, "event after the read: Synchronize", after.Synchronize(), "launch", kernels.Axpy, x, 0)
	q := after.Query()
	wantState(t, "event after the read", q, backend.FenceIndeterminate)
	wantUninit(t, "event after the read: Query", q.Err, "launch", kernels.Axpy, x, 0)
	wantUninit(t, "stream Query", s.Query().Err, "launch", kernels.Axpy, x, 0)
	b := r.counter(other, 4)
	r.enqueue(other, r.inc(b))
	wantSync(t, "another stream", other)
	if err := backend.Must(r.dev).Synchronize(); err != nil {
		t.Fatalf("device Synchronize: got err %v, want nil", err)
	}
	wantUninit(t, "stream Synchronize", s.Synchronize(), "launch", kernels.Axpy, x, 0)
	wantState(t, "stream Query once reported", s.Query(), backend.FenceComplete)
	wantState(t, "event after the read, once reported", after.Query(), backend.FenceComplete)
	r.enqueue(s, r.inc(b))
	e := r.record(s)
	if err := e.Synchronize(); err != nil {
		t.Fatalf("an event after new work: Synchronize got err %v, want nil", err)
	}
	wantState(t, "an event after new work", e.Query(), backend.FenceComplete)
}

func TestInitCheckLibraryCall(t *testing.T) {
	r := checkRig(t, true)
	s := r.stream()
	in, out := r.alloc(16, cuda.I32), r.alloc(16, cuda.I32)
	sum := &cuda.LibraryCall{Name: "sum_i32",
		Regions: []cuda.Touch{{Region: out.Whole(), Access: cuda.AccessWrite}, {Region: in.Whole(), Access: cuda.AccessRead}},
		Reference: func(mem [][]byte) error {
			var t uint32
			for i := 0; i+4 <= len(mem[1]); i += 4 {
				t += binary.LittleEndian.Uint32(mem[1][i:])
			}
			binary.LittleEndian.PutUint32(mem[0], t)
			return nil
		}}
	c, err := cuda.Call(sum)
	if err != nil {
		t.Fatalf("cuda.Call: got err %v, want nil", err)
	}
	r.upload(s, in, 0, make([]uint32, 8)...)
	r.enqueue(s, c)
	wantUninit(t, "a call summing a half-written buffer", s.Synchronize(), "call", "sum_i32", in, 32)

	// A call that writes its read-write scratch before it reads it.
	scratch := r.alloc(16, cuda.I32)
	twice := &cuda.LibraryCall{Name: "scratch_first",
		Regions: []cuda.Touch{{Region: out.Whole(), Access: cuda.AccessWrite}, {Region: scratch.Whole(), Access: cuda.AccessReadWrite}},
		Reference: func(mem [][]byte) error {
			clear(mem[1])
			copy(mem[0], mem[1])
			return nil
		}}
	c, err = cuda.Call(twice)
	if err != nil {
		t.Fatalf("cuda.Call: got err %v, want nil", err)
	}
	r.enqueue(s, c)
	wantSync(t, "a call that writes its scratch first", s)
}

// TestInitCheckOffChangesNothing: the same program on a device without the
// check and one with it leaves the same bytes; only the checked one
// reports, and the unchecked one reports nothing.
func TestInitCheckOffChangesNothing(t *testing.T) {
	t.Setenv(sim.InitCheckEnv, "") // off means off, whatever the test command set
	run := func(on bool) ([]byte, []error) {
		r := checkRig(t, on)
		s := r.stream()
		y, x, idx := r.alloc(64, cuda.F32), r.alloc(64, cuda.F32), r.alloc(4, cuda.I32)
		r.upload(s, x, 0, floats(16)...)
		r.zero(s, r.region(y, 0, 32))
		r.enqueue(s, r.axpy(y.Whole(), x.Whole(), 64))
		r.upload(s, idx, 0, 1, 2, 50, 3)
		r.enqueue(s, r.launch(gather, 1, cuda.BufferArg(r.region(y, 60, 64)), cuda.BufferArg(x.Whole()), cuda.BufferArg(idx.Whole()), cuda.I32Arg(4)))
		cp, _ := cuda.Copy(r.region(y, 32, 48), r.region(x, 40, 56))
		r.enqueue(s, cp)
		errs := []error{s.Synchronize()}
		ys, err := r.read(s, y.Whole()) // y is written whole, by axpy's read-write region
		if err != nil {
			t.Fatalf("Readback of y (check %v): got err %v, want nil", on, err)
		}
		xs, err := r.read(s, x.Whole())
		return append(ys, xs...), append(errs, err)
	}
	off, offErrs := run(false)
	on, onErrs := run(true)
	if !bytes.Equal(off, on) {
		t.Fatalf("bytes differ with the check on:\n off % x\n on  % x", off, on)
	}
	for i, err := range offErrs {
		if err != nil {
			t.Fatalf("unchecked device, call %d: got err %v, want nil", i, err)
		}
	}
	for i, err := range onErrs {
		if !errors.Is(err, sim.ErrUninitializedRead) {
			t.Fatalf("checked device, call %d: got err %v, want a report", i, err)
		}
	}
}
