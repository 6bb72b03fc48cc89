//go:build cuda

// The real device: GPU 0, cuBLAS's per-lane workspace there, and a library
// call that breaks a capture rule.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/examples/internal/cublas"
)

// cublasWorkspace is each lane's cuBLAS workspace: what NVIDIA suggests for
// Hopper (32 MiB), so cuBLAS never grows its own pool during a capture.
const cublasWorkspace = 32 << 20

// syncingCall is a library call that breaks a capture rule: it
// synchronizes its stream (as a library that waits for its own work
// would). Eagerly that is merely slow; in a capture CUDA refuses it and
// invalidates the capture, so the batch falls back to eager execution.
func syncingCall() func(stream uintptr) error {
	return func(stream uintptr) error { return cublas.StreamSynchronize(stream) }
}

// openDevice opens GPU 0.
func openDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }
