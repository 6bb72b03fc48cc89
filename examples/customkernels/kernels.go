// The example's own kernel (RMSNorm, rmsnorm.cu) as a module, and its SGEMM
// as a library call: each with the Go reference the simulated device runs.

package main

import (
	_ "embed"
	"math"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/examples/internal/cublas"
	"github.com/lanesched/lanes/examples/internal/hostio"
)

//go:embed rmsnorm.ptx
var rmsnormPTX []byte

const rmsnorm = "rmsnorm_f32"

// module is rmsnorm.cu as a lanes module: its parameters in order, the
// extent check every launch passes, and its Go reference.
func module() kernels.Module {
	f32buf := func(name string, a cuda.Access) cuda.Param {
		return cuda.Param{Name: name, Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: a}
	}
	k := &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: rmsnorm,
			Params: []cuda.Param{f32buf("y", cuda.AccessWrite), f32buf("x", cuda.AccessRead), f32buf("w", cuda.AccessRead),
				{Name: "rows", Kind: cuda.ParamScalar, Elem: cuda.I32}, {Name: "cols", Kind: cuda.ParamScalar, Elem: cuda.I32},
				{Name: "eps", Kind: cuda.ParamScalar, Elem: cuda.F32}},
			Check: func(a []cuda.Arg) error {
				rows, cols := uint64(a[3].I32()), uint64(a[4].I32())
				if a[0].Region.Length < 4*rows*cols || a[1].Region.Length < 4*rows*cols || a[2].Region.Length < 4*cols {
					return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: %dx%d does not fit y, x or w", rmsnorm, rows, cols)
				}
				return nil
			},
			// One block per row, taken from blockIdx.x without a guard: no
			// more blocks than rows (a block past the last row reads and
			// writes past x and y), one dimension; the tree reduction over
			// partial[256] needs a block of a power of two up to 256.
			Shape: func(cfg cuda.LaunchConfig, a []cuda.Arg) error {
				rows, g, b := uint64(a[3].I32()), cfg.Grid, cfg.Block
				switch {
				case uint64(g.X) > rows || g.Y != 1 || g.Z != 1:
					return cuda.Contractf("launch", cuda.ErrLaunchConfig, "%s: grid %v for %d rows; launch one block per row (grid {%d, 1, 1})", rmsnorm, g, rows, rows)
				case b.X > 256 || b.X&(b.X-1) != 0 || b.Y != 1 || b.Z != 1:
					return cuda.Contractf("launch", cuda.ErrLaunchConfig, "%s: block %v; its reduction needs {n, 1, 1}, n a power of two up to 256", rmsnorm, b)
				}
				return nil
			}},
		Body: func(_ kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			y := hostio.F32s(m[0])
			rmsnormRef(y, hostio.F32s(m[1]), hostio.F32s(m[2]), int(a[3].I32()), int(a[4].I32()), a[5].F32())
			hostio.Put(m[0], y)
			return nil
		},
	}
	return kernels.Module{Name: "customkernels", Image: rmsnormPTX, Kernels: kernels.Registry{rmsnorm: k}}
}

// rmsnormRef is the kernel's reference: y = x * w / sqrt(mean(x^2) + eps), per row.
func rmsnormRef(y, x, w []float32, rows, cols int, eps float32) {
	for r := range rows {
		var acc float32
		for c := range cols {
			v := x[r*cols+c]
			acc += v * v
		}
		inv := float32(1 / math.Sqrt(float64(acc/float32(cols)+eps)))
		for c := range cols {
			y[r*cols+c] = x[r*cols+c] * inv * w[c]
		}
	}
}

// cublasLibrary is cuBLAS's per-lane state (examples/internal/cublas): each
// lane makes its own handle before it enqueues any SGEMM, pointed at a
// workspace of the lane's own, and destroys it when the lane is rebuilt or
// stops. Two lanes never share a handle or a workspace, so no lock is
// needed.
var cublasLibrary = cublas.Library(cublasWorkspace)
