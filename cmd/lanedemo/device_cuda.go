//go:build cuda

// With the cuda build tag: lanedemo's --device cuda, the real GPU.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/demo"
)

// With the cuda tag, --device cuda opens GPUs 0 .. --devices-1 through the
// driver backend.
func init() {
	demo.RegisterBackend("cuda", func(cfg demo.Config) ([]cuda.Device, error) {
		var devs []cuda.Device
		for i := range cfg.Devices {
			var ks kernels.Registry
			if cfg.Hosts.FaultAt > 0 {
				ks = kernels.Builtin().With(kernels.FaultInjection()) // the out-of-bounds kernel --fault-host-at runs
			}
			d, err := driver.Open(driver.Config{Ordinal: cfg.Ordinal(i), Kernels: ks})
			if err != nil {
				for _, o := range devs {
					_ = o.Close()
				}
				return nil, err
			}
			devs = append(devs, d)
		}
		return devs, nil
	})
}
