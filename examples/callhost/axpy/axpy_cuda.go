//go:build cuda

// cuBLAS for the real device, loaded at run time (examples/internal/cublas).

package axpy

import (
	"errors"
	"sync"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/internal/cublas"
)

var (
	mu     sync.Mutex // one handle: its stream is set for each call, with the call
	handle *cublas.Handle
)

// Setup loads libcublas and makes the host's handle, on a thread with the
// device's context current (hostcmd.Options.Setup): before the host
// serves, so that no capture sees the handle's allocations. One handle
// serves every lane: cublasSaxpy uses no workspace, and each call sets the
// handle's stream under mu. (A routine with a workspace, sgemm's, wants a
// handle per stream.)
func Setup(cuda.Device) error {
	mu.Lock()
	defer mu.Unlock()
	if handle != nil {
		return nil
	}
	h, err := cublas.NewHandle()
	if err != nil {
		return err
	}
	handle = &h
	return nil
}

// enqueue is cublasSaxpy of x into y on the stream it is given.
func enqueue(x, y cuda.Region, a float32) func(stream uintptr) error {
	n := int(y.Length / 4)
	return func(stream uintptr) error {
		mu.Lock()
		defer mu.Unlock()
		if handle == nil {
			return errors.New("axpy: no cuBLAS handle: serve the call from a host with axpy.Setup (hostcmd.Options.Setup)")
		}
		return handle.Saxpy(stream, n, a, x.Addr(), y.Addr())
	}
}
