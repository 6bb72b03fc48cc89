package kernels_test

import (
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// TestSourcesAgree: every registered kernel is defined in the CUDA source
// and exported from the committed PTX with as many parameters as its spec.
func TestSourcesAgree(t *testing.T) {
	reg := kernels.Builtin().With(kernels.FaultInjection())
	for _, name := range reg.Names() {
		if !strings.Contains(kernels.Source, "__global__ void "+name+"(") {
			t.Errorf("kernel %s: got no definition in kernels.cu, want %q", name, "__global__ void "+name+"(")
		}
		entry := ".visible .entry " + name + "("
		i := strings.Index(kernels.PTX, entry)
		if i < 0 {
			t.Errorf("kernel %s: got no entry in kernels.ptx, want %q; run scripts/gen-ptx.sh", name, entry)
			continue
		}
		sig := kernels.PTX[i:]
		sig = sig[:strings.Index(sig, ")")]
		if got, want := strings.Count(sig, ".param"), len(reg.MustSpec(name).Params); got != want {
			t.Errorf("kernel %s: got %d parameters in the PTX, want %d as its spec", name, got, want)
		}
	}
	if strings.Count(kernels.PTX, ".visible .entry") != len(reg) {
		t.Errorf("kernels.ptx: got %d exported kernels, want %d as the registry", strings.Count(kernels.PTX, ".visible .entry"), len(reg))
	}
}

// TestBuiltinKernelsAreChecked: what a user's device registers by default
// holds no kernel that skips its bounds check; the unchecked ones are only
// in the registry a test asks for.
func TestBuiltinKernelsAreChecked(t *testing.T) {
	for name, k := range kernels.Builtin() {
		if k.Spec.Check == nil {
			t.Errorf("built-in kernel %s: got no bounds check (Spec.Check nil), want one", name)
		}
	}
	if _, ok := kernels.Builtin().Kernel(kernels.Poke); ok {
		t.Fatal("Builtin().Kernel(poke): got found, want absent: poke is unchecked")
	}
	if _, ok := kernels.FaultInjection().Kernel(kernels.Poke); !ok {
		t.Fatal("FaultInjection().Kernel(poke): got absent, want found")
	}
}

func TestReferenceRespectsLaunchShape(t *testing.T) {
	k := kernels.Builtin()[kernels.Inc]
	mem := make(kernels.Memory, 4*8)
	// 2 blocks of 2 threads cover 4 of 8 elements; y=2 runs each twice.
	cfg := cuda.LaunchConfig{Grid: cuda.Dim3{X: 2, Y: 1, Z: 1}, Block: cuda.Dim3{X: 2, Y: 2, Z: 1}}
	if err := k.Run(cfg, []kernels.Memory{mem}, []cuda.Arg{{}, cuda.I32Arg(8)}); err != nil {
		t.Fatalf("Run(inc, 2x1 blocks of 2x2): got err %v, want nil", err)
	}
	for i := range 8 {
		want := byte(0)
		if i < 4 {
			want = 2
		}
		if mem[4*i] != want {
			t.Fatalf("element %d: got %d, want %d", i, mem[4*i], want)
		}
	}
	if err := k.Run(cuda.Linear(16, 16), []kernels.Memory{mem}, []cuda.Arg{{}, cuda.I32Arg(16)}); err != kernels.ErrIllegalAddress {
		t.Fatalf("Run past the allocation: got err %v, want kernels.ErrIllegalAddress", err)
	}
}
