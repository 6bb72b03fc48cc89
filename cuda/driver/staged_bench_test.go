//go:build cuda

package driver_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// BenchmarkStagedReplay compares a staged replay (new inputs in two sets
// of buffers used in turn: the lane pins them where they are and uploads
// from there, then runs the resident-input graph), the same with pinning
// off (staged-copied: new inputs copied into pinned staging and up to the
// device inside the graph), an in-place one
// (the caller writes its inputs into the staging, StagedInputs, here one
// byte each time, and ReplayWritten launches the full graph) with a
// resident-input replay (the same graph without the input copies), with and
// without collecting the output, an output-cache hit (no launch; it saves a
// collecting resident replay) returning fresh copies (Replay), into the
// caller's buffers (ReplayInto) and without comparing inputs (Repeat),
// for out = a + b over n float32; with plain pinned copies of the same
// bytes (both inputs in, the output out, then a stream synchronize): the
// link's speed in the same run; and with one copy of the output's bytes
// between Go slices (copy-output, the built-in copy on one core): what
// handing the output over costs at least.
func BenchmarkStagedReplay(b *testing.B) {
	for _, n := range []int{1 << 12, 1 << 20} {
		for _, mode := range []string{"copy-output", "pinned-copy", "staged", "staged-copied", "staged-into", "in-place", "resident", "resident-collect", "output-cache", "output-cache-into", "repeat"} {
			b.Run(fmt.Sprintf("%s/n=%d", mode, n), func(b *testing.B) {
				dev := bindOpen(b)
				st, err := backend.Must(dev).NewStream()
				if err != nil {
					b.Fatalf("NewStream: got err %v, want nil", err)
				}
				cfg := lanecore.Config{Device: backend.Must(dev), Stream: st}
				if mode == "staged-copied" {
					cfg.PinBytes = -1 // every input copied into its staging
				}
				l, err := lanecore.New(cfg)
				if err != nil {
					b.Fatalf("lanecore.New: got err %v, want nil", err)
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
				if mode == "copy-output" {
					benchCopy(b, int(size))
					return
				}
				a, bb, out := alloc(), alloc(), alloc()
				if mode == "pinned-copy" {
					benchPinnedCopy(b, st, []cuda.Region{a.Whole(), bb.Whole()}, []cuda.HostRegion{host(), host()}, out.Whole(), host())
					return
				}
				add, err := cuda.Launch(dev.Kernels().(kernels.Registry).MustSpec(kernels.Add), cuda.Linear(uint32(n), 256),
					cuda.BufferArg(out.Whole()), cuda.BufferArg(a.Whole()), cuda.BufferArg(bb.Whole()), cuda.I32Arg(int32(n)))
				if err != nil {
					b.Fatalf("cuda.Launch(add): got err %v, want nil", err)
				}
				program, err := lanecore.NewStaged([]lanes.Slot{{Staging: host(), Device: a.Whole()}, {Staging: host(), Device: bb.Whole()}}, []int{0, 1},
					[]lanes.Slot{{Staging: host(), Device: out.Whole()}}, []int{0},
					[]lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("bench", add), cache.PlanScope())}})
				if err != nil {
					b.Fatalf("lanecore.NewStaged: got err %v, want nil", err)
				}
				if _, err := l.Configure(4); err != nil {
					b.Fatalf("Configure(4): got err %v, want nil", err)
				}
				if err := l.Prepare(program); err != nil {
					b.Fatalf("Prepare: got err %v, want nil", err)
				}
				inputs := [2][][]byte{{make([]byte, size), make([]byte, size)}, {make([]byte, size), make([]byte, size)}}
				inputs[1][0][0] = 1
				into := strings.HasSuffix(mode, "-into") || mode == "repeat"
				collect := into || mode == "output-cache" || mode == "resident-collect"
				outs := program.MakeOutputs()
				if _, err := l.Replay(program, inputs[0], collect); err != nil {
					b.Fatalf("first Replay: got err %v, want nil", err)
				}
				if mode == "in-place" {
					benchInPlace(b, l, program)
					return
				}
				b.ResetTimer()
				for i := range b.N {
					in := inputs[0]
					if strings.HasPrefix(mode, "staged") {
						in = inputs[(i+1)%2]
					}
					if mode == "resident-collect" {
						// A replay that does not collect spends the output cache
						// (off the clock): the timed one launches the resident
						// variant and collects, as an output-cache miss would.
						b.StopTimer()
						if _, err := l.Replay(program, in, false); err != nil {
							b.Fatalf("Replay without collecting: got err %v, want nil", err)
						}
						b.StartTimer()
					}
					var res lanes.StagedResult
					switch {
					case mode == "repeat":
						res, err = l.Repeat(program, outs)
					case into:
						res, err = l.ReplayInto(program, in, outs)
					default:
						res, err = l.Replay(program, in, collect)
					}
					if err != nil {
						b.Fatalf("%s %d: got err %v, want nil", mode, i, err)
					}
					resident, hit := mode == "resident" || mode == "resident-collect", strings.HasPrefix(mode, "output-cache") || mode == "repeat"
					if resident != res.Resident || hit != res.OutputCache {
						b.Fatalf("%s replay: got Resident %v, OutputCache %v; want %v, %v", mode, res.Resident, res.OutputCache, resident, hit)
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

// benchPinnedCopy times plain copies of the bytes a staged replay moves,
// per op: each input from its pinned staging to the device
// (cuMemcpyHtoDAsync) and the output back into pinned staging
// (cuMemcpyDtoHAsync), then a synchronize: the link's speed for the same
// bytes, with no kernel and no graph.
func benchPinnedCopy(b *testing.B, st backend.Stream, dst []cuda.Region, src []cuda.HostRegion, out cuda.Region, outStaging cuda.HostRegion) {
	cmds := make([]cuda.Command, 0, len(dst)+1)
	for i := range dst {
		c, err := cuda.StageIn(dst[i], src[i])
		if err != nil {
			b.Fatalf("cuda.StageIn: got err %v, want nil", err)
		}
		cmds = append(cmds, c)
	}
	c, err := cuda.StageOut(outStaging, out)
	if err != nil {
		b.Fatalf("cuda.StageOut: got err %v, want nil", err)
	}
	cmds = append(cmds, c)
	b.ResetTimer()
	for range b.N {
		for _, c := range cmds {
			if err := st.Enqueue(c); err != nil {
				b.Fatalf("Enqueue(%v): got err %v, want nil", c.Kind, err)
			}
		}
		if err := st.Synchronize(); err != nil {
			b.Fatalf("Synchronize: got err %v, want nil", err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/replay")
}

// benchCopy times one copy of size bytes between Go slices (the
// built-in copy, one core).
func benchCopy(b *testing.B, size int) {
	src, dst := make([]byte, size), make([]byte, size)
	b.ResetTimer()
	for range b.N {
		copy(dst, src)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/replay")
}

// benchInPlace times replays of inputs written into the program's staging
// in place: one byte changes per replay, and the full graph runs.
func benchInPlace(b *testing.B, l *lanecore.Lane, program *lanecore.Staged) {
	views, err := l.StagedInputs(program)
	if err != nil {
		b.Fatalf("StagedInputs: got err %v, want nil", err)
	}
	b.ResetTimer()
	for i := range b.N {
		views[0][0] = byte(i)
		res, err := l.ReplayWritten(program, false)
		if err != nil || res.Resident {
			b.Fatalf("ReplayWritten %d: got resident %v, err %v; want the full graph, nil", i, res.Resident, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/replay")
	c := l.StagedCounters()
	b.ReportMetric(float64(c.HostToDeviceBytes)/float64(b.N+1), "h2d-B/replay")
}
