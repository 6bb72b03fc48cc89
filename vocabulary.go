package lanes

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// The words a serving program uses, from the packages that define them,
// so that it needs no other import than this package and its device's.

// Device is a CUDA device: cuda/sim's simulated one or cuda/driver's.
type Device = cuda.Device

// Buffer is a device buffer handle; Region a byte range of one
// (Buffer.Whole, Buffer.Region).
type (
	Buffer = cuda.Buffer
	Region = cuda.Region
)

// BufferSpec says what to allocate: Size bytes of Elem elements.
type BufferSpec = cuda.BufferSpec

// Element types of buffers and scalar arguments.
const (
	Bool = cuda.Bool
	U8   = cuda.U8
	I8   = cuda.I8
	U32  = cuda.U32
	I32  = cuda.I32
	F16  = cuda.F16
	BF16 = cuda.BF16
	F32  = cuda.F32
	I64  = cuda.I64
	U64  = cuda.U64
	F64  = cuda.F64
)

// Batch is one submission's entries, Entry one of them, and Receipt the
// report of its end (package lanes/lanes).
type (
	Batch   = lanes.Batch
	Entry   = lanes.Entry
	Receipt = lanes.Receipt
)

// ReplayCount is how many of a receipt's entries replayed, and why each
// other one ran eagerly (Receipt.Replays).
type ReplayCount = lanes.ReplayCount

// Command is one device command (a launch, upload, copy, library call);
// Arg one kernel argument; Kernels the kernels a device can launch;
// LaunchConfig a launch's grid, block and shared memory.
type (
	Command      = cuda.Command
	Arg          = cuda.Arg
	Kernels      = cuda.Kernels
	LaunchConfig = cuda.LaunchConfig
)

// Replayed is a compute entry keyed for replay: cmd as plan node node of
// the provider (a name and version that changes whenever what its commands
// compute does). A plan node is one step of the provider's plan: the
// command's place in the step, the same number every time the step runs
// (0, 1, 2, ... for a step of several launches). A lane captures repeated
// runs of such entries into a CUDA graph and replays it.
func Replayed(provider string, node int, cmd Command) Entry {
	return lanes.Replayed(provider, node, cmd)
}

// Input is an eager entry of per-request input before compute (an upload
// of a step's input, say); Output one that moves results out after it.
func Input(cmd Command) Entry { return lanes.Input(cmd) }

// Output is an eager entry that moves results out after compute.
func Output(cmd Command) Entry { return lanes.Output(cmd) }

// Launch is a launch of the kernel named kernel (of ks: Server.Kernels)
// with shape and args, checked against the kernel's declared parameters.
func Launch(ks Kernels, kernel string, shape LaunchConfig, args ...Arg) (Command, error) {
	return cuda.LaunchNamed(ks, kernel, shape, args...)
}

// Upload is a command that writes data into dst (exactly dst's length).
func Upload(dst Region, data []byte) (Command, error) { return cuda.Upload(dst, data) }

// Linear is the launch shape for n threads in blocks of blockSize (at
// least one block; blockSize 0 means 256).
func Linear(n, blockSize uint32) LaunchConfig { return cuda.Linear(n, blockSize) }

// BufferArg passes a region of a buffer as a pointer argument.
func BufferArg(r Region) Arg { return cuda.BufferArg(r) }

// I32Arg passes an int32 scalar.
func I32Arg(v int32) Arg { return cuda.I32Arg(v) }

// U32Arg passes a uint32 scalar.
func U32Arg(v uint32) Arg { return cuda.U32Arg(v) }

// I64Arg passes an int64 scalar.
func I64Arg(v int64) Arg { return cuda.I64Arg(v) }

// U64Arg passes a uint64 scalar.
func U64Arg(v uint64) Arg { return cuda.U64Arg(v) }

// F32Arg passes a float32 scalar.
func F32Arg(v float32) Arg { return cuda.F32Arg(v) }

// F64Arg passes a float64 scalar.
func F64Arg(v float64) Arg { return cuda.F64Arg(v) }

// F16Arg passes a float32 as a half-precision scalar (__half), rounded to
// nearest even.
func F16Arg(v float32) Arg { return cuda.F16Arg(v) }

// BF16Arg passes a float32 as a bfloat16 scalar (__nv_bfloat16), rounded
// to nearest even.
func BF16Arg(v float32) Arg { return cuda.BF16Arg(v) }

// StructArg passes a struct by value: its bytes, copied, exactly as the
// kernel's C type lies in memory (sizeof bytes, padding included).
func StructArg(b []byte) Arg { return cuda.StructArg(b) }

// Class is what an error means: its stable Code, whose failure it was
// (Blame), whether to retry, and whether the batch ran at all.
type Class = cuda.Class

// Classify classifies any error lanes returns (nil is success).
func Classify(err error) Class { return cuda.Classify(err) }
