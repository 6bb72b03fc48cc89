// Package kernels is the registry of the kernels lanes launches: for each, its
// launch contract ([cuda.KernelSpec]), a Go reference implementation that the
// simulated device runs, and the CUDA C source (kernels.cu) the real device
// loads as PTX ([PTX]). The same tests check both devices against the
// references.
package kernels

import (
	"github.com/lanesched/lanes/internal/codes"

	_ "embed"
	"encoding/binary"
	"math"
	"sort"

	"github.com/lanesched/lanes/cuda"
)

// Source is the CUDA C source of every kernel here.
//
//go:embed kernels.cu
var Source string

// PTX is Source compiled by scripts/gen-ptx.sh (compute_80, -fmad=false);
// the real device loads it with cuModuleLoadData, and the driver JIT-compiles
// it for the GPU at hand.
//
//go:embed kernels.ptx
var PTX string

// Memory is the device memory a reference kernel sees for one buffer
// argument: the bytes from the argument region's first byte to the end of its
// allocation, as a pointer into device memory would reach.
type Memory []byte

// ErrIllegalAddress is returned by a reference kernel that touches memory
// outside its allocation; the simulated device turns it into CUDA's sticky
// illegal-address error.
var ErrIllegalAddress = codes.NewSentinel(codes.IllegalAddress, "kernels: access outside the allocation")

// Shape is a launch as a reference kernel sees it: the kernels here index
// by the global x thread id (blockIdx.x*blockDim.x + threadIdx.x), so a
// launch is ThreadsX such ids, each run Replicas times (once per y and z
// thread and block), as the GPU would.
type Shape struct {
	ThreadsX int64
	Replicas int64
	// Config is the launch itself (grid, block, dynamic shared memory),
	// for a reference that follows the kernel's block structure: a
	// block-wide reduction sums in the order blockDim gives it.
	Config cuda.LaunchConfig
}

// shapeOf returns the shape of a launch configuration.
func shapeOf(cfg cuda.LaunchConfig) Shape {
	g, b := cfg.Grid, cfg.Block
	return Shape{
		ThreadsX: int64(g.X) * int64(b.X),
		Replicas: int64(g.Y) * int64(g.Z) * int64(b.Y) * int64(b.Z),
		Config:   cfg,
	}
}

// Kernel is one registered kernel.
type Kernel struct {
	Spec cuda.KernelSpec
	// Body runs the whole launch: mem holds one Memory per buffer parameter,
	// in order, and args every argument (scalars are read from it). It
	// returns ErrIllegalAddress if any thread would touch memory outside
	// its allocation (the sticky illegal address); any other error, or a
	// panic, is the kernel failing on the device (a sticky launch failure,
	// the error reachable through errors.As as a *cuda.CallError). It must
	// not block (the simulated device runs every stream's work under one
	// execution lock) and must not keep mem past its return.
	Body func(shape Shape, mem []Memory, args []cuda.Arg) error
}

// Clone returns a copy of the kernel that shares nothing a caller may
// change in place: a device keeps clones, so editing a spec after it was
// loaded (or one a device returned) changes no device's contract.
func (k *Kernel) Clone() *Kernel {
	c := *k
	c.Spec.Params = append([]cuda.Param(nil), k.Spec.Params...)
	return &c
}

// Run executes the kernel's reference for a launch.
// It passes args as they are: a caller that must keep them (the simulated
// device, whose captured launches replay) gives Run a copy.
func (k *Kernel) Run(cfg cuda.LaunchConfig, mem []Memory, args []cuda.Arg) error {
	return k.Body(shapeOf(cfg), mem, args)
}

// Registry maps kernel names to kernels; it implements [cuda.Kernels].
type Registry map[string]*Kernel

// Kernel returns a copy of the named kernel's spec: changing its fields
// changes nothing in the registry. Its Params are the registry's, shared
// with everyone who looks the kernel up: read them (a device enforces its
// own copy; Clone a kernel to declare a variant).
func (r Registry) Kernel(name string) (cuda.KernelSpec, bool) {
	k, ok := r[name]
	if !ok {
		return cuda.KernelSpec{}, false
	}
	return k.Spec, true
}

// Names lists the registered kernels, sorted.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r))
	for n := range r {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// MustSpec returns the spec of a kernel known to exist; it panics otherwise, so
// it is for the package's own well-known names.
func (r Registry) MustSpec(name string) *cuda.KernelSpec {
	s, ok := r.Kernel(name)
	if !ok {
		panic("kernels: no kernel " + name)
	}
	return &s
}

// Names of the built-in kernels: every one is in Builtin(). Each comment
// gives its arguments in launch order (buffers as regions, BufferArg;
// scalars of the type named) and what it computes for i < n.
const (
	Fill   = "fill_f32"    // (out f32 buffer, value f32, n i32): out[i] = value
	Axpy   = "axpy_f32"    // (y f32 buffer, x f32 buffer, a f32, n i32): y[i] += a*x[i]
	Add    = "add_f32"     // (out f32 buffer, a f32 buffer, b f32 buffer, n i32): out[i] = a[i] + b[i]
	RowSum = "row_sum_f32" // (out f32 buffer, in f32 buffer, rows i32, cols i32): out[r] = the sum of row r of in
	Gemv   = "gemv_f32"    // (y f32 buffer, a f32 buffer, x f32 buffer, rows i32, cols i32): y = a·x, a row-major
	Inc    = "inc_i32"     // (p i32 buffer, n i32): p[i]++
)

// Poke names the fault-injection kernel that writes any index of its
// buffer, unchecked. It is in FaultInjection(), never in Builtin(): look
// it up in Builtin().With(FaultInjection()) (Builtin().MustSpec(Poke)
// panics, as MustSpec does for any name its registry lacks).
const Poke = "poke_i32"

// Builtin returns a fresh registry of the built-in kernels. Every one of
// them checks its extent at the boundary (cuda.KernelSpec.Check), so no
// launch a tenant can build through it writes outside its regions.
func Builtin() Registry {
	r := Registry{}
	for _, k := range builtin {
		r[k.Spec.Name] = k.Clone()
	}
	return r
}

// FaultInjection returns a registry of kernels that deliberately skip their
// bounds checks ([Poke] writes any index of its buffer), for tests that
// provoke real device faults. A device a tenant can reach must never
// register them: add them only where a test builds its device
// (Builtin().With(FaultInjection())).
func FaultInjection() Registry {
	r := Registry{}
	for _, k := range faultInjection {
		r[k.Spec.Name] = k.Clone()
	}
	return r
}

// With returns a new registry holding r's kernels and more's (more's win
// on a shared name).
func (r Registry) With(more Registry) Registry {
	out := make(Registry, len(r)+len(more))
	for n, k := range r {
		out[n] = k
	}
	for n, k := range more {
		out[n] = k
	}
	return out
}

func buf(name string, e cuda.ElementType, a cuda.Access) cuda.Param {
	return cuda.Param{Name: name, Kind: cuda.ParamBuffer, Elem: e, Access: a}
}

func scalar(name string, e cuda.ElementType) cuda.Param {
	return cuda.Param{Name: name, Kind: cuda.ParamScalar, Elem: e}
}

// extent checks that count elements fit every named buffer argument and
// that count itself is not negative.
func extent(kernel string, count int64, args []cuda.Arg, bufs ...int) error {
	if count < 0 {
		return cuda.Contractf("launch", cuda.ErrOutOfBounds, "kernel %s: element count %d is negative", kernel, count)
	}
	for _, i := range bufs {
		if have := args[i].Region.Elements(); uint64(count) > have {
			return cuda.Contractf("launch", cuda.ErrOutOfBounds,
				"kernel %s argument %d: needs %d elements, its region holds %d; pass a larger region or a smaller count", kernel, i, count, have)
		}
	}
	return nil
}

// active is the number of x threads that pass a kernel's "i < n" guard.
func active(shape Shape, n int64) int64 { return max(0, min(shape.ThreadsX, n)) }

// fits reports whether elements [0, n) of 4-byte values lie in m.
func fits(m Memory, n int64) bool { return n <= int64(len(m))/4 }

func f32At(m Memory, i int64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(m[i*4:]))
}

func setF32(m Memory, i int64, v float32) {
	binary.LittleEndian.PutUint32(m[i*4:], math.Float32bits(v))
}

func i32At(m Memory, i int64) int32 { return int32(binary.LittleEndian.Uint32(m[i*4:])) }

func setI32(m Memory, i int64, v int32) { binary.LittleEndian.PutUint32(m[i*4:], uint32(v)) }

// rowDot is the per-row loop of row_sum and gemv: the sum over c of
// a[r*cols+c] * x[c] (x nil means 1), in order, rounding every step to
// float32 exactly as the PTX built with -fmad=false does.
func rowDot(a, x Memory, r, cols int64) float32 {
	var acc float32
	for c := int64(0); c < cols; c++ {
		v := f32At(a, r*cols+c)
		if x != nil {
			v = float32(v * f32At(x, c))
		}
		acc = float32(acc + v)
	}
	return acc
}

// elementwise runs body for i in [0, n) Replicas times, after checking that
// every buffer holds n 4-byte elements.
func elementwise(shape Shape, n int64, mem []Memory, body func(i int64)) error {
	n = active(shape, n)
	for _, m := range mem {
		if !fits(m, n) {
			return ErrIllegalAddress
		}
	}
	for range shape.Replicas {
		for i := range n {
			body(i)
		}
	}
	return nil
}

// rowwise runs a per-row reduction: out[r] = rowDot(a, x, r, cols).
func rowwise(shape Shape, rows, cols int64, out, a, x Memory) error {
	rows = active(shape, rows)
	if rows == 0 {
		return nil
	}
	if cols < 0 || !fits(out, rows) || !fits(a, rows*cols) || (x != nil && !fits(x, cols)) {
		return ErrIllegalAddress
	}
	for range shape.Replicas {
		for r := range rows {
			setF32(out, r, rowDot(a, x, r, cols))
		}
	}
	return nil
}

var builtin = []Kernel{
	{
		Spec: cuda.KernelSpec{Name: Fill,
			Params: []cuda.Param{buf("out", cuda.F32, cuda.AccessWrite), scalar("value", cuda.F32), scalar("n", cuda.I32)},
			Check:  func(a []cuda.Arg) error { return extent(Fill, int64(a[2].I32()), a, 0) }},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			v := a[1].F32()
			return elementwise(s, int64(a[2].I32()), m, func(i int64) { setF32(m[0], i, v) })
		},
	},
	{
		Spec: cuda.KernelSpec{Name: Axpy,
			Params: []cuda.Param{buf("y", cuda.F32, cuda.AccessReadWrite), buf("x", cuda.F32, cuda.AccessRead), scalar("a", cuda.F32), scalar("n", cuda.I32)},
			Check:  func(a []cuda.Arg) error { return extent(Axpy, int64(a[3].I32()), a, 0, 1) }},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			alpha := a[2].F32()
			return elementwise(s, int64(a[3].I32()), m, func(i int64) {
				setF32(m[0], i, float32(float32(alpha*f32At(m[1], i))+f32At(m[0], i)))
			})
		},
	},
	{
		Spec: cuda.KernelSpec{Name: Add,
			Params: []cuda.Param{buf("out", cuda.F32, cuda.AccessWrite), buf("a", cuda.F32, cuda.AccessRead), buf("b", cuda.F32, cuda.AccessRead), scalar("n", cuda.I32)},
			Check:  func(a []cuda.Arg) error { return extent(Add, int64(a[3].I32()), a, 0, 1, 2) }},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			return elementwise(s, int64(a[3].I32()), m, func(i int64) {
				setF32(m[0], i, float32(f32At(m[1], i)+f32At(m[2], i)))
			})
		},
	},
	{
		Spec: cuda.KernelSpec{Name: RowSum,
			Params: []cuda.Param{buf("out", cuda.F32, cuda.AccessWrite), buf("in", cuda.F32, cuda.AccessRead), scalar("rows", cuda.I32), scalar("cols", cuda.I32)},
			Check: func(a []cuda.Arg) error {
				rows, cols := int64(a[2].I32()), int64(a[3].I32())
				if err := extent(RowSum, rows, a, 0); err != nil {
					return err
				}
				if cols < 0 {
					return extent(RowSum, cols, a)
				}
				return extent(RowSum, rows*cols, a, 1)
			}},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			return rowwise(s, int64(a[2].I32()), int64(a[3].I32()), m[0], m[1], nil)
		},
	},
	{
		Spec: cuda.KernelSpec{Name: Gemv,
			Params: []cuda.Param{buf("y", cuda.F32, cuda.AccessWrite), buf("a", cuda.F32, cuda.AccessRead), buf("x", cuda.F32, cuda.AccessRead), scalar("rows", cuda.I32), scalar("cols", cuda.I32)},
			Check: func(a []cuda.Arg) error {
				rows, cols := int64(a[3].I32()), int64(a[4].I32())
				if err := extent(Gemv, rows, a, 0); err != nil {
					return err
				}
				if err := extent(Gemv, cols, a, 2); err != nil {
					return err
				}
				return extent(Gemv, rows*cols, a, 1)
			}},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			return rowwise(s, int64(a[3].I32()), int64(a[4].I32()), m[0], m[1], m[2])
		},
	},
	{
		Spec: cuda.KernelSpec{Name: Inc,
			Params: []cuda.Param{buf("p", cuda.I32, cuda.AccessReadWrite), scalar("n", cuda.I32)},
			Check:  func(a []cuda.Arg) error { return extent(Inc, int64(a[1].I32()), a, 0) }},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			return elementwise(s, int64(a[1].I32()), m, func(i int64) { setI32(m[0], i, i32At(m[0], i)+1) })
		},
	},
}

var faultInjection = []Kernel{
	{
		// Deliberately unchecked: the fault tests write outside an allocation.
		Spec: cuda.KernelSpec{Name: Poke,
			Params: []cuda.Param{buf("p", cuda.I32, cuda.AccessWrite), scalar("index", cuda.U32), scalar("value", cuda.I32)}},
		Body: func(s Shape, m []Memory, a []cuda.Arg) error {
			i := int64(a[1].U32())
			if s.ThreadsX == 0 || s.Replicas == 0 {
				return nil
			}
			if !fits(m[0], i+1) {
				return ErrIllegalAddress
			}
			setI32(m[0], i, a[2].I32())
			return nil
		},
	},
}
