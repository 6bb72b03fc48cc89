package cuda_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

func testBuffer(elem cuda.ElementType, size uint64) cuda.Buffer {
	return cuda.Buffer{Device: 1, ID: 3, Size: size, Align: 256, Elem: elem, Addr: 0x1000}
}

func TestElementTypes(t *testing.T) {
	sizes := map[cuda.ElementType]uint64{cuda.Bool: 1, cuda.U8: 1, cuda.U32: 4, cuda.I8: 1, cuda.I32: 4, cuda.F16: 2, cuda.BF16: 2, cuda.F32: 4}
	for e, size := range sizes {
		if e.Size() != size {
			t.Errorf("%v size %d, want %d", e, e.Size(), size)
		}
		got, err := cuda.ParseElementType(e.String())
		if err != nil || got != e {
			t.Errorf("parse %q: %v %v", e, got, err)
		}
	}
	if cuda.ElementType(0).Valid() || cuda.ElementType(9).Size() != 0 {
		t.Error("invalid element types must report invalid")
	}
	if _, err := cuda.ParseElementType("f64"); !errors.Is(err, cuda.ErrElementType) {
		t.Errorf("parse f64: %v", err)
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
			t.Errorf("%+v: %v, want %v", c.spec, err, c.want)
		}
		if err == nil && got.Align != cuda.DefaultAlignment {
			t.Errorf("%+v: default alignment %d", c.spec, got.Align)
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
	if !r1.Overlaps(r2) || r1.Overlaps(r3) || r1.Overlaps(r4) {
		t.Fatal("overlap is wrong")
	}
	if r3.Addr() != 0x1000+50 || r3.End() != 60 || r3.Elements() != 10 {
		t.Fatal("region geometry is wrong")
	}
}

func TestErrorsClassify(t *testing.T) {
	oom := cuda.DriverError("alloc", cuda.CodeOutOfMemory, "full")
	if !errors.Is(oom, cuda.ErrOutOfMemory) || errors.Is(oom, cuda.ErrIllegalAddress) || !oom.Retryable || oom.Sticky {
		t.Fatalf("oom: %+v", oom)
	}
	ill := fmt.Errorf("lane 3: %w", cuda.DriverError("fence query", cuda.CodeIllegalAddress, ""))
	if !cuda.Classify(ill).Sticky || cuda.Classify(ill).Retryable || !errors.Is(ill, cuda.ErrIllegalAddress) {
		t.Fatalf("illegal address: %v", ill)
	}
	if r := cuda.Classify(ill); r.Code != cuda.CodeIllegalAddress || r.Code.String() != "cuda_illegal_address" || !r.Sticky || r.Blame != cuda.BlameDevice {
		t.Fatalf("classify: %+v", r)
	}
	c := cuda.Contractf("launch", cuda.ErrKernelArity, "2 != 3")
	if !errors.Is(c, cuda.ErrKernelArity) || errors.Is(c, cuda.ErrOutOfMemory) || c.Error() != "cuda: launch: cuda_runtime_contract: 2 != 3" {
		t.Fatalf("contract: %v", c)
	}
	if r := cuda.Classify(c); r.Code != cuda.CodeRuntimeContract || r.Blame != cuda.BlameCaller || !r.NotSubmitted {
		t.Fatalf("contract classified: %+v", r)
	}
	if r := cuda.Classify(errors.New("boom")); r.Code != cuda.CodeUnclassified || r.Sticky || r.Retryable {
		t.Fatalf("foreign error: %+v", r)
	}
	if r := cuda.Classify(fmt.Errorf("waiting: %w", context.DeadlineExceeded)); r.Code != cuda.CodeDeadlineExceeded || r.Blame != cuda.BlameNone {
		t.Fatalf("context error: %+v", r)
	}
	if cuda.Code(12345).String() != "cuda_driver_error_12345" || cuda.Classify(nil).Code != cuda.CodeOK {
		t.Fatal("code names")
	}
	if r := cuda.Code(12345).Class(); r.Blame != cuda.BlameStream || r.Sticky {
		t.Fatalf("an unknown driver code is the stream's: %+v", r)
	}
	// A sentinel of an upper layer: matched by errors.Is through wrapping,
	// classified by its code.
	over := cuda.NewSentinel(cuda.CodeOverloaded, "actors: overloaded")
	w := fmt.Errorf("tenant t: %w", over)
	if r := cuda.Classify(w); !errors.Is(w, over) || r.Code != cuda.CodeOverloaded || !r.Retryable || !r.NotSubmitted || r.Blame != cuda.BlameNone {
		t.Fatalf("sentinel: %+v", r)
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
			t.Fatalf("codes %d and %d share the name %q", prev, c, name)
		}
		seen[name] = c
	}
	if len(seen) < 50 {
		t.Fatalf("only %d named codes", len(seen))
	}
}

func sampleCommands(t testing.TB) []cuda.Command {
	reg := kernels.Builtin()
	f := testBuffer(cuda.F32, 4096)
	g := f
	g.ID = 9
	launch, err := cuda.Launch(reg.MustSpec(kernels.Axpy), cuda.Linear(1024, 128), cuda.BufferArg(f.Whole()), cuda.BufferArg(g.Whole()), cuda.F32Arg(0.5), cuda.I32Arg(1024))
	if err != nil {
		t.Fatal(err)
	}
	up, err := cuda.Upload(f.Whole(), make([]byte, 4096))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := cuda.Copy(f.Whole(), g.Whole())
	if err != nil {
		t.Fatal(err)
	}
	z, err := cuda.Zero(g.Whole())
	if err != nil {
		t.Fatal(err)
	}
	h := cuda.HostBuffer{Device: 1, ID: 5, Size: 4096}
	in, err := cuda.StageIn(f.Whole(), h.Whole())
	if err != nil {
		t.Fatal(err)
	}
	out, err := cuda.StageOut(h.Whole(), g.Whole())
	if err != nil {
		t.Fatal(err)
	}
	return []cuda.Command{launch, up, cp, z, in, out}
}

func TestWireRoundTrip(t *testing.T) {
	for _, c := range sampleCommands(t) {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var got cuda.Command
		if err := got.UnmarshalBinary(b); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Fatalf("round trip of %v gave %v", c, got)
		}
		for cut := range len(b) {
			var partial cuda.Command
			if err := partial.UnmarshalBinary(b[:cut]); !errors.Is(err, cuda.ErrEncoding) {
				t.Fatalf("%v cut at %d: %v", c, cut, err)
			}
		}
	}
	if _, err := (cuda.Command{Kind: cuda.KindZero}).MarshalBinary(); err == nil {
		t.Fatal("marshalled an invalid command")
	}
}

// FuzzCommandDecode feeds arbitrary bytes to the decoder: it must never
// panic, must fail with a typed error, and whatever it accepts must be a
// valid command that encodes back to the same bytes.
func FuzzCommandDecode(f *testing.F) {
	for _, c := range sampleCommands(f) {
		b, _ := c.MarshalBinary()
		f.Add(b)
	}
	f.Add([]byte{1, 1, 255, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		var c cuda.Command
		err := c.UnmarshalBinary(data)
		if err != nil {
			var ce *cuda.Error
			if !errors.As(err, &ce) || ce.Code != cuda.CodeRuntimeContract {
				t.Fatalf("untyped decode error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("decoded an invalid command: %v", err)
		}
		again, err := c.MarshalBinary()
		if err != nil || !reflect.DeepEqual(again, data) {
			t.Fatalf("re-encoding differs: %v", err)
		}
		if spec, ok := kernels.Builtin().Kernel(c.Kernel); ok {
			_ = c.ValidateLaunch(spec) // must not panic on any argument list
		}
	})
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
			t.Fatalf("region(%d, %d) of %d-byte %v buffer: %v, model says ok=%v", off, length, size, cuda.ElementType(elem), err, ok)
		}
	})
}

func TestLinear(t *testing.T) {
	c := cuda.Linear(1000, 256)
	if c.Grid.X != 4 || c.Block.X != 256 || c.Threads() != 1024 || c.Validate() != nil {
		t.Fatalf("linear %+v", c)
	}
	if c := cuda.Linear(0, 0); c.Grid.X != 1 || c.Block.X != 256 {
		t.Fatalf("linear of 0: %+v", c)
	}
}
