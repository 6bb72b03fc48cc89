//go:build cuda

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/internal/demo"
)

// With the cuda tag, --device cuda opens GPU 0 through the driver backend.
func init() {
	demo.RegisterBackend("cuda", func(cfg demo.Config) ([]cuda.Device, error) {
		d, err := driver.Open(driver.Config{})
		if err != nil {
			return nil, err
		}
		return []cuda.Device{d}, nil
	})
}
