// Conformance: out-of-memory, ownership, bounds and sticky faults.

package conformance

import (
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
)

func testOutOfMemory(t *testing.T, dev backend.Device) {
	total := dev.Memory().Total
	_, err := dev.Alloc(cuda.BufferSpec{Size: total + (1 << 30), Elem: cuda.U8})
	if !errors.Is(err, cuda.ErrOutOfMemory) || !cuda.Classify(err).Retryable || cuda.Classify(err).Sticky {
		t.Fatalf("allocating more than the device has: %v; want retryable, non-sticky out of memory", err)
	}
	// Absurd sizes: near 2^64 a padded or rounded size wraps; each is a
	// typed error, never a panic and never an allocation.
	for _, size := range []uint64{1<<64 - 4, 1<<64 - 256, 1 << 63, 1<<62 + 4} {
		_, err := dev.Alloc(cuda.BufferSpec{Size: size, Elem: cuda.I32})
		if !errors.Is(err, cuda.ErrOutOfMemory) {
			t.Fatalf("Alloc(%d bytes): %v; want out of memory", size, err)
		}
		if _, err := dev.AllocHost(size); !errors.Is(err, cuda.ErrOutOfMemory) {
			t.Fatalf("AllocHost(%d bytes): %v; want out of memory", size, err)
		}
	}
	if err := dev.Err(); err != nil {
		t.Fatalf("out of memory poisoned the device: %v", err)
	}
	f := fixture{t, dev}
	b := f.alloc(cuda.U8, 1024) // the device still allocates
	if err := dev.CheckBuffer(b); err != nil {
		t.Fatalf("a live buffer fails its check: %v", err)
	}
	forged := b
	forged.Size *= 2
	wantContract(t, dev.CheckBuffer(forged), cuda.ErrStaleHandle)
	if err := dev.Free(b); err != nil {
		t.Fatal(err)
	}
	wantContract(t, dev.CheckBuffer(b), cuda.ErrStaleHandle)
}

func testOwnership(t *testing.T, a, b backend.Device) {
	fa, fb := fixture{t, a}, fixture{t, b}
	sa, sb := fa.stream(), fb.stream()
	foreign := fb.alloc(cuda.I32, 16)
	c, err := cuda.Zero(foreign.Whole())
	if err != nil {
		t.Fatal(err)
	}
	wantContract(t, sa.Enqueue(c), cuda.ErrForeignHandle)
	wantContract(t, sa.Readback(foreign.Whole(), make([]byte, 64)), cuda.ErrForeignHandle)
	wantContract(t, a.Free(foreign), cuda.ErrForeignHandle)

	if err := sb.BeginCapture(backend.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := sb.Enqueue(c); err != nil {
		t.Fatal(err)
	}
	g, err := sb.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	wantContract(t, sa.Launch(exec), cuda.ErrForeignHandle)
	wantContract(t, exec.Upload(sa), cuda.ErrForeignHandle)

	// A forged or freed buffer is refused too.
	own := fa.alloc(cuda.I32, 16)
	forged := own
	forged.Size = 1 << 20
	z, _ := cuda.Zero(forged.Whole())
	wantContract(t, sa.Enqueue(z), cuda.ErrStaleHandle)
	if err := a.Free(own); err != nil {
		t.Fatal(err)
	}
	z, _ = cuda.Zero(own.Whole())
	wantContract(t, sa.Enqueue(z), cuda.ErrStaleHandle)
}

func testBounds(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	s := f.stream()
	b := f.alloc(cuda.F32, 64)
	ib := f.alloc(cuda.I32, 64)

	_, err := b.Region(200, 100)
	wantContract(t, err, cuda.ErrOutOfBounds)
	_, err = b.Region(0, 0)
	wantContract(t, err, cuda.ErrEmptyRegion)
	_, err = b.Region(2, 4)
	wantContract(t, err, cuda.ErrAlignment)
	_, err = b.Region(1<<63, 1<<63)
	wantContract(t, err, cuda.ErrOutOfBounds)

	fill := f.spec(kernels.Fill)
	_, err = cuda.Launch(fill, cuda.Linear(64, 64), cuda.BufferArg(ib.Whole()), cuda.F32Arg(1), cuda.I32Arg(64))
	wantContract(t, err, cuda.ErrElementType)
	_, err = cuda.Launch(fill, cuda.Linear(64, 64), cuda.BufferArg(b.Whole()), cuda.F32Arg(1))
	wantContract(t, err, cuda.ErrKernelArity)
	_, err = cuda.Launch(fill, cuda.Linear(64, 64), cuda.BufferArg(b.Whole()), cuda.F32Arg(1), cuda.I32Arg(65))
	wantContract(t, err, cuda.ErrOutOfBounds)
	_, err = cuda.Launch(fill, cuda.LaunchConfig{Grid: cuda.Dim3{X: 1, Y: 1, Z: 1}, Block: cuda.Dim3{X: 2048, Y: 1, Z: 1}}, cuda.BufferArg(b.Whole()), cuda.F32Arg(1), cuda.I32Arg(64))
	wantContract(t, err, cuda.ErrLaunchConfig)
	_, err = cuda.Copy(b.Whole(), ib.Whole())
	wantContract(t, err, cuda.ErrElementType)
	_, err = cuda.Upload(b.Whole(), make([]byte, 3))
	wantContract(t, err, cuda.ErrOutOfBounds)

	// A hand-built command that skipped the constructors is checked again
	// at enqueue, and nothing reaches the stream.
	bad := cuda.Command{Kind: cuda.KindLaunch, Kernel: kernels.Fill, Config: cuda.Linear(64, 64),
		Args: []cuda.Arg{cuda.BufferArg(b.Whole()), cuda.F32Arg(1), cuda.I32Arg(1000)}}
	wantContract(t, s.Enqueue(bad), cuda.ErrOutOfBounds)
	bad.Kernel = "no_such_kernel"
	wantContract(t, s.Enqueue(bad), cuda.ErrUnknownKernel)
	wantContract(t, s.Enqueue(cuda.Command{Kind: 77}), cuda.ErrInvalidCommand)
	wantContract(t, s.Readback(b.Whole(), make([]byte, 5)), cuda.ErrOutOfBounds)
	if q := s.Query(); q.State != backend.FenceComplete {
		t.Fatalf("rejected commands left work on the stream: %v", q.State)
	}
}

// testStickyFault writes outside an allocation on purpose: the device must
// classify it sticky, fail every stream, and the process must live on.
func testStickyFault(t *testing.T, dev backend.Device) {
	f := fixture{t, dev}
	victim, bystander := f.stream(), f.stream()
	p := f.alloc(cuda.I32, 16)
	other := f.alloc(cuda.I32, 16)
	z, _ := cuda.Zero(other.Whole())
	if err := bystander.Enqueue(z); err != nil {
		t.Fatal(err)
	}
	if err := bystander.Synchronize(); err != nil {
		t.Fatal(err)
	}
	// 2^31 elements (8 GiB) past the buffer: far outside any allocation.
	f.launch(victim, kernels.Poke, 1, cuda.BufferArg(p.Whole()), cuda.U32Arg(1<<31), cuda.I32Arg(7))
	err := victim.Synchronize()
	if !cuda.Classify(err).Sticky {
		t.Fatalf("out-of-bounds write: synchronize returned %v, want a sticky error", err)
	}
	if r := cuda.Classify(err); !r.Sticky || r.Retryable || r.Blame != cuda.BlameDevice {
		t.Fatalf("described as %+v", r)
	}
	if dev.Err() == nil {
		t.Fatal("the device does not report the sticky error")
	}
	if q := bystander.Query(); q.State != backend.FenceIndeterminate || !cuda.Classify(q.Err).Sticky {
		t.Fatalf("another stream of the poisoned device: %v %v; want indeterminate", q.State, q.Err)
	}
	if err := bystander.Synchronize(); !cuda.Classify(err).Sticky {
		t.Fatalf("synchronize on another stream: %v; want the sticky error", err)
	}
	if _, err := dev.Alloc(cuda.BufferSpec{Size: 4, Elem: cuda.I32}); !cuda.Classify(err).Sticky {
		t.Fatalf("alloc on the poisoned device: %v", err)
	}
}
