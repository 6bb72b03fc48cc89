//go:build !cuda

// Without the cuda build tag there is no GPU and no cuBLAS: each lane
// still gets its library state (a small workspace), and the GEMMs' Go
// references run on the simulated device.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// cublasLibrary is cuBLAS as the simulated device's lanes hold it: a
// workspace per lane and nothing else (no handle to make).
func cublasLibrary() *cuda.Library {
	return &cuda.Library{Name: "cublas", WorkspaceBytes: 64 << 10}
}

// cublasSgemm is nil here: the simulated device runs the reference.
func cublasSgemm(a, b, c uint64, m, n, k int) func(cuda.LibraryLane) error { return nil }

// openDevice opens the embedded simulated H200.
func openDevice() (cuda.Device, error) { return sim.New(sim.Config{}) }
