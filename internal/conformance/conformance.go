// Package conformance is the behaviour every [backend.Device] backend must
// share, as one suite: ordering, events, capture rules, replay == eager
// bytes, error classes, ownership and bounds checks, and a sticky fault. The
// simulated device runs it in CI; the real device runs it on the GPU. Where
// the two disagree the GPU is right, and the simulator is fixed.
//
// # Usage
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, func(t *testing.T) backend.Device { return openMyDevice(t) })
//	}
//
// The device must launch the kernels of kernels.Builtin and
// kernels.FaultInjection (the sticky-fault subtest writes out of bounds on
// purpose); no device a tenant reaches registers the latter.
//
// Open must return a fresh device instance on every call (the suite poisons
// one on purpose and needs two at once for the ownership checks), and may
// register its Close with t.Cleanup. The suite only uses blocking calls to
// wait (Synchronize, Readback), so it runs under any clock.
package conformance

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// Open returns a fresh device for one subtest.
type Open func(t *testing.T) backend.Device

// Run runs the whole suite against the backend that open returns. Every
// subtest binds its goroutine to the devices it opens, as a lane does.
func Run(t *testing.T, opener Open) {
	open := func(t *testing.T) backend.Device {
		t.Helper()
		dev := opener(t)
		unbind, err := dev.BindThread()
		if err != nil {
			t.Fatalf("bind thread: %v", err)
		}
		t.Cleanup(unbind)
		return dev
	}
	t.Run("memory", func(t *testing.T) { testMemory(t, open(t)) })
	t.Run("free-fences-work", func(t *testing.T) { testFreeFencesWork(t, open(t)) })
	t.Run("upload-readback", func(t *testing.T) { testUploadReadback(t, open(t)) })
	t.Run("kernels-match-reference", func(t *testing.T) { testKernels(t, open(t)) })
	t.Run("in-order", func(t *testing.T) { testInOrder(t, open(t)) })
	t.Run("streams-independent", func(t *testing.T) { testStreams(t, open(t)) })
	t.Run("empty-stream", func(t *testing.T) { testEmptyStream(t, open(t)) })
	t.Run("events", func(t *testing.T) { testEvents(t, open(t)) })
	t.Run("event-reuse", func(t *testing.T) { testEventReuse(t, open(t)) })
	t.Run("capture-records", func(t *testing.T) { testCaptureRecords(t, open(t)) })
	t.Run("replay-equals-eager", func(t *testing.T) { testReplayEqualsEager(t, open(t)) })
	t.Run("capture-rules", func(t *testing.T) { testCaptureRules(t, open) })
	t.Run("exec-update", func(t *testing.T) { testUpdate(t, open(t)) })
	t.Run("exec-rebind", func(t *testing.T) { testRebind(t, open(t)) })
	t.Run("exec-rebind-copies", func(t *testing.T) { testRebindCopies(t, open(t)) })
	t.Run("host-staging", func(t *testing.T) { testStaging(t, open(t)) })
	t.Run("pin-in-place", func(t *testing.T) { testPinInPlace(t, open(t)) })
	t.Run("out-of-memory", func(t *testing.T) { testOutOfMemory(t, open(t)) })
	t.Run("ownership", func(t *testing.T) { testOwnership(t, open(t), open(t)) })
	t.Run("bounds", func(t *testing.T) { testBounds(t, open(t)) })
	t.Run("user-module", func(t *testing.T) { testUserModule(t, open(t)) })
	t.Run("user-module-declarations", func(t *testing.T) { testUserModuleDeclarations(t, open(t)) })
	t.Run("wide-scalars", func(t *testing.T) { testWideScalars(t, open(t)) })
	t.Run("struct-params", func(t *testing.T) { testStructParams(t, open(t)) })
	t.Run("sticky-fault", func(t *testing.T) { testStickyFault(t, open(t)) })
}

// fixture bundles a device with the helpers the tests share.
type fixture struct {
	t   *testing.T
	dev backend.Device
}

func (f fixture) alloc(elem cuda.ElementType, n int) cuda.Buffer {
	f.t.Helper()
	b, err := f.dev.Alloc(cuda.BufferSpec{Size: uint64(n) * elem.Size(), Elem: elem})
	if err != nil {
		f.t.Fatalf("alloc %d %v: %v", n, elem, err)
	}
	return b
}

// zeroed allocates n elements and enqueues their zeroing on s.
func (f fixture) zeroed(s backend.Stream, elem cuda.ElementType, n int) cuda.Buffer {
	f.t.Helper()
	b := f.alloc(elem, n)
	z, _ := cuda.Zero(b.Whole())
	if err := s.Enqueue(z); err != nil {
		f.t.Fatal(err)
	}
	return b
}

// record records a timing event (timed) or a fence on s.
func (f fixture) record(s backend.Stream, timed bool) backend.Event {
	f.t.Helper()
	record := s.RecordFence
	if timed {
		record = s.Record
	}
	e, err := record()
	if err != nil {
		f.t.Fatal(err)
	}
	return e
}

func (f fixture) stream() backend.Stream {
	f.t.Helper()
	s, err := f.dev.NewStream()
	if err != nil {
		f.t.Fatalf("new stream: %v", err)
	}
	return s
}

func (f fixture) spec(name string) *cuda.KernelSpec {
	f.t.Helper()
	k, ok := f.dev.Kernels().Kernel(name)
	if !ok {
		f.t.Fatalf("device has no kernel %s", name)
	}
	return &k
}

func (f fixture) launch(s backend.Stream, name string, threads uint32, args ...cuda.Arg) {
	f.t.Helper()
	c, err := cuda.Launch(f.spec(name), cuda.Linear(threads, 128), args...)
	if err != nil {
		f.t.Fatalf("build %s: %v", name, err)
	}
	if err := s.Enqueue(c); err != nil {
		f.t.Fatalf("enqueue %s: %v", name, err)
	}
}

// replay captures what enqueue enqueues on s into a graph and launches
// its executable times times.
func (f fixture) replay(s backend.Stream, times int, enqueue func()) {
	f.t.Helper()
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		f.t.Fatalf("BeginCapture: got err %v, want nil", err)
	}
	enqueue()
	g, err := s.EndCapture()
	if err != nil {
		f.t.Fatalf("EndCapture: got err %v, want nil", err)
	}
	exec, err := g.Instantiate()
	if err != nil {
		f.t.Fatalf("Instantiate: got err %v, want nil", err)
	}
	_ = g.Destroy()
	defer func() { _ = exec.Destroy() }()
	for range times {
		if err := s.Launch(exec); err != nil {
			f.t.Fatalf("Launch(graph): got err %v, want nil", err)
		}
	}
}

func (f fixture) upload(s backend.Stream, b cuda.Buffer, data []byte) {
	f.t.Helper()
	c, err := cuda.Upload(b.Whole(), data)
	if err != nil {
		f.t.Fatalf("build upload: %v", err)
	}
	if err := s.Enqueue(c); err != nil {
		f.t.Fatalf("enqueue upload: %v", err)
	}
}

func (f fixture) read(s backend.Stream, b cuda.Buffer) []byte {
	f.t.Helper()
	out := make([]byte, b.Size)
	if err := s.Readback(b.Whole(), out); err != nil {
		f.t.Fatalf("readback: %v", err)
	}
	return out
}

func (f fixture) f32s(s backend.Stream, b cuda.Buffer) []float32 { return DecodeF32(f.read(s, b)) }

func (f fixture) i32s(s backend.Stream, b cuda.Buffer) []int32 {
	raw := f.read(s, b)
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[i*4:]))
	}
	return out
}

// EncodeF32 returns the little-endian bytes of v.
func EncodeF32(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[i*4:], math.Float32bits(x))
	}
	return out
}

// DecodeF32 reads little-endian float32s.
func DecodeF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[i*4:]))
	}
	return out
}

// randF32 returns n small random floats from a fixed seed.
func randF32(seed int64, n int) []float32 {
	r := rand.New(rand.NewSource(seed))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(r.Intn(2001)-1000) / 128
	}
	return out
}

func wantCode(t *testing.T, err error, code cuda.Code) {
	t.Helper()
	var e *cuda.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("got error %v, want code %v", err, code)
	}
}

func wantContract(t *testing.T, err error, sentinel error) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("got error %v, want %v", err, sentinel)
	}
	var e *cuda.Error
	if !errors.As(err, &e) || e.Code != codes.RuntimeContract {
		t.Fatalf("error %v is not a contract *cuda.Error", err)
	}
}

func equalF32(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s[%d] = %v, want %v (bit-exact)", what, i, got[i], want[i])
		}
	}
}
