package kernels_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// TestModuleCheck: what a module says of itself is checked before any
// device sees it, and each refusal says what to fix.
func TestModuleCheck(t *testing.T) {
	good := func() kernels.Module {
		k := &kernels.Kernel{Spec: cuda.KernelSpec{Name: "mine", Params: []cuda.Param{
			{Name: "x", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessReadWrite},
			{Name: "n", Kind: cuda.ParamScalar, Elem: cuda.I32},
		}}, Body: func(kernels.Shape, []kernels.Memory, []cuda.Arg) error { return nil }}
		return kernels.Module{Name: "m", Image: []byte("ptx"), Kernels: kernels.Registry{"mine": k}}
	}
	if err := good().Check(kernels.Builtin(), true); err != nil {
		t.Fatalf("a well-declared module: got err %v, want nil", err)
	}
	cases := map[string]struct {
		edit     func(*kernels.Module)
		needBody bool
		want     string
	}{
		"no name":       {func(m *kernels.Module) { m.Name = "" }, false, "no name"},
		"no image":      {func(m *kernels.Module) { m.Image = nil }, false, "no image"},
		"no kernels":    {func(m *kernels.Module) { m.Kernels = nil }, false, "declares no kernels"},
		"filed wrongly": {func(m *kernels.Module) { m.Kernels["other"] = m.Kernels["mine"]; delete(m.Kernels, "mine") }, false, "under the name"},
		"no reference":  {func(m *kernels.Module) { m.Kernels["mine"].Body = nil }, true, "no Go reference"},
		"bad kind":      {func(m *kernels.Module) { m.Kernels["mine"].Spec.Params[1].Kind = 9 }, false, "has kind 9"},
		"bad element":   {func(m *kernels.Module) { m.Kernels["mine"].Spec.Params[1].Elem = 0 }, false, "no valid element type"},
		"no access":     {func(m *kernels.Module) { m.Kernels["mine"].Spec.Params[0].Access = 0 }, false, "declares no access"},
		"a space in its name": {func(m *kernels.Module) {
			k := m.Kernels["mine"]
			k.Spec.Name = "mi ne"
			m.Kernels = kernels.Registry{"mi ne": k}
		}, false, "letters, digits"},
		"a nameless parameter":  {func(m *kernels.Module) { m.Kernels["mine"].Spec.Params[1].Name = "" }, false, "has no name"},
		"a parameter twice":     {func(m *kernels.Module) { m.Kernels["mine"].Spec.Params[1].Name = "x" }, false, "twice"},
		"a scalar with access":  {func(m *kernels.Module) { m.Kernels["mine"].Spec.Params[1].Access = cuda.AccessRead }, false, "only a buffer"},
		"limits beyond any GPU": {func(m *kernels.Module) { m.Kernels["mine"].Spec.MaxBlockThreads = 5000 }, false, "no GPU has more"},
		"a struct of no size": {func(m *kernels.Module) {
			m.Kernels["mine"].Spec.Params[1] = cuda.Param{Name: "p", Kind: cuda.ParamStruct, Size: 0, Align: 4}
		}, false, "a struct is 1 to"},
		"a struct aligned to 3": {func(m *kernels.Module) {
			m.Kernels["mine"].Spec.Params[1] = cuda.Param{Name: "p", Kind: cuda.ParamStruct, Size: 12, Align: 3}
		}, false, "a power of two"},
		"a struct with access": {func(m *kernels.Module) {
			m.Kernels["mine"].Spec.Params[1] = cuda.Param{Name: "p", Kind: cuda.ParamStruct, Size: 8, Align: 8, Access: cuda.AccessRead}
		}, false, "only a buffer"},
		"parameters past CUDA's 32764 bytes": {func(m *kernels.Module) {
			for i := range 8 {
				m.Kernels["mine"].Spec.Params = append(m.Kernels["mine"].Spec.Params, cuda.Param{Name: fmt.Sprintf("s%d", i), Kind: cuda.ParamStruct, Size: 4096, Align: 8})
			}
		}, false, "at most 32764"},
		"a builtin name": {func(m *kernels.Module) {
			k := m.Kernels["mine"]
			k.Spec.Name = kernels.Inc
			m.Kernels = kernels.Registry{kernels.Inc: k}
		}, false, "loaded already"},
	}
	for name, c := range cases {
		m := good()
		c.edit(&m)
		err := m.Check(kernels.Builtin(), c.needBody)
		if !errors.Is(err, kernels.ErrInvalidModule) || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: got err %v, want kernels.ErrInvalidModule saying %q", name, err, c.want)
		}
		if cl := cuda.Classify(err); cl.Blame != cuda.BlameCaller {
			t.Fatalf("%s: got blame %v, want the caller's", name, cl.Blame)
		}
	}
}

// TestRegistriesShareNothing: a spec edited in one registry (or through a
// device) leaves every other registry as it was; names a device could not
// look up are refused; an extent check's plain error or panic is the
// caller's ErrOutOfBounds.
func TestRegistriesShareNothing(t *testing.T) {
	a, b := kernels.Builtin(), kernels.Builtin()
	spec, _ := a.Kernel(kernels.Inc)
	spec.Params[1].Elem = cuda.F32
	if got, _ := b.Kernel(kernels.Inc); got.Params[1].Elem != cuda.I32 {
		t.Fatalf("Builtin() after editing another Builtin()'s inc: got param 1 %v, want i32", got.Params[1].Elem)
	}
	for _, name := range []string{"", "a\x00b", strings.Repeat("k", cuda.MaxKernelName+1)} {
		k := &kernels.Kernel{Spec: cuda.KernelSpec{Name: name}}
		m := kernels.Module{Name: "m", Image: []byte("ptx"), Kernels: kernels.Registry{name: k}}
		if err := m.Check(nil, false); !errors.Is(err, kernels.ErrInvalidModule) {
			t.Fatalf("a kernel named %q: got err %v, want kernels.ErrInvalidModule", name, err)
		}
	}
	for name, check := range map[string]func([]cuda.Arg) error{
		"plain error": func([]cuda.Arg) error { return errors.New("too long") },
		"panic":       func([]cuda.Arg) error { panic("bad check") },
	} {
		spec := &cuda.KernelSpec{Name: "k", Check: check}
		if _, err := cuda.Launch(spec, cuda.Linear(1, 1)); !errors.Is(err, cuda.ErrOutOfBounds) {
			t.Fatalf("an extent check that returns a %s: got err %v, want cuda.ErrOutOfBounds", name, err)
		}
	}
}
