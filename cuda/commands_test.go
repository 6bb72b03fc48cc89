package cuda_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

// simDevice is a zero-cost simulated device with two live buffers of 64
// float32s.
func simDevice(t *testing.T) (sim.Device, backend.Stream, cuda.Buffer, cuda.Buffer) {
	t.Helper()
	dev, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	s, err := backend.Must(dev).NewStream()
	if err != nil {
		t.Fatal(err)
	}
	a, err := dev.Alloc(cuda.BufferSpec{Size: 256, Elem: cuda.F32})
	if err != nil {
		t.Fatal(err)
	}
	b, err := dev.Alloc(cuda.BufferSpec{Size: 256, Elem: cuda.F32})
	if err != nil {
		t.Fatal(err)
	}
	return dev, s, a, b
}

// Every argument constructor reads back what it was given, through the
// accessor of its type.
func TestArgsRoundTrip(t *testing.T) {
	if cuda.F32Arg(1.5).F32() != 1.5 || cuda.I32Arg(-3).I32() != -3 || cuda.U32Arg(7).U32() != 7 ||
		cuda.I64Arg(-1<<40).I64() != -1<<40 || cuda.U64Arg(1<<60).U64() != 1<<60 || cuda.F64Arg(2.25).F64() != 2.25 ||
		cuda.F16Arg(0.5).F16() != 0.5 || cuda.BF16Arg(-2).BF16() != -2 || string(cuda.StructArg([]byte{1, 2}).StructBytes()) != "\x01\x02" {
		t.Error("an argument does not read back what it was given")
	}
}

// Commands built from regions say what they touch and how many bytes they
// move; a bad one is refused by Validate with a contract error.
func TestCommandsDescribeAndValidate(t *testing.T) {
	_, _, a, b := simDevice(t)
	up, err := cuda.Upload(a.Whole(), make([]byte, 256))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := cuda.Copy(b.Whole(), a.Whole())
	if err != nil {
		t.Fatal(err)
	}
	zero, err := cuda.Zero(b.Whole())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cmd            cuda.Command
		regions, bytes int
	}{{up, 1, 256}, {cp, 2, 512}, {zero, 1, 256}} {
		if err := c.cmd.Validate(); err != nil {
			t.Errorf("%v: Validate: got %v, want nil", c.cmd, err)
		}
		n := 0
		if err := backend.ForRegions(c.cmd, func(cuda.Region) error { n++; return nil }); err != nil || n != c.regions || backend.RegionCount(c.cmd) != c.regions || int(backend.CommandBytes(c.cmd)) != c.bytes {
			t.Errorf("%v: %d regions (RegionCount %d), %d bytes; want %d and %d", c.cmd, n, backend.RegionCount(c.cmd), backend.CommandBytes(c.cmd), c.regions, c.bytes)
		}
		if len(backend.Touches(c.cmd, nil)) != c.regions || c.cmd.String() == "" || !strings.HasPrefix(backend.EnqueueOp(c.cmd.Kind), "enqueue ") {
			t.Errorf("%v: touches %v, op %q", c.cmd, backend.Touches(c.cmd, nil), backend.EnqueueOp(c.cmd.Kind))
		}
	}
	stop := errors.New("stop")
	if err := backend.ForRegions(cp, func(cuda.Region) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("ForRegions: got %v, want the callback's error", err)
	}
	if _, err := cuda.Upload(a.Whole(), make([]byte, 3)); !errors.Is(err, cuda.ErrOutOfBounds) {
		t.Errorf("an upload of 3 bytes into 256: got %v, want ErrOutOfBounds", err)
	}
	short, _ := a.Region(0, 4)
	if _, err := cuda.Copy(b.Whole(), short); err == nil {
		t.Error("a copy between regions of two lengths: got nil, want an error")
	}
	if _, err := cuda.Zero(cuda.Region{}); err == nil {
		t.Error("a zero of the zero region: got nil, want an error")
	}
	for k := cuda.KindLaunch; k <= cuda.KindCall+1; k++ {
		if k.String() == "" || backend.EnqueueOp(k) == "" {
			t.Errorf("kind %d: name %q, op %q", k, k.String(), backend.EnqueueOp(k))
		}
	}
	if (cuda.Command{}).Validate() == nil {
		t.Error("the zero Command validates")
	}
}

// Launches by spec and by name are checked against the kernel's
// parameters; ValidateFor checks a command against a device's kernels and
// live buffers.
func TestLaunchesChecked(t *testing.T) {
	dev, s, a, _ := simDevice(t)
	ks := dev.Kernels()
	spec, ok := ks.Kernel(kernels.Fill)
	if !ok {
		t.Fatalf("the sim device has no %s", kernels.Fill)
	}
	good := []cuda.Arg{cuda.BufferArg(a.Whole()), cuda.F32Arg(1), cuda.I32Arg(64)}
	cmd, err := cuda.Launch(&spec, cuda.Linear(64, 64), good...)
	if err != nil {
		t.Fatalf("a good launch by spec: got %v", err)
	}
	if len(backend.Touches(cmd, &spec)) != 1 || backend.CommandBytes(cmd) != 0 && backend.RegionCount(cmd) != 1 {
		t.Errorf("a launch's touches: %v", backend.Touches(cmd, &spec))
	}
	if err := backend.ValidateFor("enqueue", cmd, ks, func(cuda.Buffer) error { return nil }); err != nil {
		t.Errorf("ValidateFor a good launch: got %v", err)
	}
	gone := errors.New("freed")
	if err := backend.ValidateFor("enqueue", cmd, ks, func(cuda.Buffer) error { return gone }); !errors.Is(err, gone) {
		t.Errorf("ValidateFor a launch of a freed buffer: got %v, want the lookup's error", err)
	}
	if err := s.Enqueue(cmd); err != nil {
		t.Fatal(err)
	}
	if _, err := cuda.LaunchNamed(ks, kernels.Fill, cuda.Linear(64, 64), good[:2]...); !errors.Is(err, cuda.ErrInvalidCommand) && err == nil {
		t.Error("a launch missing an argument: got nil, want an error")
	}
	if _, err := cuda.LaunchNamed(ks, kernels.Fill, cuda.Linear(64, 64), cuda.I32Arg(1), cuda.F32Arg(1), cuda.I32Arg(64)); err == nil {
		t.Error("a scalar where a buffer goes: got nil, want an error")
	}
	if _, err := cuda.LaunchNamed(ks, "no_such_kernel", cuda.Linear(1, 1)); !errors.Is(err, cuda.ErrUnknownKernel) {
		t.Errorf("an unknown kernel: got %v, want ErrUnknownKernel", err)
	}
	if err := backend.ValidateFor("enqueue", cuda.Command{Kind: cuda.KindLaunch, Kernel: "no_such_kernel"}, ks, nil); !errors.Is(err, cuda.ErrUnknownKernel) {
		t.Errorf("ValidateFor an unknown kernel: got %v, want ErrUnknownKernel", err)
	}
	if h := backend.NativeHandle(s); h != 0 {
		t.Errorf("NativeHandle of a simulated stream: got %#x, want 0", h)
	}
	ran := false
	if err := cuda.Bound(dev, func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Bound: got %v, ran %v", err, ran)
	}
}

// Library declarations are checked, and a call's failure says whose it is.
func TestLibrariesChecked(t *testing.T) {
	_, _, a, _ := simDevice(t)
	if err := (&cuda.Library{}).Validate(); err == nil {
		t.Error("a library with no name validates")
	}
	if err := (&cuda.Library{Name: "ok", WorkspaceBytes: cuda.MaxWorkspaceBytes + 1}).Validate(); err == nil {
		t.Error("a workspace beyond MaxWorkspaceBytes validates")
	}
	if err := (&cuda.Library{Name: "ok", WorkspaceBytes: 1 << 20}).Validate(); err != nil {
		t.Errorf("a good library: got %v", err)
	}
	if !cuda.ValidCallName("sgemm") || cuda.ValidCallName("") {
		t.Error("ValidCallName: want sgemm valid and the empty name not")
	}
	touch := []cuda.Touch{{Region: a.Whole(), Access: cuda.AccessReadWrite}}
	ref := func([][]byte) error { return nil }
	if _, err := cuda.Call(&cuda.LibraryCall{Name: "scale", Regions: touch, Reference: ref}); err != nil {
		t.Errorf("a good call: got %v", err)
	}
	if _, err := cuda.Call(&cuda.LibraryCall{Name: "scale", Regions: []cuda.Touch{{Region: a.Whole(), Access: 9}}, Reference: ref}); !errors.Is(err, cuda.ErrInvalidCommand) {
		t.Errorf("a call with access 9: got %v, want ErrInvalidCommand", err)
	}
	lib := &cuda.Library{Name: "blas", WorkspaceBytes: 64}
	if _, err := cuda.Call(&cuda.LibraryCall{Name: "gemm", Regions: touch, Reference: ref, Library: lib, Workspace: 9}); !errors.Is(err, cuda.ErrInvalidCommand) {
		t.Errorf("a workspace access 9: got %v, want ErrInvalidCommand", err)
	}
	boom := errors.New("boom")
	ce := &cuda.CallError{Kind: "call", Name: "gemm", Err: boom}
	if !errors.Is(ce, boom) || !strings.Contains(ce.Error(), "gemm") {
		t.Errorf("CallError: %q does not name its call or unwrap to its cause", ce.Error())
	}
	for _, s := range []backend.CaptureStatus{backend.CaptureNone, backend.CaptureActive, backend.CaptureInvalidated, 9} {
		if s.String() == "" {
			t.Errorf("capture status %d has no name", s)
		}
	}
	for _, s := range []backend.FenceState{backend.FencePending, backend.FenceComplete, backend.FenceIndeterminate, 9} {
		if s.String() == "" {
			t.Errorf("fence state %d has no name", s)
		}
	}
}
