//go:build cuda

// The real device: GPU 0, and cuBLAS's per-lane workspace there.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
)

// cublasWorkspace is each lane's cuBLAS workspace: what NVIDIA suggests for
// Hopper (32 MiB), so cuBLAS never grows its own pool during a capture.
const cublasWorkspace = 32 << 20

// openDevice opens GPU 0.
func openDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }
