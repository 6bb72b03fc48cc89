// Conformance: a module of one's own kernels (usermodule.cu, compiled to
// usermodule.ptx by scripts/gen-ptx.sh) loaded at run time, launched
// eagerly and replayed from a graph, on every backend; wrong declarations
// refused.

package conformance

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
)

// UserModulePTX is usermodule.cu compiled for compute_80.
//
//go:embed usermodule.ptx
var UserModulePTX []byte

// UserScale is the user module's kernel: x[i] *= a for i < n.
const UserScale = "user_scale_f32"

// UserModule is the user module as a serving backend would declare it:
// the PTX, and its kernel's parameters, extent check and Go reference.
// params overrides the declared parameters when set (to declare them
// wrongly).
func UserModule(params ...cuda.Param) kernels.Module {
	if params == nil {
		params = []cuda.Param{
			{Name: "x", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessReadWrite},
			{Name: "a", Kind: cuda.ParamScalar, Elem: cuda.F32},
			{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I32},
		}
	}
	k := &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: UserScale, Params: params, Check: func(a []cuda.Arg) error {
			if n := int64(a[2].I32()); n < 0 || uint64(n)*4 > a[0].Region.Length {
				return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: n = %d does not fit x (%d bytes)", UserScale, n, a[0].Region.Length)
			}
			return nil
		}},
		Body: func(s kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			scale, n := a[1].F32(), min(int64(a[2].I32()), s.ThreadsX)
			for range s.Replicas { // every y and z thread runs the x range, as on the GPU
				for i := range n {
					v := math.Float32frombits(binary.LittleEndian.Uint32(m[0][i*4:]))
					binary.LittleEndian.PutUint32(m[0][i*4:], math.Float32bits(v*scale))
				}
			}
			return nil
		},
	}
	return kernels.Module{Name: "usermodule", Image: UserModulePTX, Kernels: kernels.Registry{UserScale: k}}
}

func testUserModule(t *testing.T, dev backend.Device) {
	loader, ok := dev.(kernels.Loader)
	if !ok {
		t.Fatalf("device %T: got no LoadModule, want every backend a kernels.Loader", dev)
	}
	if err := loader.LoadModule(UserModule()); err != nil {
		t.Fatalf("LoadModule(usermodule): got err %v, want nil", err)
	}
	if err := loader.LoadModule(UserModule()); !errors.Is(err, kernels.ErrInvalidModule) {
		t.Fatalf("LoadModule(usermodule) again: got err %v, want kernels.ErrInvalidModule (the name is loaded)", err)
	}
	f := fixture{t, dev}
	s := f.stream()
	const n = 300
	x := randF32(7, n)
	buf := f.alloc(cuda.F32, n)
	f.upload(s, buf, EncodeF32(x))
	want := make([]float32, n)
	for i, v := range x {
		want[i] = v * 1.5
	}
	f.launch(s, UserScale, n, cuda.BufferArg(buf.Whole()), cuda.F32Arg(1.5), cuda.I32Arg(n))
	equalF32(t, "user_scale eager", f.f32s(s, buf), want)

	// Captured into a graph and replayed twice: as eager, twice more.
	f.replay(s, 2, func() { f.launch(s, UserScale, n, cuda.BufferArg(buf.Whole()), cuda.F32Arg(2), cuda.I32Arg(n)) })
	for i := range want {
		want[i] *= 4
	}
	equalF32(t, "user_scale replayed", f.f32s(s, buf), want)

	// The function's own limit (__launch_bounds__(256)) is the spec's on
	// the real device: a block of 512 is refused before it reaches the GPU.
	spec := f.spec(UserScale)
	if spec.MaxBlockThreads != 256 {
		t.Fatalf("spec of %s: got MaxBlockThreads %d, want 256 (the image's __launch_bounds__(256), .maxntid 256)", UserScale, spec.MaxBlockThreads)
	}
	if spec.MaxBlockThreads > 0 {
		c, err := cuda.Launch(spec, cuda.Linear(n, 512), cuda.BufferArg(buf.Whole()), cuda.F32Arg(1), cuda.I32Arg(n))
		if err == nil {
			err = s.Enqueue(c)
		}
		wantContract(t, err, cuda.ErrLaunchConfig)
	}
}

// testUserModuleDeclarations: declarations that cannot be right are
// refused at LoadModule, and nothing is loaded, on every backend: what the
// module says of itself, and what the image holds of the function (its
// parameter sizes and count, its name), as the driver sees it.
func testUserModuleDeclarations(t *testing.T, dev backend.Device) {
	loader := dev.(kernels.Loader)
	noImage := UserModule()
	noImage.Image = nil
	noBody := UserModule()
	noBody.Kernels[UserScale].Body = nil
	cases := map[string]kernels.Module{"no image": noImage}
	if dev.Info().Backend == "sim" {
		cases["no Go reference"] = noBody
	}
	// Every backend reads the image's own view of the function.
	buffer := func(name string) cuda.Param {
		return cuda.Param{Name: name, Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessRead}
	}
	scalar := func(name string, e cuda.ElementType) cuda.Param {
		return cuda.Param{Name: name, Kind: cuda.ParamScalar, Elem: e}
	}
	cases["a scalar declared as a buffer"] = UserModule(buffer("x"), buffer("a"), scalar("n", cuda.I32))
	cases["a u8 declared for an int"] = UserModule(buffer("x"), scalar("a", cuda.F32), scalar("n", cuda.U8))
	cases["a parameter missing"] = UserModule(buffer("x"), scalar("a", cuda.F32))
	cases["a parameter too many"] = UserModule(buffer("x"), scalar("a", cuda.F32), scalar("n", cuda.I32), scalar("m", cuda.I32))
	renamed := UserModule()
	k := renamed.Kernels[UserScale]
	k.Spec.Name = "user_scale"
	renamed.Kernels = kernels.Registry{"user_scale": k}
	cases["a kernel the image does not hold"] = renamed
	for name, m := range cases {
		err := loader.LoadModule(m)
		if !errors.Is(err, kernels.ErrInvalidModule) {
			t.Fatalf("%s: got err %v, want kernels.ErrInvalidModule", name, err)
		}
		if c := cuda.Classify(err); c.Blame != cuda.BlameCaller || !c.NotSubmitted {
			t.Fatalf("%s: got blame %v, not submitted %v; want the caller's, not submitted", name, c.Blame, c.NotSubmitted)
		}
		if strings.Contains(name, "buffer") && !strings.Contains(err.Error(), "sees 4 B ") && !strings.Contains(err.Error(), "has 4 B ") {
			t.Fatalf("%s: got %q, want the image's view (4 B) in the message", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	if _, ok := dev.Kernels().Kernel(UserScale); ok {
		t.Fatalf("after refused loads: got kernel %s loaded, want nothing loaded", UserScale)
	}
}
