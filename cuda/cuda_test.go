package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

func testBuffer(elem cuda.ElementType, size uint64) cuda.Buffer {
	return cuda.Buffer{Device: 1, ID: 3, Size: size, Align: 256, Elem: elem, Addr: 0x1000}
}

func TestElementTypes(t *testing.T) {
	sizes := map[cuda.ElementType]uint64{cuda.Bool: 1, cuda.U8: 1, cuda.U32: 4, cuda.I8: 1, cuda.I32: 4, cuda.F16: 2, cuda.BF16: 2, cuda.F32: 4,
		cuda.I64: 8, cuda.U64: 8, cuda.F64: 8}
	for e, size := range sizes {
		if e.Size() != size {
			t.Errorf("%v.Size(): got %d, want %d", e, e.Size(), size)
		}
		if !e.Valid() || e.String() == "" {
			t.Errorf("%v: got valid %v, name %q; want valid and named", e, e.Valid(), e.String())
		}
	}
	if cuda.ElementType(0).Valid() {
		t.Error("ElementType(0).Valid(): got true, want false")
	}
	if n := cuda.ElementType(12).Size(); n != 0 {
		t.Errorf("ElementType(12).Size(): got %d, want 0 (invalid)", n)
	}
	// 8-byte scalars keep all their bits; a 4-byte one refuses bits past
	// its size.
	for _, a := range []cuda.Arg{cuda.I64Arg(-1 << 62), cuda.U64Arg(1<<64 - 1), cuda.F64Arg(math.Pi)} {
		c := cuda.Command{Kind: cuda.KindLaunch, Kernel: "k", Config: cuda.Linear(1, 1), Args: []cuda.Arg{a}}
		if err := c.Validate(); err != nil {
			t.Errorf("a %v scalar of bits %#x: got err %v, want nil", a.Elem, a.Bits, err)
		}
	}
	if a := cuda.I64Arg(-5); a.I64() != -5 || cuda.U64Arg(7).U64() != 7 || cuda.F64Arg(0.1).F64() != 0.1 {
		t.Error("8-byte scalar accessors do not return what was passed")
	}
	c := cuda.Command{Kind: cuda.KindLaunch, Kernel: "k", Config: cuda.Linear(1, 1), Args: []cuda.Arg{{Kind: cuda.ParamScalar, Elem: cuda.I32, Bits: 1 << 32}}}
	if err := c.Validate(); err == nil {
		t.Error("an i32 scalar with bits past 32: got nil, want an error")
	}
}

func TestBufferSpec(t *testing.T) {
	cases := []struct {
		spec cuda.BufferSpec
		want error
	}{
		{cuda.BufferSpec{Size: 16, Elem: cuda.F32}, nil},
		{cuda.BufferSpec{Size: 16}, cuda.ErrElementType},
		{cuda.BufferSpec{Size: 0, Elem: cuda.U8}, cuda.ErrEmptyRegion},
		{cuda.BufferSpec{Size: 6, Elem: cuda.F32}, cuda.ErrAlignment},
		{cuda.BufferSpec{Size: 16, Align: 3, Elem: cuda.U8}, cuda.ErrAlignment},
		{cuda.BufferSpec{Size: 16, Align: 2, Elem: cuda.F32}, cuda.ErrAlignment},
		{cuda.BufferSpec{Size: 16, Align: 1 << 20, Elem: cuda.U8}, cuda.ErrAlignment},
	}
	for _, c := range cases {
		got, err := c.spec.Normalize()
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("Normalize(%+v): got err %v, want %v", c.spec, err, c.want)
		}
		if err == nil && got.Align != cuda.DefaultAlignment {
			t.Errorf("Normalize(%+v): got alignment %d, want the default %d", c.spec, got.Align, cuda.DefaultAlignment)
		}
	}
}

func TestRegionOverlaps(t *testing.T) {
	b := testBuffer(cuda.U8, 100)
	r1, _ := b.Region(0, 50)
	r2, _ := b.Region(49, 10)
	r3, _ := b.Region(50, 10)
	other := b
	other.ID = 4
	r4, _ := other.Region(0, 50)
	if !r1.Overlaps(r2) {
		t.Error("[0,50) overlaps [49,59): got false, want true")
	}
	if r1.Overlaps(r3) {
		t.Error("[0,50) overlaps [50,60): got true, want false (adjacent)")
	}
	if r1.Overlaps(r4) {
		t.Error("[0,50) overlaps [0,50) of another buffer: got true, want false")
	}
	if t.Failed() {
		t.FailNow()
	}
	if r3.Addr() != 0x1000+50 || r3.End() != 60 || r3.Elements() != 10 {
		t.Fatalf("region [50,60) of a u8 buffer at 0x1000: got Addr %#x, End %d, Elements %d; want 0x1032, 60, 10", r3.Addr(), r3.End(), r3.Elements())
	}
}

func TestErrorsClassify(t *testing.T) {
	oom := backend.DriverError("alloc", codes.OutOfMemory, "full")
	if !errors.Is(oom, cuda.ErrOutOfMemory) || errors.Is(oom, cuda.ErrIllegalAddress) {
		t.Fatalf("out of memory %v: got Is(ErrOutOfMemory) %v, Is(ErrIllegalAddress) %v; want true, false",
			oom, errors.Is(oom, cuda.ErrOutOfMemory), errors.Is(oom, cuda.ErrIllegalAddress))
	}
	if !oom.Retryable || oom.Sticky {
		t.Fatalf("out of memory: got Retryable %v, Sticky %v; want true, false (%+v)", oom.Retryable, oom.Sticky, oom)
	}
	ill := fmt.Errorf("lane 3: %w", backend.DriverError("fence query", codes.IllegalAddress, ""))
	if r := cuda.Classify(ill); !r.Sticky || r.Retryable || !errors.Is(ill, cuda.ErrIllegalAddress) {
		t.Fatalf("illegal address %v: got Sticky %v, Retryable %v, Is(ErrIllegalAddress) %v; want true, false, true", ill, r.Sticky, r.Retryable, errors.Is(ill, cuda.ErrIllegalAddress))
	}
	if r := cuda.Classify(ill); r.Code != codes.IllegalAddress || r.Code.String() != "cuda_illegal_address" || !r.Sticky || r.Blame != cuda.BlameDevice {
		t.Fatalf("Classify(illegal address): got Code %v (%q), Sticky %v, Blame %v; want %d (%q), true, %v",
			int(r.Code), r.Code, r.Sticky, r.Blame, int(codes.IllegalAddress), "cuda_illegal_address", cuda.BlameDevice)
	}
	c := cuda.Contractf("launch", cuda.ErrKernelArity, "2 != 3")
	if !errors.Is(c, cuda.ErrKernelArity) || errors.Is(c, cuda.ErrOutOfMemory) {
		t.Fatalf("contract error %v: got Is(ErrKernelArity) %v, Is(ErrOutOfMemory) %v; want true, false", c, errors.Is(c, cuda.ErrKernelArity), errors.Is(c, cuda.ErrOutOfMemory))
	}
	if got, want := c.Error(), "cuda: launch: cuda_runtime_contract: 2 != 3"; got != want {
		t.Fatalf("contract error: got message %q, want %q", got, want)
	}
	if r := cuda.Classify(c); r.Code != codes.RuntimeContract || r.Blame != cuda.BlameCaller || !r.NotSubmitted {
		t.Fatalf("Classify(contract error): got Code %v, Blame %v, NotSubmitted %v; want %v, %v, true", r.Code, r.Blame, r.NotSubmitted, codes.RuntimeContract, cuda.BlameCaller)
	}
	if r := cuda.Classify(errors.New("boom")); r.Code != codes.Unclassified || r.Sticky || r.Retryable {
		t.Fatalf("Classify(foreign error): got Code %v, Sticky %v, Retryable %v; want %v, false, false", r.Code, r.Sticky, r.Retryable, codes.Unclassified)
	}
	if r := cuda.Classify(fmt.Errorf("waiting: %w", context.DeadlineExceeded)); r.Code != codes.DeadlineExceeded || r.Blame != cuda.BlameNone {
		t.Fatalf("Classify(wrapped context.DeadlineExceeded): got Code %v, Blame %v; want %v, %v", r.Code, r.Blame, codes.DeadlineExceeded, cuda.BlameNone)
	}
	if got, want := cuda.Code(12345).String(), "cuda_driver_error_12345"; got != want {
		t.Fatalf("Code(12345).String(): got %q, want %q", got, want)
	}
	if got := cuda.Classify(nil).Code; got != codes.OK {
		t.Fatalf("Classify(nil).Code: got %v, want %v", got, codes.OK)
	}
	if r := cuda.Code(12345).Class(); r.Blame != cuda.BlameStream || r.Sticky {
		t.Fatalf("Code(12345).Class(), an unknown driver code: got Blame %v, Sticky %v; want %v, false", r.Blame, r.Sticky, cuda.BlameStream)
	}
	// A sentinel of an upper layer: matched by errors.Is through wrapping,
	// classified by its code.
	over := codes.NewSentinel(codes.Overloaded, "actors: overloaded")
	w := fmt.Errorf("tenant t: %w", over)
	if !errors.Is(w, over) {
		t.Fatalf("errors.Is(%v, the sentinel): got false, want true", w)
	}
	if r := cuda.Classify(w); r.Code != codes.Overloaded || !r.Retryable || !r.NotSubmitted || r.Blame != cuda.BlameNone {
		t.Fatalf("Classify(wrapped sentinel): got Code %v, Retryable %v, NotSubmitted %v, Blame %v; want %v, true, true, %v",
			r.Code, r.Retryable, r.NotSubmitted, r.Blame, codes.Overloaded, cuda.BlameNone)
	}
}

// TestEveryCodeHasAName: the one vocabulary has no gaps: every code of
// every layer has a distinct stable name.
func TestEveryCodeHasAName(t *testing.T) {
	seen := map[string]cuda.Code{}
	for c := cuda.Code(-1000); c <= 1000; c++ {
		name := c.String()
		if strings.HasPrefix(name, "cuda_driver_error_") {
			continue
		}
		if prev, ok := seen[name]; ok {
			t.Fatalf("codes %d and %d: got the same name %q, want distinct names", prev, c, name)
		}
		seen[name] = c
	}
	if len(seen) < 50 {
		t.Fatalf("got %d named codes in [-1000, 1000], want at least 50", len(seen))
	}
}

func sampleCommands(t testing.TB) []cuda.Command {
	reg := kernels.Builtin()
	f := testBuffer(cuda.F32, 4096)
	g := f
	g.ID = 9
	launch, err := cuda.Launch(reg.MustSpec(kernels.Axpy), cuda.Linear(1024, 128), cuda.BufferArg(f.Whole()), cuda.BufferArg(g.Whole()), cuda.F32Arg(0.5), cuda.I32Arg(1024))
	if err != nil {
		t.Fatalf("cuda.Launch(axpy): got err %v, want nil", err)
	}
	up, err := cuda.Upload(f.Whole(), make([]byte, 4096))
	if err != nil {
		t.Fatalf("cuda.Upload: got err %v, want nil", err)
	}
	cp, err := cuda.Copy(f.Whole(), g.Whole())
	if err != nil {
		t.Fatalf("cuda.Copy: got err %v, want nil", err)
	}
	z, err := cuda.Zero(g.Whole())
	if err != nil {
		t.Fatalf("cuda.Zero: got err %v, want nil", err)
	}
	h := cuda.HostBuffer{Device: 1, ID: 5, Size: 4096}
	in, err := cuda.StageIn(f.Whole(), h.Whole())
	if err != nil {
		t.Fatalf("cuda.StageIn: got err %v, want nil", err)
	}
	out, err := cuda.StageOut(h.Whole(), g.Whole())
	if err != nil {
		t.Fatalf("cuda.StageOut: got err %v, want nil", err)
	}
	byValue := cuda.Command{Kind: cuda.KindLaunch, Kernel: "affine", Config: cuda.Linear(64, 64),
		Args: []cuda.Arg{cuda.BufferArg(f.Whole()), cuda.StructArg([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}), cuda.F16Arg(0.5), cuda.BF16Arg(-1)}}
	return []cuda.Command{launch, up, cp, z, in, out, byValue}
}

// FuzzRegion checks region validation against a naive model.
func FuzzRegion(f *testing.F) {
	f.Add(uint64(0), uint64(4), uint64(64), uint8(cuda.F32))
	f.Add(uint64(1<<63), uint64(1<<63), uint64(64), uint8(cuda.U8))
	f.Fuzz(func(t *testing.T, off, length, size uint64, elem uint8) {
		b := testBuffer(cuda.ElementType(elem), size)
		_, err := b.Region(off, length)
		es := cuda.ElementType(elem).Size()
		ok := es != 0 && size != 0 && length != 0 && off <= size && length <= size-off && off%es == 0 && length%es == 0
		if ok != (err == nil) {
			t.Fatalf("Region(%d, %d) of a %d-byte %v buffer: got err %v, want ok=%v as the model says", off, length, size, cuda.ElementType(elem), err, ok)
		}
	})
}

func TestLinear(t *testing.T) {
	c := cuda.Linear(1000, 256)
	if c.Grid.X != 4 || c.Block.X != 256 || c.Threads() != 1024 || c.Validate() != nil {
		t.Fatalf("Linear(1000, 256): got grid.x %d, block.x %d, %d threads, Validate %v; want 4, 256, 1024, nil (%+v)", c.Grid.X, c.Block.X, c.Threads(), c.Validate(), c)
	}
	if c := cuda.Linear(0, 0); c.Grid.X != 1 || c.Block.X != 256 {
		t.Fatalf("Linear(0, 0): got grid.x %d, block.x %d; want 1, 256 (%+v)", c.Grid.X, c.Block.X, c)
	}
}

// TestCallDeclarationsChecked: a library call's name is short, printable
// UTF-8 and without spaces, and a launch's kernel name UTF-8 (a name that
// is not cannot cross to a lane host); LaunchNamed without kernels is an
// error, not a panic.
func TestCallDeclarationsChecked(t *testing.T) {
	r := cuda.Region{Buffer: cuda.Buffer{Device: 1, ID: 1, Size: 64, Align: 256, Elem: cuda.F32, Addr: 1 << 20}, Length: 64}
	for _, name := range []string{"", "two\nlines", "a b", strings.Repeat("n", 300), "zero\u200bwidth", "ax\xffpy", "caf\xe9"} {
		_, err := cuda.Call(&cuda.LibraryCall{Name: name, Regions: []cuda.Touch{{Region: r, Access: cuda.AccessRead}}, Reference: func([][]byte) error { return nil }})
		if !errors.Is(err, cuda.ErrInvalidCommand) {
			t.Errorf("cuda.Call named %.20q: got err %v, want cuda.ErrInvalidCommand", name, err)
		}
	}
	bad := cuda.Command{Kind: cuda.KindLaunch, Kernel: "k\xff", Config: cuda.Linear(1, 1)}
	if err := bad.Validate(); !errors.Is(err, cuda.ErrInvalidCommand) {
		t.Errorf("a launch of kernel \"k\\xff\": got err %v, want cuda.ErrInvalidCommand", err)
	}
	if _, err := cuda.LaunchNamed(nil, "inc", cuda.Linear(1, 1)); !errors.Is(err, cuda.ErrUnknownKernel) {
		t.Errorf("LaunchNamed(nil kernels): got err %v, want cuda.ErrUnknownKernel", err)
	}
}

// TestShapeRules: a kernel's launch-shape rule refuses a launch whatever
// it returns or however it fails (a plain error, a panic), always as
// ErrLaunchConfig; a contract error it returns comes back as it is.
func TestShapeRules(t *testing.T) {
	spec := cuda.KernelSpec{Name: "k", Params: []cuda.Param{{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I32}}}
	for name, rule := range map[string]func(cuda.LaunchConfig, []cuda.Arg) error{
		"plain error": func(cuda.LaunchConfig, []cuda.Arg) error { return errors.New("too few blocks") },
		"panic":       func(cuda.LaunchConfig, []cuda.Arg) error { panic("rule exploded") },
		"contract": func(cuda.LaunchConfig, []cuda.Arg) error {
			return cuda.Contractf("launch", cuda.ErrLaunchConfig, "needs 64 B of shared memory")
		},
	} {
		spec.Shape = rule
		_, err := cuda.Launch(&spec, cuda.Linear(32, 32), cuda.I32Arg(32))
		if !errors.Is(err, cuda.ErrLaunchConfig) || cuda.Classify(err).Blame != cuda.BlameCaller {
			t.Errorf("%s: got err %v, want cuda.ErrLaunchConfig blamed on the caller", name, err)
		}
	}
	spec.Shape = func(cfg cuda.LaunchConfig, a []cuda.Arg) error {
		if cfg.SharedBytes < uint32(a[0].I32())/32*4 {
			return cuda.Contractf("launch", cuda.ErrLaunchConfig, "needs %d B of shared memory", a[0].I32()/32*4)
		}
		return nil
	}
	cfg := cuda.Linear(256, 256)
	if _, err := cuda.Launch(&spec, cfg, cuda.I32Arg(256)); !errors.Is(err, cuda.ErrLaunchConfig) {
		t.Errorf("no shared memory for a rule asking 32 B: got err %v, want cuda.ErrLaunchConfig", err)
	}
	cfg.SharedBytes = 32
	if _, err := cuda.Launch(&spec, cfg, cuda.I32Arg(256)); err != nil {
		t.Errorf("the shared memory the rule asks: got err %v, want nil", err)
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, c := range sampleCommands(t) {
		b, err := backend.EncodeCommand(c)
		if err != nil {
			t.Fatalf("MarshalBinary(%v): got err %v, want nil", c, err)
		}
		var got cuda.Command
		if err := backend.DecodeCommand(&got, b); err != nil {
			t.Fatalf("UnmarshalBinary(MarshalBinary(%v)): got err %v, want nil", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip: got %v, want %v", got, c)
		}
		for cut := range len(b) {
			var partial cuda.Command
			if err := backend.DecodeCommand(&partial, b[:cut]); !errors.Is(err, backend.ErrEncoding) {
				t.Fatalf("UnmarshalBinary of %v cut at %d of %d bytes: got err %v, want one wrapping backend.ErrEncoding", c, cut, len(b), err)
			}
		}
	}
	if _, err := backend.EncodeCommand((cuda.Command{Kind: cuda.KindZero})); err == nil {
		t.Fatal("MarshalBinary of a zero command with no destination: got err nil, want an error")
	}
}

// FuzzCommandDecode feeds arbitrary bytes to the decoder: it must never
// panic, must fail with a typed error, and whatever it accepts must be a
// valid command that encodes back to the same bytes.
func FuzzCommandDecode(f *testing.F) {
	for _, c := range sampleCommands(f) {
		b, _ := backend.EncodeCommand(c)
		f.Add(b)
	}
	f.Add([]byte{1, 1, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c cuda.Command
		err := backend.DecodeCommand(&c, data)
		if err != nil {
			var ce *cuda.Error
			if !errors.As(err, &ce) || ce.Code != codes.RuntimeContract {
				t.Fatalf("UnmarshalBinary: got err %v (%T), want a *cuda.Error with code %v", err, err, codes.RuntimeContract)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate of a decoded command %v: got err %v, want nil: the decoder must accept only valid commands", c, err)
		}
		again, err := backend.EncodeCommand(c)
		if err != nil || !reflect.DeepEqual(again, data) {
			t.Fatalf("re-encoding: got %x (err %v), want the decoded bytes %x (nil)", again, err, data)
		}
		if spec, ok := kernels.Builtin().Kernel(c.Kernel); ok {
			_ = c.ValidateLaunch(&spec) // must not panic on any argument list
		}
	})
}
