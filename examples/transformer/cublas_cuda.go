//go:build cuda

// cuBLAS on the real device, loaded at run time (examples/internal/cublas),
// one handle per lane.

package main

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/examples/internal/cublas"
)

// cublasLibrary is cuBLAS as a per-lane library: each lane makes a handle
// on its own thread (Setup: outside any capture, since creating one
// allocates), points it at the lane's 32 MiB workspace so that cuBLAS
// never grows a pool of its own during a capture, and destroys it when
// the lane is rebuilt or stops.
func cublasLibrary() *cuda.Library {
	return &cuda.Library{
		Name:           "cublas",
		WorkspaceBytes: 32 << 20,
		Setup: func(l cuda.LibraryLane) (any, error) {
			h, err := cublas.NewHandle()
			if err != nil {
				return nil, err
			}
			return h.SetWorkspace(l.Workspace.Addr(), l.Workspace.Length), nil
		},
		Teardown: func(l cuda.LibraryLane) error {
			if h, ok := l.State.(cublas.Handle); ok {
				return h.Destroy()
			}
			return nil
		},
	}
}

// cublasSgemm enqueues C = A·B on the lane's stream with the lane's handle.
func cublasSgemm(a, b, c uint64, m, n, k int) func(cuda.LibraryLane) error {
	return func(l cuda.LibraryLane) error {
		h, ok := l.State.(cublas.Handle)
		if !ok {
			return fmt.Errorf("sgemm: lane %d holds no cuBLAS handle (its state is %T)", l.Lane, l.State)
		}
		return h.Sgemm(l.Stream, m, n, k, a, b, c)
	}
}

// openDevice opens GPU 0.
func openDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }
