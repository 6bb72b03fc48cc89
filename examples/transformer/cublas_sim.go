//go:build !cuda

// Without the cuda build tag there is no GPU and no cuBLAS: each lane
// still gets its library state (a small workspace), and the GEMMs' Go
// references run on the simulated device.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// cublasWorkspace is each lane's workspace on the simulated device: the
// references do not use it, but every lane still has its own.
const cublasWorkspace = 64 << 10

// openDevice opens the embedded simulated H200.
func openDevice() (cuda.Device, error) { return sim.New(sim.Config{}) }
