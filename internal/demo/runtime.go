// The Go runtime's share of a run: allocations and GC per step.

package demo

import (
	"fmt"
	"io"
	"runtime/metrics"
	"time"

	"golang.org/x/sys/unix"
)

// RuntimeReport is what the Go runtime spent on the measured phase: the
// garbage collector's share is the usual limit of a busy serving process,
// and allocation per step is what drives it (README: "Tuning a serving
// process").
type RuntimeReport struct {
	GCCycles       uint64  `json:"gc_cycles"`
	GCPerSec       float64 `json:"gc_cycles_per_s"`
	BytesPerStep   float64 `json:"heap_bytes_per_step"`   // heap bytes allocated per ended step, by the whole process
	ObjectsPerStep float64 `json:"heap_objects_per_step"` // heap objects allocated per ended step
	GCCPUShare     float64 `json:"gc_cpu_share"`          // GC CPU time over all CPU time the runtime accounted (an estimate the runtime refreshes each cycle)
	// CPUPerStep is the process's CPU time (user and system, every
	// thread) per ended step, in nanoseconds: with --clock none, the
	// scheduler's own cost (clients, lanes, the simulated device's
	// bookkeeping and the runtime), as no byte is computed.
	CPUPerStep float64 `json:"cpu_ns_per_step"`
}

// runtimeSample names the runtime metrics a RuntimeReport is made of.
var runtimeSample = []string{
	"/gc/cycles/total:gc-cycles",
	"/gc/heap/allocs:bytes",
	"/gc/heap/allocs:objects",
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
}

// runtimeMeter reads the runtime's counters at the start of the measured
// phase and reports the difference at its end.
type runtimeMeter struct {
	start []metrics.Sample
	cpu   time.Duration
}

// processCPU is the process's user and system time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func readRuntime() []metrics.Sample {
	s := make([]metrics.Sample, len(runtimeSample))
	for i, name := range runtimeSample {
		s[i].Name = name
	}
	metrics.Read(s)
	return s
}

func startRuntimeMeter() *runtimeMeter { return &runtimeMeter{start: readRuntime(), cpu: processCPU()} }

// value reads sample i as a float whatever its kind; a metric this runtime
// does not know reads 0.
func value(s []metrics.Sample, i int) float64 {
	switch s[i].Value.Kind() {
	case metrics.KindUint64:
		return float64(s[i].Value.Uint64())
	case metrics.KindFloat64:
		return s[i].Value.Float64()
	}
	return 0
}

// report gives the phase's figures for the steps ended in it, elapsed long.
func (m *runtimeMeter) report(steps int64, elapsed time.Duration) RuntimeReport {
	end := readRuntime()
	delta := func(i int) float64 { return value(end, i) - value(m.start, i) }
	secs := max(elapsed.Seconds(), 1e-9)
	perStep := func(v float64) float64 {
		if steps <= 0 {
			return 0
		}
		return v / float64(steps)
	}
	r := RuntimeReport{GCCycles: uint64(delta(0)), BytesPerStep: perStep(delta(1)), ObjectsPerStep: perStep(delta(2)),
		CPUPerStep: perStep(float64(processCPU() - m.cpu))}
	r.GCPerSec = float64(r.GCCycles) / secs
	if cpu := delta(4); cpu > 0 {
		r.GCCPUShare = delta(3) / cpu
	}
	return r
}

func (r RuntimeReport) write(w io.Writer) {
	fmt.Fprintf(w, "go runtime: %.0f B and %.1f objects allocated per step, %d GC cycles (%.0f/s), GC %.1f%% of CPU; process CPU %.1f µs per step\n",
		r.BytesPerStep, r.ObjectsPerStep, r.GCCycles, r.GCPerSec, 100*r.GCCPUShare, r.CPUPerStep/1e3)
}
