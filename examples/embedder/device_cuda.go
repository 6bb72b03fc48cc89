//go:build cuda

// The device the suite runs on in the cuda build: the real GPU.

package embedder

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/cuda/kernels"
)

// OnGPU reports whether the suite runs on a real GPU (the cuda build).
const OnGPU = true

// OpenDevice opens the device the suite runs on: a new instance on GPU 0.
func OpenDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }

// OpenFastDevice opens the device for tests of the host side's own
// bookkeeping at volume: on a GPU, the GPU.
func OpenFastDevice() (cuda.Device, error) { return OpenDevice() }

// OpenFaultDevice opens a device that also registers the kernels that skip
// their bounds checks (kernels.FaultInjection), for the tests that provoke
// real device faults. No device a tenant reaches registers them.
func OpenFaultDevice() (cuda.Device, error) {
	return driver.Open(driver.Config{Kernels: kernels.Builtin().With(kernels.FaultInjection())})
}
