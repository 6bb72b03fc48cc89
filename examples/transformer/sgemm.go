// The block's GEMMs as library calls of a per-lane cuBLAS: each lane holds
// a handle of its own, bound to its stream and to a workspace the lane
// allocated, made by the library's Setup (cublas_cuda.go) before the lane
// enqueues its first call, and handed to each call's EnqueueOn.

package main

import (
	"encoding/binary"
	"fmt"

	"github.com/lanesched/lanes/cuda"
)

// sgemm is C(m×n) = A(m×k)·B(k×n), row-major, as a call of lib: cuBLAS on
// the GPU, on the lane's handle and workspace; its Go reference on the
// simulated device. Params key the call by its sizes (its regions key the
// rest), so a replay of a capture is the same product.
func sgemm(lib *cuda.Library, a, b, c cuda.Region, m, n, k int) (cuda.Command, error) {
	params := binary.LittleEndian.AppendUint32(nil, uint32(m))
	params = binary.LittleEndian.AppendUint32(params, uint32(n))
	params = binary.LittleEndian.AppendUint32(params, uint32(k))
	return cuda.Call(&cuda.LibraryCall{
		Name:      "sgemm",
		Params:    params,
		Regions:   []cuda.Touch{{Region: a, Access: cuda.AccessRead}, {Region: b, Access: cuda.AccessRead}, {Region: c, Access: cuda.AccessWrite}},
		Library:   lib,
		Workspace: cuda.AccessReadWrite,
		EnqueueOn: cublasSgemm(a.Addr(), b.Addr(), c.Addr(), m, n, k),
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
			sgemmRef(out, f32s(mem[0]), f32s(mem[1]), m, n, k)
			copy(mem[2], encode(out))
			return nil
		},
	})
}

// sgemmRef is C = A·B, row-major, each product rounded on its own and
// summed over k in order (a row of B at a time: the same order for every
// element of C, read along B's rows).
func sgemmRef(c, a, b []float32, m, n, k int) {
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
