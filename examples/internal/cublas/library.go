// cuBLAS as a lanes library: a handle and a workspace per lane, and SGEMM
// as one of its calls, with the Go reference the simulated device runs.

package cublas

import (
	"encoding/binary"
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/internal/hostio"
)

// Library is cuBLAS as per-lane state: with the cuda build tag each lane
// makes a handle on its own thread (outside any capture, since making one
// allocates), points it at the lane's workspace of workspaceBytes (so
// cuBLAS never grows a pool of its own during a capture), and destroys it
// when the lane is rebuilt or stops; two lanes never share a handle or a
// workspace, so no call needs a lock. Without the tag each lane holds its
// workspace alone and the references run. Declare one per program and
// give it to every call (a lane keys its state by the pointer).
func Library(workspaceBytes uint64) *cuda.Library {
	return &cuda.Library{Name: "cublas", WorkspaceBytes: workspaceBytes, Setup: setup, Teardown: teardown}
}

// SgemmCall is C(m×n) = A(m×k)·B(k×n), row-major, as a call of lib: cuBLAS
// with the lane's handle and workspace on the GPU, its Go reference on the
// simulated device. Params key the call by its sizes (its regions key the
// rest), so a replay of a capture is the same product.
func SgemmCall(lib *cuda.Library, a, b, c cuda.Region, m, n, k int) (cuda.Command, error) {
	params := binary.LittleEndian.AppendUint32(nil, uint32(m))
	params = binary.LittleEndian.AppendUint32(params, uint32(n))
	params = binary.LittleEndian.AppendUint32(params, uint32(k))
	return cuda.Call(&cuda.LibraryCall{
		Name:      "sgemm",
		Params:    params,
		Regions:   []cuda.Touch{{Region: a, Access: cuda.AccessRead}, {Region: b, Access: cuda.AccessRead}, {Region: c, Access: cuda.AccessWrite}},
		Library:   lib,
		Workspace: cuda.AccessReadWrite,
		EnqueueOn: enqueueSgemm(a.Addr(), b.Addr(), c.Addr(), m, n, k),
		// mem is A, B, C, then the lane's workspace (which the reference
		// has no use for: it is there as cuBLAS's is on the GPU).
		Reference: func(mem [][]byte) error {
			if len(mem) != 4 {
				return fmt.Errorf("sgemm: %d regions; want A, B, C and the lane's workspace", len(mem))
			}
			if len(mem[0]) < 4*m*k || len(mem[1]) < 4*k*n || len(mem[2]) < 4*m*n {
				return fmt.Errorf("sgemm %dx%dx%d does not fit its regions", m, n, k)
			}
			out := make([]float32, m*n)
			SgemmRef(out, hostio.F32s(mem[0]), hostio.F32s(mem[1]), m, n, k)
			hostio.Put(mem[2], out)
			return nil
		},
	})
}

// SgemmRef is C = A·B, row-major, each product rounded on its own and
// summed over k in order (a row of B at a time: the same order for every
// element of C).
func SgemmRef(c, a, b []float32, m, n, k int) {
	for i := range m {
		out := c[i*n:][:n]
		clear(out)
		for p, av := range a[i*k:][:k] {
			for j, bv := range b[p*n:][:n] {
				out[j] += float32(av * bv)
			}
		}
	}
}
