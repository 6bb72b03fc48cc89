//go:build !cuda

// Without the cuda build tag there is no GPU and no cuBLAS: the call's Go
// reference runs on the simulated device.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// cublasWorkspace is each lane's workspace on the simulated device: the
// reference does not use it, but every lane still has its own.
const cublasWorkspace = 64 << 10

// syncingCall is nil here: the simulated device has no capture rule a Go
// reference could break.
func syncingCall() func(stream uintptr) error { return nil }

// openDevice opens the embedded simulated H200.
func openDevice() (cuda.Device, error) { return sim.New(sim.Config{}) }
