//go:build cuda

package driver_test

import (
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
)

// BenchmarkStagedReplay compares a staged replay (inputs copied into pinned
// staging and up to the device inside the graph, output read back) with a
// resident-input replay (the same graph without the input copies) and an
// output-cache hit (no launch), for out = a + b over n float32.
func BenchmarkStagedReplay(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 20} {
		for _, mode := range []string{"staged", "resident", "output-cache"} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				dev := bindOpen(b)
				st, err := dev.NewStream()
				if err != nil {
					b.Fatalf("NewStream: got err %v, want nil", err)
				}
				l, err := lanes.New(lanes.Config{Device: dev, Stream: st})
				if err != nil {
					b.Fatalf("lanes.New: got err %v, want nil", err)
				}
				size := uint64(4 * n)
				alloc := func() cuda.Buffer {
					x, err := dev.Alloc(cuda.BufferSpec{Size: size, Elem: cuda.F32})
					if err != nil {
						b.Fatalf("Alloc(%d bytes): got err %v, want nil", size, err)
					}
					return x
				}
				host := func() cuda.HostRegion {
					h, err := dev.AllocHost(size)
					if err != nil {
						b.Fatalf("AllocHost(%d bytes): got err %v, want nil", size, err)
					}
					return h.Whole()
				}
				a, bb, out := alloc(), alloc(), alloc()
				add, err := cuda.Launch(dev.Kernels().(kernels.Registry).MustSpec(kernels.Add), cuda.Linear(uint32(n), 256),
					cuda.BufferArg(out.Whole()), cuda.BufferArg(a.Whole()), cuda.BufferArg(bb.Whole()), cuda.I32Arg(int32(n)))
				if err != nil {
					b.Fatalf("cuda.Launch(add): got err %v, want nil", err)
				}
				program, err := lanes.NewStaged([]lanes.Slot{{Staging: host(), Device: a.Whole()}, {Staging: host(), Device: bb.Whole()}}, []int{0, 1},
					[]lanes.Slot{{Staging: host(), Device: out.Whole()}}, []int{0},
					[]lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("bench", add), cache.PlanScope())}})
				if err != nil {
					b.Fatalf("lanes.NewStaged: got err %v, want nil", err)
				}
				if _, err := l.Configure(4); err != nil {
					b.Fatalf("Configure(4): got err %v, want nil", err)
				}
				if err := l.Prepare(program); err != nil {
					b.Fatalf("Prepare: got err %v, want nil", err)
				}
				inputs := [2][][]byte{{make([]byte, size), make([]byte, size)}, {make([]byte, size), make([]byte, size)}}
				inputs[1][0][0] = 1
				collect := mode == "output-cache"
				if _, err := l.Replay(program, inputs[0], collect); err != nil {
					b.Fatalf("first Replay: got err %v, want nil", err)
				}
				b.ResetTimer()
				for i := range b.N {
					in := inputs[0]
					if mode == "staged" {
						in = inputs[(i+1)%2]
					}
					res, err := l.Replay(program, in, collect)
					if err != nil {
						b.Fatalf("Replay %d: got err %v, want nil", i, err)
					}
					if (mode == "resident") != res.Resident || (mode == "output-cache") != res.OutputCache {
						b.Fatalf("%s replay: got Resident %v, OutputCache %v; want %v, %v (%+v)", mode, res.Resident, res.OutputCache, mode == "resident", mode == "output-cache", res)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/replay")
				c := l.StagedCounters()
				b.ReportMetric(float64(c.HostToDeviceBytes)/float64(b.N+1), "h2d-B/replay")
			})
		}
	}
}
