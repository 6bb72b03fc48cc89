//go:build !cuda

package actors_test

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// openExampleDevice is the device the example runs on: the embedded
// simulated H200 (the GPU with the cuda build tag).
func openExampleDevice() (cuda.Device, error) { return sim.New(sim.Config{Clock: sim.ClockZeroCost}) }
