// Fault injection: launch failures, sticky faults and hangs on chosen
// kernels, at a rate or a count.

package sim

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
)

// FaultKind is a failure the simulated device can inject.
type FaultKind uint8

// The injectable faults, each as CUDA reports it.
const (
	// FaultLaunch fails an eager launch or graph launch synchronously with
	// CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES; the stream and device stay usable.
	FaultLaunch FaultKind = iota + 1
	// FaultCaptureReject rejects a command enqueued during a capture with
	// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture.
	FaultCaptureReject
	// FaultOutOfMemory fails an allocation or a graph instantiation with
	// CUDA_ERROR_OUT_OF_MEMORY (retryable).
	FaultOutOfMemory
	// FaultSticky makes the command fault on the device with
	// CUDA_ERROR_ILLEGAL_ADDRESS when it runs: the device is poisoned and
	// every stream of it fails.
	FaultSticky
	// FaultHang makes the command never finish; its stream stops there.
	FaultHang
	// FaultUpdateReject refuses an executable update
	// (CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED) that the rules would allow,
	// and an in-place parameter update (a rebind, as device_refused, at
	// node 0: the executable is left as it was). It matches updates and
	// rebinds, not launches; a rule's Kernel narrows it to those of
	// executables that launch that kernel.
	FaultUpdateReject
)

// String names the fault in snake_case, as spans and reports name things.
func (k FaultKind) String() string {
	switch k {
	case FaultLaunch:
		return "launch"
	case FaultCaptureReject:
		return "capture_reject"
	case FaultOutOfMemory:
		return "out_of_memory"
	case FaultSticky:
		return "sticky"
	case FaultHang:
		return "hang"
	case FaultUpdateReject:
		return "update_reject"
	}
	return fmt.Sprintf("fault(%d)", uint8(k))
}

// Fault is one fault-injection rule. A rule matches operations of its kind
// (allocations and instantiations for FaultOutOfMemory; commands enqueued
// during a capture for FaultCaptureReject; eager kernel launches and graph
// launches with at least one kernel node for the others; a library call counts as a launch of its
// name), narrowed to launches of Kernel when it is set. It fires on
// the Nth match (1-based) when Nth is set, otherwise on each match with
// probability Rate drawn from the device's seeded generator, at most Times
// times (0: once for Nth, unlimited for Rate).
type Fault struct {
	Kind   FaultKind
	Kernel string
	Nth    uint64
	Rate   float64
	Times  int

	matched uint64
	fired   int
}

func (f *Fault) validate() error {
	if f.Kind < FaultLaunch || f.Kind > FaultUpdateReject {
		return cuda.Contractf("sim fault", cuda.ErrInvalidCommand, "unknown fault kind %d", uint8(f.Kind))
	}
	if f.Nth == 0 && (f.Rate <= 0 || f.Rate > 1) {
		return cuda.Contractf("sim fault", cuda.ErrInvalidCommand, "%v fault needs Nth >= 1 or a Rate in (0, 1], got Nth=0 Rate=%v", f.Kind, f.Rate)
	}
	if f.Times < 0 {
		return cuda.Contractf("sim fault", cuda.ErrInvalidCommand, "%v fault has negative Times %d", f.Kind, f.Times)
	}
	return nil
}

// matchesKernel reports whether an operation launching kernels matches a
// rule for want ("" matches every operation).
func matchesKernel(want string, kernels []string) bool {
	if want == "" {
		return true
	}
	for _, k := range kernels {
		if k == want {
			return true
		}
	}
	return false
}

// fire reports whether a fault of kind fires for an operation launching
// kernels. It is called with d.mu held, in the order the operations are made,
// so a seeded device fires the same faults on the same operations.
func (d *device) fire(kind FaultKind, kernels []string) bool {
	fired := false
	for _, f := range d.faults {
		if f.Kind != kind || !matchesKernel(f.Kernel, kernels) {
			continue
		}
		f.matched++
		limit := f.Times
		if limit == 0 && f.Nth != 0 {
			limit = 1
		}
		if limit != 0 && f.fired >= limit {
			continue
		}
		hit := false
		if f.Nth != 0 {
			hit = f.matched >= f.Nth
		} else {
			hit = d.rng.Float64() < f.Rate
		}
		if hit && !fired {
			f.fired++
			fired = true
		}
	}
	return fired
}

// InjectFault adds a fault rule to the device. Rules fire in the order they
// were added; an operation takes at most one fault of each kind.
func (d *device) InjectFault(f Fault) error {
	if err := f.validate(); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, &f)
	return nil
}

// ClearFaults removes every fault rule. A device already poisoned stays
// poisoned, and a hung stream stays hung.
func (d *device) ClearFaults() {
	d.mu.Lock()
	d.faults = nil
	d.mu.Unlock()
}
