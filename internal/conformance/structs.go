// Conformance: kernels taking a struct by value and 2-byte float scalars
// (half, bfloat16), from the user module, on every backend.

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

// The user module's kernels with struct and 2-byte scalar parameters.
const (
	UserAffine = "user_affine_struct" // y[i] = p.scale*x[i] + p.shift for i < p.n (p: UserAffine by value)
	UserHalves = "user_halves_f32"    // y[i] = y[i]*a + b for i < n (a: half, b: bfloat16)
)

// AffineParams is usermodule.cu's UserAffine as it lies in memory: 16
// bytes aligned to 8.
func AffineParams(scale, shift float32, n int64) []byte {
	b := binary.LittleEndian.AppendUint32(nil, math.Float32bits(scale))
	b = binary.LittleEndian.AppendUint32(b, math.Float32bits(shift))
	return binary.LittleEndian.AppendUint64(b, uint64(n))
}

// StructModule declares the user module's kernels that take a struct by
// value and 2-byte float scalars, with their extent checks and Go
// references.
func StructModule() kernels.Module {
	affine := &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: UserAffine, Params: []cuda.Param{
			{Name: "y", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessWrite},
			{Name: "p", Kind: cuda.ParamStruct, Size: 16, Align: 8},
			{Name: "x", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessRead},
		}, Check: func(a []cuda.Arg) error {
			n := int64(binary.LittleEndian.Uint64(a[1].StructBytes()[8:]))
			if n < 0 || uint64(n) > a[0].Region.Length/4 || uint64(n) > a[2].Region.Length/4 {
				return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: p.n = %d does not fit y and x", UserAffine, n)
			}
			return nil
		}},
		Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			p := a[1].StructBytes()
			scale, shift := math.Float32frombits(binary.LittleEndian.Uint32(p)), math.Float32frombits(binary.LittleEndian.Uint32(p[4:]))
			n := int64(binary.LittleEndian.Uint64(p[8:]))
			for range s.Replicas {
				for i := range min(n, s.ThreadsX) {
					x := math.Float32frombits(binary.LittleEndian.Uint32(m[1][4*i:])) // m holds the buffers alone, in order
					binary.LittleEndian.PutUint32(m[0][4*i:], math.Float32bits(float32(scale*x)+shift))
				}
			}
			return nil
		},
	}
	halves := &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: UserHalves, Params: []cuda.Param{
			{Name: "y", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessReadWrite},
			{Name: "a", Kind: cuda.ParamScalar, Elem: cuda.F16},
			{Name: "b", Kind: cuda.ParamScalar, Elem: cuda.BF16},
			{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I32},
		}, Check: func(a []cuda.Arg) error {
			if n := a[3].I32(); n < 0 || uint64(n) > a[0].Region.Length/4 {
				return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: n = %d does not fit y", UserHalves, n)
			}
			return nil
		}},
		Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			mul, add := a[1].F16(), a[2].BF16()
			for range s.Replicas {
				for i := range min(int64(a[3].I32()), s.ThreadsX) {
					y := math.Float32frombits(binary.LittleEndian.Uint32(m[0][4*i:]))
					binary.LittleEndian.PutUint32(m[0][4*i:], math.Float32bits(float32(y*mul)+add))
				}
			}
			return nil
		},
	}
	return kernels.Module{Name: "usermodule-structs", Image: UserModulePTX, Kernels: kernels.Registry{UserAffine: affine, UserHalves: halves}}
}

// testStructParams: a struct passed by value and 2-byte float scalars
// reach the kernel as the C types lie in memory, eagerly and replayed; a
// struct declared with the wrong size or an alignment its offset breaks is
// refused when the module loads, alike on every backend.
func testStructParams(t *testing.T, dev backend.Device) {
	loader := dev.(kernels.Loader)
	for _, wrong := range []struct {
		what  string
		param cuda.Param
	}{
		{"12 bytes", cuda.Param{Name: "p", Kind: cuda.ParamStruct, Size: 12, Align: 4}},
		{"aligned to 16 at offset 8", cuda.Param{Name: "p", Kind: cuda.ParamStruct, Size: 16, Align: 16}},
		{"an i64 scalar", cuda.Param{Name: "p", Kind: cuda.ParamScalar, Elem: cuda.I64}},
	} {
		m := StructModule()
		m.Kernels[UserAffine].Spec.Params[1] = wrong.param
		if err := loader.LoadModule(m); !errors.Is(err, kernels.ErrInvalidModule) {
			t.Fatalf("LoadModule with user_affine_struct's 16-byte struct declared as %s: got err %v, want kernels.ErrInvalidModule", wrong.what, err)
		}
	}
	if err := loader.LoadModule(StructModule()); err != nil {
		t.Fatalf("LoadModule(usermodule-structs): got err %v, want nil", err)
	}
	f := fixture{t, dev}
	s := f.stream()
	const n = 1000
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)/3 - 100
	}
	bx, by := f.alloc(cuda.F32, n), f.zeroed(s, cuda.F32, n)
	f.upload(s, bx, EncodeF32(x))
	const scale, shift = 0.75, -2.5
	f.launch(s, UserAffine, n, cuda.BufferArg(by.Whole()), cuda.StructArg(AffineParams(scale, shift, n-1)), cuda.BufferArg(bx.Whole()))
	got := f.f32s(s, by)
	for i := range n {
		want := float32(scale*x[i]) + shift
		if i == n-1 {
			want = 0 // p.n = n-1: the struct's count arrived whole
		}
		if got[i] != want {
			t.Fatalf("user_affine_struct eager: y[%d] = %v, want %v", i, got[i], want)
		}
	}

	// Halves: y = y*a + b, eagerly once and replayed twice.
	a, b := cuda.F16Arg(1.5), cuda.BF16Arg(-0.25)
	f.launch(s, UserHalves, n, cuda.BufferArg(by.Whole()), a, b, cuda.I32Arg(n))
	f.replay(s, 2, func() { f.launch(s, UserHalves, n, cuda.BufferArg(by.Whole()), a, b, cuda.I32Arg(n)) })
	got2 := f.f32s(s, by)
	for i := range n {
		want := got[i]
		for range 3 {
			want = float32(want*1.5) + -0.25
		}
		if got2[i] != want {
			t.Fatalf("user_halves_f32 eager then replayed twice: y[%d] = %v, want %v", i, got2[i], want)
		}
	}
	// A struct of the wrong size is refused when the launch is built, and
	// at Enqueue for a command built by hand.
	if _, err := cuda.Launch(f.spec(UserAffine), cuda.Linear(n, 128), cuda.BufferArg(by.Whole()), cuda.StructArg(make([]byte, 12)), cuda.BufferArg(bx.Whole())); !errors.Is(err, cuda.ErrElementType) {
		t.Fatalf("user_affine_struct with a 12-byte struct: got err %v, want cuda.ErrElementType", err)
	}
	short := cuda.Command{Kind: cuda.KindLaunch, Kernel: UserAffine, Config: cuda.Linear(n, 128),
		Args: []cuda.Arg{cuda.BufferArg(by.Whole()), cuda.StructArg(make([]byte, 8)), cuda.BufferArg(bx.Whole())}}
	wantContract(t, s.Enqueue(short), cuda.ErrElementType)
}
