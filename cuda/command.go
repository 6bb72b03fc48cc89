// Commands: kernel launches, uploads, copies, memsets and staging copies,
// the unit a stream enqueues and a graph captures.

package cuda

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"

	"github.com/lanesched/lanes/internal/half"
)

// Arg is one kernel argument: a buffer region, a scalar or a struct's
// bytes.
type Arg struct {
	Kind   ParamKind
	Region Region      // for ParamBuffer
	Elem   ElementType // for ParamScalar
	Bits   uint64      // for ParamScalar: the value's bits, zero-extended
	// Struct is a ParamStruct's bytes, as the C struct lies in memory
	// (little-endian, with its padding): a string, so an Arg stays a
	// comparable value and the bytes cannot change after the launch is
	// built.
	Struct string
}

// StructArg passes a struct by value: its bytes, copied, exactly as the
// kernel's C type lies in memory (sizeof bytes, padding included).
func StructArg(b []byte) Arg { return Arg{Kind: ParamStruct, Struct: string(b)} }

// F16Arg passes a float32 as a half-precision scalar (__half), rounded to
// nearest even.
func F16Arg(v float32) Arg {
	return Arg{Kind: ParamScalar, Elem: F16, Bits: uint64(half.Float16Bits(v))}
}

// BF16Arg passes a float32 as a bfloat16 scalar (__nv_bfloat16), rounded
// to nearest even.
func BF16Arg(v float32) Arg {
	return Arg{Kind: ParamScalar, Elem: BF16, Bits: uint64(half.BFloat16Bits(v))}
}

// BufferArg passes a region to a buffer parameter.
func BufferArg(r Region) Arg { return Arg{Kind: ParamBuffer, Region: r} }

// F32Arg passes a float32 scalar.
func F32Arg(v float32) Arg {
	return Arg{Kind: ParamScalar, Elem: F32, Bits: uint64(math.Float32bits(v))}
}

// I32Arg passes an int32 scalar.
func I32Arg(v int32) Arg { return Arg{Kind: ParamScalar, Elem: I32, Bits: uint64(uint32(v))} }

// U32Arg passes a uint32 scalar.
func U32Arg(v uint32) Arg { return Arg{Kind: ParamScalar, Elem: U32, Bits: uint64(v)} }

// I64Arg passes an int64 scalar (int64_t, long, ptrdiff_t).
func I64Arg(v int64) Arg { return Arg{Kind: ParamScalar, Elem: I64, Bits: uint64(v)} }

// U64Arg passes a uint64 scalar (uint64_t, size_t).
func U64Arg(v uint64) Arg { return Arg{Kind: ParamScalar, Elem: U64, Bits: v} }

// F64Arg passes a float64 scalar (double).
func F64Arg(v float64) Arg { return Arg{Kind: ParamScalar, Elem: F64, Bits: math.Float64bits(v)} }

// F32 reads a scalar argument's low 4 bytes as a float32 (no conversion:
// a value passed with F32Arg).
func (a Arg) F32() float32 { return math.Float32frombits(uint32(a.Bits)) }

// I32 reads a scalar argument's low 4 bytes as an int32.
func (a Arg) I32() int32 { return int32(uint32(a.Bits)) }

// U32 reads a scalar argument's low 4 bytes as a uint32.
func (a Arg) U32() uint32 { return uint32(a.Bits) }

// I64 reads a scalar argument's 8 bytes as an int64 (an I32Arg's bits
// are zero-extended: read it with I32).
func (a Arg) I64() int64 { return int64(a.Bits) }

// U64 reads a scalar argument's 8 bytes as a uint64.
func (a Arg) U64() uint64 { return a.Bits }

// F64 reads a scalar argument's 8 bytes as a float64 (no conversion: a
// value passed with F64Arg).
func (a Arg) F64() float64 { return math.Float64frombits(a.Bits) }

// F16 reads a scalar argument's low 2 bytes as a half (F16Arg), widened
// to float32 exactly.
func (a Arg) F16() float32 { return half.Float16From(uint16(a.Bits)) }

// BF16 reads a scalar argument's low 2 bytes as a bfloat16 (BF16Arg),
// widened to float32 exactly.
func (a Arg) BF16() float32 { return half.BFloat16From(uint16(a.Bits)) }

// StructBytes is a struct argument's bytes (a copy).
func (a Arg) StructBytes() []byte { return []byte(a.Struct) }

// CommandKind is the kind of a device command.
type CommandKind uint8

// The commands a stream accepts.
const (
	KindLaunch   CommandKind = iota + 1 // a kernel launch
	KindUpload                          // a host-to-device copy of retained host bytes
	KindCopy                            // a device-to-device copy
	KindZero                            // a memset to zero
	KindStageIn                         // a host-to-device copy from pinned staging, read when it runs
	KindStageOut                        // a device-to-host copy into pinned staging
	KindCall                            // a library call: user code that enqueues work on the stream (see LibraryCall)
)

// String returns the kind's snake_case name: "launch", "upload", "copy", "zero",
// "stage_in", "stage_out" or "call" ("kind(N)" for any other value).
func (k CommandKind) String() string {
	switch k {
	case KindLaunch:
		return "launch"
	case KindUpload:
		return "upload"
	case KindCopy:
		return "copy"
	case KindZero:
		return "zero"
	case KindStageIn:
		return "stage_in"
	case KindStageOut:
		return "stage_out"
	case KindCall:
		return "call"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Command is one unit of device work. Build it with [Launch], [Upload],
// [Copy] or [Zero], which validate it; a device validates it again, against
// its own handles, when it is enqueued. A command is a plain value; an upload
// owns a private copy of its host bytes (the retained host bytes), which a
// captured graph reads again at every replay.
type Command struct {
	Kind   CommandKind
	Kernel string       // launch: the kernel's name
	Config LaunchConfig // launch: grid, block, shared memory
	Args   []Arg        // launch: one per kernel parameter
	Dst    Region       // upload, copy, zero: the destination
	Src    Region       // copy: the source
	Host   []byte       // upload: the retained host bytes; len(Host) == Dst.Length
	// Staging is the pinned host region of a stage_in (source) or a
	// stage_out (destination).
	Staging HostRegion
	// LibraryCall is a call's user code and the regions it touches.
	LibraryCall *LibraryCall
}

// Launch builds a kernel launch, checked against the kernel's spec: arity,
// parameter kinds and element types, every region, the launch configuration,
// and the kernel's own extent check.
func Launch(k *KernelSpec, cfg LaunchConfig, args ...Arg) (Command, error) {
	if k == nil {
		return Command{}, contractf("launch", ErrUnknownKernel, "nil kernel spec; look the kernel up in the device's registry")
	}
	c := Command{Kind: KindLaunch, Kernel: k.Name, Config: cfg, Args: append([]Arg(nil), args...)}
	return c, c.ValidateLaunch(k)
}

// LaunchNamed builds a launch of the kernel a device serves under name
// (look-up and Launch in one call, on any backend: pass dev.Kernels()). A
// kernel the device has not loaded is ErrUnknownKernel.
func LaunchNamed(ks Kernels, name string, cfg LaunchConfig, args ...Arg) (Command, error) {
	if ks == nil {
		return Command{}, contractf("launch", ErrUnknownKernel, "no kernels given to look %q up in; pass the device's (dev.Kernels())", name)
	}
	k, ok := ks.Kernel(name)
	if !ok {
		return Command{}, contractf("launch", ErrUnknownKernel, "kernel %q is not loaded on this device; load its module first (kernels.Loader)", name)
	}
	return Launch(&k, cfg, args...)
}

// Upload builds a host-to-device copy of data into dst. The bytes are copied
// now and retained by the command, so the caller may reuse data at once.
func Upload(dst Region, data []byte) (Command, error) {
	c := Command{Kind: KindUpload, Dst: dst, Host: append([]byte(nil), data...)}
	return c, c.Validate()
}

// Copy builds a device-to-device copy of src into dst.
func Copy(dst, src Region) (Command, error) {
	c := Command{Kind: KindCopy, Dst: dst, Src: src}
	return c, c.Validate()
}

// Zero builds a memset of dst to zero bytes.
func Zero(dst Region) (Command, error) {
	c := Command{Kind: KindZero, Dst: dst}
	return c, c.Validate()
}

// Validate checks everything about the command that needs no device and no
// kernel spec: its kind, its regions, and the shape of its payload. A launch
// is checked against its kernel by [Command.ValidateLaunch].
func (c Command) Validate() error {
	op := c.Kind.String()
	switch c.Kind {
	case KindCall:
		return c.validateCall()
	case KindLaunch:
		if c.Kernel == "" {
			return contractf(op, ErrUnknownKernel, "launch names no kernel")
		}
		if len(c.Kernel) > MaxKernelName || !utf8.ValidString(c.Kernel) {
			return contractf(op, ErrInvalidCommand, "kernel name %.40q: a name is at most %d bytes of UTF-8", c.Kernel, MaxKernelName)
		}
		if err := c.Config.Validate(); err != nil {
			return err
		}
		for i, a := range c.Args {
			if err := a.validate(i); err != nil {
				return err
			}
		}
		return nil
	case KindUpload:
		if err := c.Dst.Validate(); err != nil {
			return err
		}
		if uint64(len(c.Host)) != c.Dst.Length {
			return contractf(op, ErrOutOfBounds, "upload carries %d host bytes for a %d-byte destination; they must match", len(c.Host), c.Dst.Length)
		}
		return nil
	case KindCopy:
		if err := c.Dst.Validate(); err != nil {
			return err
		}
		if err := c.Src.Validate(); err != nil {
			return err
		}
		if c.Src.Length != c.Dst.Length {
			return contractf(op, ErrOutOfBounds, "copy of %d source bytes into %d destination bytes; lengths must match", c.Src.Length, c.Dst.Length)
		}
		if c.Src.Buffer.Elem != c.Dst.Buffer.Elem {
			return contractf(op, ErrElementType, "copy from %v to %v; element types must match", c.Src.Buffer.Elem, c.Dst.Buffer.Elem)
		}
		if c.Src.Overlaps(c.Dst) {
			return contractf(op, ErrInvalidCommand, "copy source and destination overlap in buffer %d; copy through a scratch buffer", c.Dst.Buffer.ID)
		}
		return nil
	case KindZero:
		return c.Dst.Validate()
	case KindStageIn, KindStageOut:
		dev := c.Dst
		if c.Kind == KindStageOut {
			dev = c.Src
		}
		if err := dev.Validate(); err != nil {
			return err
		}
		if err := c.Staging.Validate(); err != nil {
			return err
		}
		if c.Staging.Length != dev.Length {
			return contractf(op, ErrOutOfBounds, "%v of %d staging bytes and a %d-byte device region; lengths must match", c.Kind, c.Staging.Length, dev.Length)
		}
		if c.Staging.Buffer.Device != dev.Buffer.Device {
			return contractf(op, ErrForeignHandle, "staging of device instance %d with a buffer of %d", c.Staging.Buffer.Device, dev.Buffer.Device)
		}
		return nil
	}
	if c.Kind == 0 {
		return contractf("command", ErrInvalidCommand, "an empty command (kind 0); build one with cuda.Launch, LaunchNamed, Upload, Copy or Zero (lanes.Launch, lanes.Upload at the front door)")
	}
	return contractf("command", ErrInvalidCommand, "unknown command kind %d", uint8(c.Kind))
}

func (a Arg) validate(i int) error {
	switch a.Kind {
	case ParamBuffer:
		return a.Region.Validate()
	case ParamScalar:
		if !a.Elem.Valid() {
			return contractf("launch", ErrElementType, "argument %d is a scalar of undefined element type", i)
		}
		if a.Elem.Size() < 8 && a.Bits>>(8*a.Elem.Size()) != 0 {
			return contractf("launch", ErrInvalidCommand, "argument %d: %v scalar has bits beyond its %d bytes", i, a.Elem, a.Elem.Size())
		}
		return nil
	case ParamStruct:
		if len(a.Struct) == 0 || len(a.Struct) > MaxStructBytes {
			return contractf("launch", ErrInvalidCommand, "argument %d: a struct of %d bytes; pass 1 to %d (cuda.StructArg)", i, len(a.Struct), MaxStructBytes)
		}
		return nil
	}
	return contractf("launch", ErrInvalidCommand, "argument %d has unknown kind %d", i, uint8(a.Kind))
}

// ValidateLaunch checks a launch against its kernel's spec.
func (c Command) ValidateLaunch(k *KernelSpec) error {
	const op = "launch"
	if err := c.Validate(); err != nil {
		return err
	}
	if c.Kernel != k.Name {
		return contractf(op, ErrUnknownKernel, "command launches %q but the spec is %q", c.Kernel, k.Name)
	}
	if n := c.Config.Threads(); k.MaxThreads > 0 && n > k.MaxThreads {
		return contractf(op, ErrLaunchConfig, "kernel %s: the launch runs %d threads; this device runs at most %d in one launch", k.Name, n, k.MaxThreads)
	}
	if n := c.Config.Block.Count(); k.MaxBlockThreads > 0 && n > uint64(k.MaxBlockThreads) {
		return contractf(op, ErrLaunchConfig, "kernel %s: block %v has %d threads; this function runs at most %d per block", k.Name, c.Config.Block, n, k.MaxBlockThreads)
	}
	if k.MaxSharedBytes > 0 && c.Config.SharedBytes > k.MaxSharedBytes {
		return contractf(op, ErrLaunchConfig, "kernel %s: %d bytes of dynamic shared memory; this function takes at most %d", k.Name, c.Config.SharedBytes, k.MaxSharedBytes)
	}
	if len(c.Args) != len(k.Params) {
		return contractf(op, ErrKernelArity, "kernel %s takes %d arguments, got %d", k.Name, len(k.Params), len(c.Args))
	}
	for i, p := range k.Params {
		a := c.Args[i]
		if a.Kind != p.Kind {
			want := "a buffer region (cuda.BufferArg)"
			switch p.Kind {
			case ParamScalar:
				want = "a scalar"
			case ParamStruct:
				want = fmt.Sprintf("a struct of %d bytes (cuda.StructArg)", p.Size)
			}
			return contractf(op, ErrElementType, "kernel %s argument %d (%s) must be %s", k.Name, i, p.Name, want)
		}
		if a.Kind == ParamStruct {
			if len(a.Struct) != int(p.Size) {
				return contractf(op, ErrElementType, "kernel %s argument %d (%s) is a struct of %d bytes (sizeof, padding included), got %d", k.Name, i, p.Name, p.Size, len(a.Struct))
			}
			continue
		}
		got := a.Elem
		if a.Kind == ParamBuffer {
			got = a.Region.Buffer.Elem
		}
		if got != p.Elem {
			return contractf(op, ErrElementType, "kernel %s argument %d (%s) must be %v, got %v", k.Name, i, p.Name, p.Elem, got)
		}
	}
	if k.Check != nil {
		if err := checkExtent(k, c.Args); err != nil {
			return err
		}
	}
	if k.Shape != nil {
		return checkShape(k, c.Config, c.Args)
	}
	return nil
}

// checkShape runs a kernel's launch-shape rule: a *cuda.Error it returns
// comes back as it is; any other error, or a panic, is the launch's shape
// being wrong as the rule says (ErrLaunchConfig).
func checkShape(k *KernelSpec, cfg LaunchConfig, args []Arg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = contractf("launch", ErrLaunchConfig, "kernel %s: its launch-shape rule panicked: %v", k.Name, p)
		}
	}()
	if err = k.Shape(cfg, args); err != nil && !isDeviceError(err) {
		return contractf("launch", ErrLaunchConfig, "kernel %s: grid %v, block %v, %d B of shared memory: %v", k.Name, cfg.Grid, cfg.Block, cfg.SharedBytes, err)
	}
	return err
}

// checkExtent runs a kernel's extent check: a *cuda.Error it returns comes
// back as it is; any other error, or a panic, is the caller's launch being
// wrong as the check says (ErrOutOfBounds).
func checkExtent(k *KernelSpec, args []Arg) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = contractf("launch", ErrOutOfBounds, "kernel %s: its extent check panicked: %v", k.Name, p)
		}
	}()
	if err = k.Check(args); err != nil && !isDeviceError(err) {
		return contractf("launch", ErrOutOfBounds, "kernel %s: %v", k.Name, err)
	}
	return err
}

// isDeviceError reports whether err is, or wraps, an *Error. It is kept
// out of line so that checkExtent's path without an error allocates
// nothing (errors.As's target escapes).
//
//go:noinline
func isDeviceError(err error) bool {
	var ce *Error
	return errors.As(err, &ce)
}

// String describes the command for logs and traces.
func (c Command) String() string {
	switch c.Kind {
	case KindLaunch:
		return fmt.Sprintf("launch %s grid=%v block=%v args=%d", c.Kernel, c.Config.Grid, c.Config.Block, len(c.Args))
	case KindUpload:
		return fmt.Sprintf("upload %dB -> buf%d+%d", c.Dst.Length, c.Dst.Buffer.ID, c.Dst.Offset)
	case KindCopy:
		return fmt.Sprintf("copy %dB buf%d+%d -> buf%d+%d", c.Dst.Length, c.Src.Buffer.ID, c.Src.Offset, c.Dst.Buffer.ID, c.Dst.Offset)
	case KindZero:
		return fmt.Sprintf("zero %dB buf%d+%d", c.Dst.Length, c.Dst.Buffer.ID, c.Dst.Offset)
	case KindStageIn:
		return fmt.Sprintf("stage_in %dB host%d+%d -> buf%d+%d", c.Dst.Length, c.Staging.Buffer.ID, c.Staging.Offset, c.Dst.Buffer.ID, c.Dst.Offset)
	case KindStageOut:
		return fmt.Sprintf("stage_out %dB buf%d+%d -> host%d+%d", c.Src.Length, c.Src.Buffer.ID, c.Src.Offset, c.Staging.Buffer.ID, c.Staging.Offset)
	case KindCall:
		if c.LibraryCall != nil {
			return fmt.Sprintf("call %s regions=%d", c.LibraryCall.Name, len(c.LibraryCall.Regions))
		}
	}
	return c.Kind.String()
}
