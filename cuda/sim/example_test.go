package sim_test

import (
	"encoding/binary"
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

// Capture three increments into a graph, replay it twice, and read the
// result back: the same bytes as six eager launches.
func Example() {
	dev, _ := sim.New(sim.Config{Clock: sim.ClockVirtual})
	defer dev.Close()
	st, _ := backend.Must(dev).NewStream()
	buf, _ := dev.Alloc(cuda.BufferSpec{Size: 4 * 256, Elem: cuda.I32})
	zero, _ := cuda.Zero(buf.Whole())
	_ = st.Enqueue(zero)

	inc, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(256, 128),
		cuda.BufferArg(buf.Whole()), cuda.I32Arg(256))
	_ = st.BeginCapture(backend.CaptureRelaxed)
	for range 3 {
		_ = st.Enqueue(inc)
	}
	graph, _ := st.EndCapture()
	exec, _ := graph.Instantiate()
	_ = exec.Upload(st)
	_ = st.Launch(exec)
	_ = st.Launch(exec)

	out := make([]byte, 4)
	first, _ := buf.Region(0, 4)
	_ = st.Readback(first, out) // synchronizes; on the virtual clock, time moves on
	fmt.Println("nodes:", graph.NodeCount(), "value:", binary.LittleEndian.Uint32(out))
	fmt.Println("device time:", dev.Now())
	// Output:
	// nodes: 3 value: 6
	// device time: 14.5µs
}
