//go:build !cuda

// The device the suite runs on by default: the embedded simulated H200.

package embedder

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
)

// OnGPU reports whether the suite runs on a real GPU (the cuda build).
const OnGPU = false

// OpenDevice opens the device the suite runs on: here the embedded
// simulated H200, on its real-time clock.
func OpenDevice() (cuda.Device, error) { return sim.New(sim.Config{}) }

// OpenFastDevice opens the device for tests of the host side's own
// bookkeeping at volume: here the simulated device at zero cost (work ends
// as soon as it ran), so a hundred thousand submissions take seconds.
func OpenFastDevice() (cuda.Device, error) { return sim.New(sim.Config{Clock: sim.ClockZeroCost}) }

// OpenFaultDevice opens a device that also registers the kernels that skip
// their bounds checks (kernels.FaultInjection), for the tests that provoke
// real device faults. No device a tenant reaches registers them.
func OpenFaultDevice() (cuda.Device, error) {
	return sim.New(sim.Config{Kernels: kernels.Builtin().With(kernels.FaultInjection())})
}

// OpenFaultySim opens a simulated device with injected faults (the sim
// only: a real GPU has no injector).
func OpenFaultySim(faults ...sim.Fault) (cuda.Device, error) {
	return sim.New(sim.Config{Faults: faults})
}
