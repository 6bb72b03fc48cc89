// Conformance: kernels taking 8-byte scalars (i64, u64, f64) and buffers
// of 8-byte elements, from the user module, on every backend.

package conformance

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
)

// The user module's kernels with 8-byte scalars.
const (
	UserIota = "user_iota_u64" // out[i] = base + i for i < n (u64 base, i64 n)
	UserAxpy = "user_axpy_f64" // y[i] = a*x[i] + y[i] for i < n (f64 a, i64 n)
)

// WideModule declares the user module's kernels that take 8-byte scalars,
// with their extent checks and Go references.
func WideModule() kernels.Module {
	fits := func(name string, n int64, bufs ...cuda.Region) error {
		for _, r := range bufs {
			if n < 0 || uint64(n) > r.Length/8 {
				return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: n = %d does not fit a buffer of %d bytes", name, n, r.Length)
			}
		}
		return nil
	}
	// each runs body for every i below n that the launch reaches, as the
	// GPU's threads would (y and z threads and blocks repeat the x range).
	each := func(s kernels.Shape, n int64, body func(i int64)) {
		for range s.Replicas {
			for i := range min(n, s.ThreadsX) {
				body(i)
			}
		}
	}
	iota := &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: UserIota, Params: []cuda.Param{
			{Name: "out", Kind: cuda.ParamBuffer, Elem: cuda.U64, Access: cuda.AccessWrite},
			{Name: "base", Kind: cuda.ParamScalar, Elem: cuda.U64},
			{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I64},
		}, Check: func(a []cuda.Arg) error { return fits(UserIota, a[2].I64(), a[0].Region) },
			// Every element written: threads for all n, in x alone.
			Shape: func(cfg cuda.LaunchConfig, a []cuda.Arg) error {
				if n := a[2].I64(); uint64(cfg.Grid.X)*uint64(cfg.Block.X) < uint64(max(n, 0)) || cfg.Grid.Y*cfg.Grid.Z*cfg.Block.Y*cfg.Block.Z != 1 {
					return cuda.Contractf("launch", cuda.ErrLaunchConfig, "%s: %v blocks of %v threads do not cover n = %d in x", UserIota, cfg.Grid, cfg.Block, n)
				}
				return nil
			}},
		Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			base := a[1].U64()
			each(s, a[2].I64(), func(i int64) { binary.LittleEndian.PutUint64(m[0][8*i:], base+uint64(i)) })
			return nil
		},
	}
	axpy := &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: UserAxpy, Params: []cuda.Param{
			{Name: "y", Kind: cuda.ParamBuffer, Elem: cuda.F64, Access: cuda.AccessReadWrite},
			{Name: "x", Kind: cuda.ParamBuffer, Elem: cuda.F64, Access: cuda.AccessRead},
			{Name: "a", Kind: cuda.ParamScalar, Elem: cuda.F64},
			{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I64},
		}, Check: func(a []cuda.Arg) error { return fits(UserAxpy, a[3].I64(), a[0].Region, a[1].Region) }},
		Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			scale := a[2].F64()
			each(s, a[3].I64(), func(i int64) {
				x := math.Float64frombits(binary.LittleEndian.Uint64(m[1][8*i:]))
				y := math.Float64frombits(binary.LittleEndian.Uint64(m[0][8*i:]))
				// Rounded after the product, as the PTX (-fmad=false) does.
				binary.LittleEndian.PutUint64(m[0][8*i:], math.Float64bits(float64(scale*x)+y))
			})
			return nil
		},
	}
	return kernels.Module{Name: "usermodule-wide", Image: UserModulePTX, Kernels: kernels.Registry{UserIota: iota, UserAxpy: axpy}}
}

// testWideScalars: 8-byte scalars reach the kernel whole (bits past 32
// included), eagerly and replayed from a graph, and 8-byte elements are
// read and written as such.
func testWideScalars(t *testing.T, dev backend.Device) {
	// The image's view of the function: an 8-byte n declared as i32
	// is refused, and nothing is loaded.
	wrong := WideModule()
	wrong.Kernels[UserIota].Spec.Params[2].Elem = cuda.I32
	if err := dev.(kernels.Loader).LoadModule(wrong); !errors.Is(err, kernels.ErrInvalidModule) {
		t.Fatalf("LoadModule with user_iota_u64's i64 n declared i32: got err %v, want kernels.ErrInvalidModule", err)
	}
	if err := dev.(kernels.Loader).LoadModule(WideModule()); err != nil {
		t.Fatalf("LoadModule(usermodule-wide): got err %v, want nil", err)
	}
	f := fixture{t, dev}
	s := f.stream()
	const n = 1000
	const base = 1<<40 + 3
	out := f.alloc(cuda.U64, n)
	f.launch(s, UserIota, n, cuda.BufferArg(out.Whole()), cuda.U64Arg(base), cuda.I64Arg(n))
	got := f.read(s, out)
	for i := range n {
		if v := binary.LittleEndian.Uint64(got[8*i:]); v != base+uint64(i) {
			t.Fatalf("user_iota_u64 eager: out[%d] = %#x, want %#x", i, v, base+uint64(i))
		}
	}

	x, y := make([]byte, 8*n), make([]byte, 8*n)
	want := make([]float64, n)
	const a = 0.1
	for i := range n {
		xv, yv := float64(i)/7, math.Sqrt(float64(i))
		binary.LittleEndian.PutUint64(x[8*i:], math.Float64bits(xv))
		binary.LittleEndian.PutUint64(y[8*i:], math.Float64bits(yv))
		want[i] = float64(a*xv) + yv
		want[i] = float64(a*xv) + want[i] // replayed once more below
	}
	bx, by := f.alloc(cuda.F64, n), f.alloc(cuda.F64, n)
	f.upload(s, bx, x)
	f.upload(s, by, y)
	f.launch(s, UserAxpy, n, cuda.BufferArg(by.Whole()), cuda.BufferArg(bx.Whole()), cuda.F64Arg(a), cuda.I64Arg(n))
	f.replay(s, 1, func() {
		f.launch(s, UserAxpy, n, cuda.BufferArg(by.Whole()), cuda.BufferArg(bx.Whole()), cuda.F64Arg(a), cuda.I64Arg(n))
	})
	got = f.read(s, by)
	for i := range n {
		if v := math.Float64frombits(binary.LittleEndian.Uint64(got[8*i:])); v != want[i] {
			t.Fatalf("user_axpy_f64 eager then replayed: y[%d] = %v, want %v (bit for bit)", i, v, want[i])
		}
	}
	// A launch shape the kernel's rule refuses is refused at Enqueue too,
	// for a command built by hand, on every backend: nothing runs.
	short := cuda.Command{Kind: cuda.KindLaunch, Kernel: UserIota, Config: cuda.Linear(n/2, 128), Args: []cuda.Arg{cuda.BufferArg(out.Whole()), cuda.U64Arg(0), cuda.I64Arg(n)}}
	wantContract(t, s.Enqueue(short), cuda.ErrLaunchConfig)
	if got := f.read(s, out); binary.LittleEndian.Uint64(got) != base {
		t.Fatalf("after a refused launch: out[0] = %#x, want %#x untouched", binary.LittleEndian.Uint64(got), uint64(base))
	}
	// An extent past the buffer, in an 8-byte scalar, is refused before
	// the launch.
	if _, err := cuda.Launch(f.spec(UserIota), cuda.Linear(n, 128), cuda.BufferArg(out.Whole()), cuda.U64Arg(0), cuda.I64Arg(1<<33)); err == nil {
		t.Fatal("user_iota_u64 with n = 2^33 over 1000 elements: got nil, want the extent check's refusal")
	}
}
