// Kernels: parameters, their access, specs and launch configurations.

package cuda

import "fmt"

// ParamKind says whether a kernel parameter is a device buffer, a scalar or
// a struct passed by value.
type ParamKind uint8

// The kinds of kernel parameters.
const (
	ParamBuffer ParamKind = iota + 1
	ParamScalar
	// ParamStruct is a struct (or vector, or array wrapper) passed by
	// value: Param.Size bytes aligned to Param.Align, as the compiler lays
	// it out (sizeof and alignof of the C type). Its argument is the
	// struct's bytes (StructArg).
	ParamStruct
)

// MaxStructBytes is the largest struct a parameter may pass by value, and
// MaxStructAlign the largest alignment it may declare.
const (
	MaxStructBytes = 4096
	MaxStructAlign = 256
)

// ValidStruct reports whether size and align can be a struct parameter's
// (Param.Size, Param.Align): size 1 to MaxStructBytes, a multiple of
// align, a power of two up to MaxStructAlign.
func ValidStruct(size, align uint32) bool {
	return size > 0 && size <= MaxStructBytes && align > 0 && align&(align-1) == 0 && align <= MaxStructAlign && size%align == 0
}

// Access is how a kernel uses a buffer parameter.
type Access uint8

// The accesses a buffer parameter may declare.
const (
	AccessRead Access = iota + 1
	AccessWrite
	AccessReadWrite
)

// Valid reports whether a is one of the declared accesses (read, write,
// readwrite).
func (a Access) Valid() bool { return a >= AccessRead && a <= AccessReadWrite }

// Writes reports whether the access may modify the buffer.
func (a Access) Writes() bool { return a == AccessWrite || a == AccessReadWrite }

// String returns "read", "write" or "readwrite".
func (a Access) String() string {
	switch a {
	case AccessRead:
		return "read"
	case AccessWrite:
		return "write"
	case AccessReadWrite:
		return "readwrite"
	}
	return fmt.Sprintf("access(%d)", uint8(a))
}

// Param is one kernel parameter: its name, kind, element type (of a buffer
// or a scalar) and, for buffers, its access; for a struct passed by value,
// its size and alignment in bytes instead of an element type.
type Param struct {
	Name   string
	Kind   ParamKind
	Elem   ElementType
	Access Access
	// Size and Align are a ParamStruct's sizeof and alignof: Size 1 to
	// MaxStructBytes, a multiple of Align, a power of two up to 256.
	Size, Align uint32
}

// KernelSpec is the launch contract of one kernel: its name (the symbol in
// the compiled module) and parameter signature. Check, when set, validates the
// argument values beyond their types (extents against region sizes), so a
// launch that would read or write outside its regions is rejected before it
// is enqueued.
type KernelSpec struct {
	Name   string
	Params []Param
	// Check is the kernel's extent check, run on every launch built or
	// enqueued: it returns a contract *Error (Contractf with
	// ErrOutOfBounds) when the arguments reach outside their regions; any
	// other error, or a panic, is taken as the same refusal.
	Check func(args []Arg) error
	// Shape, when set, is the kernel's launch-shape rule, run on every
	// launch built or enqueued after Check: the grid and block against the
	// arguments, and the dynamic shared memory the kernel needs (a kernel
	// that takes its row from blockIdx.x without a guard needs no more
	// blocks than rows; one that reduces in shared memory needs a block of
	// a power of two and threads/32 x 4 bytes of it). It returns a
	// contract *Error (Contractf with ErrLaunchConfig) when the launch
	// would go wrong on the GPU; any other error, or a panic, is taken as
	// the same refusal. Nothing it refuses reaches a device.
	Shape func(cfg LaunchConfig, args []Arg) error
	// MaxThreads, when set, is the most threads (grid times block) one
	// launch may run; a larger launch is refused with ErrLaunchConfig. The
	// simulated device sets it, since it runs every thread's work on the
	// host.
	MaxThreads uint64
	// MaxBlockThreads and MaxSharedBytes, when set, are the function's own
	// limits (below the device's MaxThreadsPerBlock and MaxSharedBytes):
	// the real device reads them from the driver when it loads a module
	// (cuFuncGetAttribute), so a launch beyond them is refused with
	// ErrLaunchConfig before it reaches the GPU.
	MaxBlockThreads uint32
	MaxSharedBytes  uint32
}

// Kernels resolves kernel names to their specs. A device serves the kernels
// it can launch through it.
type Kernels interface {
	// Kernel is the spec of the kernel named name, if there is one.
	Kernel(name string) (KernelSpec, bool)
	// Names lists every kernel's name, sorted.
	Names() []string
}

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Count is X*Y*Z, with zero dimensions counted as they are.
func (d Dim3) Count() uint64 { return uint64(d.X) * uint64(d.Y) * uint64(d.Z) }

// LaunchConfig is the grid, block and dynamic shared memory of a launch.
type LaunchConfig struct {
	Grid        Dim3
	Block       Dim3
	SharedBytes uint32
}

// Limits of a launch configuration, as on compute capability 9.0.
const (
	MaxThreadsPerBlock = 1024
	MaxBlockZ          = 64
	MaxGridX           = 1<<31 - 1
	MaxGridYZ          = 65535
	MaxSharedBytes     = 48 << 10
)

// Linear returns a one-dimensional configuration of enough blocks of
// blockSize threads to cover n threads: at least one block (n of 0 gives
// one), and blocks of 256 threads when blockSize is 0. The kernel's own
// bounds (its n argument) decide which threads work.
func Linear(n, blockSize uint32) LaunchConfig {
	if blockSize == 0 {
		blockSize = 256
	}
	blocks := (uint64(n) + uint64(blockSize) - 1) / uint64(blockSize)
	if blocks == 0 {
		blocks = 1
	}
	return LaunchConfig{Grid: Dim3{uint32(min(blocks, MaxGridX)), 1, 1}, Block: Dim3{blockSize, 1, 1}}
}

// Validate checks the configuration against the device limits.
func (c LaunchConfig) Validate() error {
	const op = "launch"
	g, b := c.Grid, c.Block
	switch {
	case g.X == 0 || g.Y == 0 || g.Z == 0 || b.X == 0 || b.Y == 0 || b.Z == 0:
		return contractf(op, ErrLaunchConfig, "grid %v and block %v must have every dimension >= 1", g, b)
	case b.Count() > MaxThreadsPerBlock:
		return contractf(op, ErrLaunchConfig, "block %v has %d threads; at most %d", b, b.Count(), MaxThreadsPerBlock)
	case b.Z > MaxBlockZ:
		return contractf(op, ErrLaunchConfig, "block z %d exceeds %d", b.Z, MaxBlockZ)
	case g.X > MaxGridX || g.Y > MaxGridYZ || g.Z > MaxGridYZ:
		return contractf(op, ErrLaunchConfig, "grid %v exceeds (%d, %d, %d)", g, MaxGridX, MaxGridYZ, MaxGridYZ)
	case c.SharedBytes > MaxSharedBytes:
		return contractf(op, ErrLaunchConfig, "dynamic shared memory %d exceeds %d bytes", c.SharedBytes, MaxSharedBytes)
	}
	return nil
}

// Threads is the number of threads the launch runs.
func (c LaunchConfig) Threads() uint64 { return c.Grid.Count() * c.Block.Count() }
