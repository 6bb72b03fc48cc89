package sim_test

import (
	"testing"

	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/conformance"
)

func openSim(mode sim.ClockMode) conformance.Open {
	return func(t *testing.T) backend.Device {
		d, err := sim.New(sim.Config{Clock: mode, Memory: 1 << 30, Kernels: kernels.Builtin().With(kernels.FaultInjection())})
		if err != nil {
			t.Fatalf("sim.New(%v): got err %v, want nil", mode, err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return backend.Must(d)
	}
}

func TestConformanceVirtual(t *testing.T)  { conformance.Run(t, openSim(sim.ClockVirtual)) }
func TestConformanceZeroCost(t *testing.T) { conformance.Run(t, openSim(sim.ClockZeroCost)) }
func TestConformanceRealTime(t *testing.T) { conformance.Run(t, openSim(sim.ClockRealTime)) }

// TestConformanceInitCheck: the conformance suite reads nothing it did not
// write, so a device that reports such reads passes it as well.
func TestConformanceInitCheck(t *testing.T) {
	conformance.Run(t, func(t *testing.T) backend.Device {
		d, err := sim.New(sim.Config{Clock: sim.ClockVirtual, Memory: 1 << 30, InitCheck: true, Kernels: kernels.Builtin().With(kernels.FaultInjection())})
		if err != nil {
			t.Fatalf("sim.New: got err %v, want nil", err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return backend.Must(d)
	})
}
