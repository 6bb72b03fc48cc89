//go:build cuda

package driver_test

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
)

// stepRig is the workload of the hand-written C++ and PyTorch loops lanes is
// measured against (scripts/gpu-scorecard.sh): K tiny kernels per
// step, each adding 1 to 1024 int32, launched as 4 blocks of 256 threads.
type stepRig struct {
	dev  driver.Device
	s    backend.Stream
	buf  cuda.Buffer
	inc  cuda.Command
	exec backend.Exec
	k    int
}

func newStepRig(b testing.TB, dev driver.Device, k int) *stepRig {
	s, err := backend.Must(dev).NewStream()
	if err != nil {
		b.Fatalf("NewStream: got err %v, want nil", err)
	}
	buf, err := dev.Alloc(cuda.BufferSpec{Size: 4096, Elem: cuda.I32})
	if err != nil {
		b.Fatalf("Alloc(4096 bytes): got err %v, want nil", err)
	}
	z, _ := cuda.Zero(buf.Whole())
	inc, err := cuda.Launch(dev.Kernels().(kernels.Registry).MustSpec(kernels.Inc), cuda.Linear(1024, 256), cuda.BufferArg(buf.Whole()), cuda.I32Arg(1024))
	if err != nil {
		b.Fatalf("cuda.Launch(inc): got err %v, want nil", err)
	}
	r := &stepRig{dev: dev, s: s, buf: buf, inc: inc, k: k}
	if err := s.Enqueue(z); err != nil {
		b.Fatalf("Enqueue(zero): got err %v, want nil", err)
	}
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		b.Fatalf("BeginCapture: got err %v, want nil", err)
	}
	r.eager(b)
	g, err := s.EndCapture()
	if err != nil {
		b.Fatalf("EndCapture: got err %v, want nil", err)
	}
	if r.exec, err = g.Instantiate(); err != nil {
		b.Fatalf("Instantiate: got err %v, want nil", err)
	}
	if err := r.exec.Upload(s); err != nil {
		b.Fatalf("Upload: got err %v, want nil", err)
	}
	return r
}

func (r *stepRig) eager(b testing.TB) {
	for range r.k {
		if err := r.s.Enqueue(r.inc); err != nil {
			b.Fatalf("Enqueue(inc): got err %v, want nil", err)
		}
	}
}

func (r *stepRig) replay(b testing.TB) {
	if err := r.s.Launch(r.exec); err != nil {
		b.Fatalf("Launch: got err %v, want nil", err)
	}
}

// counter synchronizes and reads the first element.
func (r *stepRig) counter(b testing.TB) int {
	out := make([]byte, 4)
	first, _ := r.buf.Region(0, 4)
	if err := r.s.Readback(first, out); err != nil {
		b.Fatalf("Readback of the counter: got err %v, want nil", err)
	}
	return int(int32(binary.LittleEndian.Uint32(out)))
}

func bindOpen(b *testing.B) driver.Device {
	d, err := driver.Open(driver.Config{})
	if err != nil {
		b.Fatalf("driver.Open: got err %v, want nil", err)
	}
	unbind, err := d.BindThread()
	if err != nil {
		b.Fatalf("BindThread: got err %v, want nil", err)
	}
	b.Cleanup(func() { _ = d.Close(); unbind() })
	return d
}

// BenchmarkStep times one step of K launches, eagerly and as one graph
// replay, per step as the anchors report it (us/step), after one warm step.
func BenchmarkStep(b *testing.B) {
	for _, k := range []int{8, 64, 256} {
		for _, mode := range []string{"eager", "graph"} {
			b.Run(fmt.Sprintf("%s/K=%d", mode, k), func(b *testing.B) {
				dev := bindOpen(b)
				r := newStepRig(b, dev, k)
				step := r.eager
				if mode == "graph" {
					step = r.replay
				}
				step(b)
				before := r.counter(b)
				b.ResetTimer()
				for range b.N {
					step(b)
				}
				if err := r.s.Synchronize(); err != nil {
					b.Fatalf("Synchronize: got err %v, want nil", err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/step")
				if got := r.counter(b) - before; got != k*b.N {
					b.Fatalf("got the counter moved by %d, want %d", got, k*b.N)
				}
			})
		}
	}
}

// BenchmarkStreams replays K=64 graphs on 8 streams at once, one bound
// goroutine each, and reports the aggregate steps per second.
func BenchmarkStreams(b *testing.B) {
	const streams, k = 8, 64
	dev := bindOpen(b)
	rigs := make([]*stepRig, streams)
	for i := range rigs {
		rigs[i] = newStepRig(b, dev, k)
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	for _, r := range rigs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			unbind, err := dev.BindThread()
			if err != nil {
				b.Errorf("BindThread: got err %v, want nil", err)
				return
			}
			defer unbind()
			for range b.N {
				if err := r.s.Launch(r.exec); err != nil {
					b.Errorf("Launch: got err %v, want nil", err)
					return
				}
			}
			if err := r.s.Synchronize(); err != nil {
				b.Errorf("Synchronize: got err %v, want nil", err)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(streams*b.N)/b.Elapsed().Seconds(), "steps/s")
}

// BenchmarkRecapture compares the ways to replay a segment whose pointers
// changed: capture + instantiate + upload a new executable; capture +
// update a resident one in place (cuGraphExecUpdate); or, with no capture,
// rebind the resident's kernel nodes to the new commands (Exec.Rebind,
// cuGraphExecKernelNodeSetParams per node). "capture" is the capture
// alone, the part the first two share. scripts/anchors/recapture_bench.cu
// does the same through the driver API alone (its set-params is rebind).
func BenchmarkRecapture(b *testing.B) {
	for _, k := range []int{64, 256} {
		for _, mode := range []string{"capture", "instantiate", "update", "rebind"} {
			b.Run(fmt.Sprintf("%s/K=%d", mode, k), func(b *testing.B) {
				dev := bindOpen(b)
				rigs := [2]*stepRig{newStepRig(b, dev, k), newStepRig(b, dev, k)}
				s := rigs[0].s
				exec := rigs[0].exec
				capture := func(r *stepRig) backend.Graph {
					if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
						b.Fatalf("BeginCapture: got err %v, want nil", err)
					}
					for range k {
						if err := s.Enqueue(r.inc); err != nil {
							b.Fatalf("Enqueue(inc) under capture: got err %v, want nil", err)
						}
					}
					g, err := s.EndCapture()
					if err != nil {
						b.Fatalf("EndCapture: got err %v, want nil", err)
					}
					return g
				}
				cmds := [2][]cuda.Command{}
				for i, r := range rigs {
					for range k {
						cmds[i] = append(cmds[i], r.inc)
					}
				}
				b.ResetTimer()
				for i := range b.N {
					if mode == "rebind" {
						if err := exec.Rebind(cmds[i%2]); err != nil {
							b.Fatalf("Rebind: got err %v, want nil", err)
						}
						continue
					}
					g := capture(rigs[i%2])
					switch mode {
					case "instantiate":
						x, err := g.Instantiate()
						if err != nil {
							b.Fatalf("Instantiate: got err %v, want nil", err)
						}
						if err := x.Upload(s); err != nil {
							b.Fatalf("Upload: got err %v, want nil", err)
						}
						_ = exec.Destroy()
						exec = x
					case "update":
						if err := exec.Update(g); err != nil {
							b.Fatalf("Update: got err %v, want nil", err)
						}
					}
					_ = g.Destroy()
				}
				if err := s.Synchronize(); err != nil {
					b.Fatalf("Synchronize: got err %v, want nil", err)
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/op")
				// The executable replays the last captured buffer.
				before := rigs[(b.N-1)%2].counter(b)
				if err := s.Launch(exec); err != nil {
					b.Fatalf("Launch of the final executable: got err %v, want nil", err)
				}
				if err := s.Synchronize(); err != nil { // the counter is read on the rig's own stream
					b.Fatalf("Synchronize after the final launch: got err %v, want nil", err)
				}
				if mode != "capture" {
					if got := rigs[(b.N-1)%2].counter(b); got != before+k {
						b.Fatalf("after %s: got the replay moving the counter by %d, want %d", mode, got-before, k)
					}
				}
			})
		}
	}
}

// BenchmarkGraphMemory instantiates and uploads executables of K tiny
// kernels and reports what each is charged (Exec.DeviceBytes: the fit,
// scaled to what the device measured around every instantiation and
// upload) beside what the device's free memory fell by, per executable.
func BenchmarkGraphMemory(b *testing.B) {
	for _, k := range []int{16, 64, 256} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			dev := bindOpen(b)
			r := newStepRig(b, dev, k)
			var execs []backend.Exec
			var charged int64
			b.ResetTimer()
			for range b.N {
				if err := r.s.BeginCapture(backend.CaptureRelaxed); err != nil {
					b.Fatalf("BeginCapture: got err %v, want nil", err)
				}
				r.eager(b)
				g, err := r.s.EndCapture()
				if err != nil {
					b.Fatalf("EndCapture: got err %v, want nil", err)
				}
				x, err := g.Instantiate()
				if err != nil {
					b.Fatalf("Instantiate: got err %v, want nil", err)
				}
				if err := x.Upload(r.s); err != nil {
					b.Fatalf("Upload: got err %v, want nil", err)
				}
				_ = g.Destroy()
				execs = append(execs, x)
			}
			b.StopTimer()
			for _, x := range execs {
				charged += x.DeviceBytes()
				_ = x.Destroy()
			}
			b.ReportMetric(float64(charged)/float64(b.N), "charged-B/exec")
		})
	}
}
