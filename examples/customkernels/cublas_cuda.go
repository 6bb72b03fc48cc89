//go:build cuda

// cuBLAS on the real device, loaded at run time (examples/internal/cublas):
// one handle per lane, made by the library's per-lane Setup.

package main

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/examples/internal/cublas"
)

// cublasWorkspace is each lane's cuBLAS workspace: what NVIDIA suggests for
// Hopper (32 MiB), so cuBLAS never grows its own pool during a capture.
const cublasWorkspace = 32 << 20

// cublasSetup makes the lane's handle, on its bound thread, pointed at the
// lane's workspace (cublas.Handle.SetWorkspace sets it on every call, after
// the stream: setting a stream resets cuBLAS's workspace).
func cublasSetup(l cuda.LibraryLane) (any, error) {
	h, err := cublas.NewHandle()
	if err != nil {
		return nil, err
	}
	return h.SetWorkspace(l.Workspace.Addr(), l.Workspace.Length), nil
}

// cublasTeardown destroys the lane's handle.
func cublasTeardown(l cuda.LibraryLane) error { return l.State.(cublas.Handle).Destroy() }

// cublasSgemm enqueues C = A·B with the lane's cuBLAS handle on its stream.
func cublasSgemm(a, b, c uint64, m, n, k int) func(cuda.LibraryLane) error {
	return func(l cuda.LibraryLane) error { return l.State.(cublas.Handle).Sgemm(l.Stream, m, n, k, a, b, c) }
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
