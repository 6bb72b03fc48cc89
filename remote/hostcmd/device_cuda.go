//go:build cuda

// With the cuda build tag: lanehost's --device cuda, the real GPU.

package hostcmd

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/cuda/kernels"
)

// With the cuda tag, --device cuda opens GPU --ordinal through the driver
// backend.
func init() {
	openers["cuda"] = func(o options) (cuda.Device, error) {
		var ks kernels.Registry
		if o.faultKernels {
			ks = kernels.Builtin().With(kernels.FaultInjection())
		}
		return driver.Open(driver.Config{Ordinal: o.ordinal, Kernels: ks})
	}
}
