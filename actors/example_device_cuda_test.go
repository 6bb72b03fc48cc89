//go:build cuda

package actors_test

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
)

// openExampleDevice is the device the example runs on: GPU 0.
func openExampleDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }
