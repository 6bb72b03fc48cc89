//go:build cuda

// cuBLAS on the real device, loaded at run time (examples/internal/cublas).

package main

import (
	"sync"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/examples/internal/cublas"
)

var (
	handleOnce sync.Once
	handleErr  error
	handleMu   sync.Mutex // one handle: set stream + sgemm together
	handle     cublas.Handle
)

// loadCublas loads libcublas and creates one handle, on the calling thread
// (which has the device's context current: a library call's Enqueue runs
// on the lane's bound thread).
func loadCublas() error {
	handleOnce.Do(func() { handle, handleErr = cublas.NewHandle() })
	return handleErr
}

// cublasSgemm enqueues C = A·B with cuBLAS on the stream it is given.
func cublasSgemm(a, b, c uint64, m, n, k int) func(stream uintptr) error {
	return func(stream uintptr) error {
		if err := loadCublas(); err != nil {
			return err
		}
		handleMu.Lock()
		defer handleMu.Unlock()
		return handle.Sgemm(stream, m, n, k, a, b, c)
	}
}

// syncingCall is a library call that breaks a capture rule: it
// synchronizes its stream (as a library that waits for its own work
// would). Eagerly that is merely slow; in a capture CUDA refuses it and
// invalidates the capture, so the batch falls back to eager execution.
func syncingCall() func(stream uintptr) error {
	return func(stream uintptr) error { return cublas.StreamSynchronize(stream) }
}

// openDevice opens GPU 0.
func openDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }
