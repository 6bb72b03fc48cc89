//go:build !cuda

package axpy

import "github.com/lanesched/lanes/cuda"

// Without the cuda tag the call runs on the simulated device alone: no
// Enqueue, and nothing to set up.
func enqueue(x, y cuda.Region, a float32) func(stream uintptr) error { return nil }

// Setup is nil without the cuda tag: the simulated device needs no state.
var Setup func(cuda.Device) error
