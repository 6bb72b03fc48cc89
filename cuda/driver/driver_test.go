//go:build cuda

package driver_test

import (
	"testing"

	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/conformance"
)

func open(t *testing.T) backend.Device {
	d, err := driver.Open(driver.Config{Kernels: kernels.Builtin().With(kernels.FaultInjection())})
	if err != nil {
		t.Fatalf("driver.Open: got err %v, want nil (a GPU to test)", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return backend.Must(d)
}

// TestConformance runs the shared suite on the GPU. Its last subtest
// poisons the primary context on purpose, so it runs alone in its process.
func TestConformance(t *testing.T) { conformance.Run(t, open) }
