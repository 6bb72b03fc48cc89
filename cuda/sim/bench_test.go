package sim_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

// BenchmarkLaunch measures the simulated device's own overhead in the
// zero-cost mode: ns per eager launch, and per graph launch of K nodes,
// beside the per-step cost of the same K launches eagerly.
func BenchmarkLaunch(b *testing.B) {
	for _, k := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("eager/K=%d", k), func(b *testing.B) {
			r := newRig(b, sim.Config{Clock: sim.ClockZeroCost})
			s := r.stream()
			buf := r.counter(s, 1) // one element: the kernel body costs nothing, the launch path is measured
			c := r.inc(buf)
			b.ResetTimer()
			for i := range b.N {
				for range k {
					if err := s.Enqueue(c); err != nil {
						b.Fatalf("Enqueue: got err %v, want nil", err)
					}
				}
				if i%64 == 63 {
					_ = s.Synchronize()
				}
			}
			_ = s.Synchronize()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/launch")
		})
		b.Run(fmt.Sprintf("graph/K=%d", k), func(b *testing.B) {
			r := newRig(b, sim.Config{Clock: sim.ClockZeroCost})
			s := r.stream()
			buf := r.counter(s, 1) // one element: the kernel body costs nothing, the launch path is measured
			x := r.capture(s, buf, k)
			b.ResetTimer()
			for i := range b.N {
				if err := s.Launch(x); err != nil {
					b.Fatalf("Launch: got err %v, want nil", err)
				}
				if i%64 == 63 {
					_ = s.Synchronize()
				}
			}
			_ = s.Synchronize()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/graph-launch")
		})
	}
}

// FuzzEnqueue decodes arbitrary bytes into a command and enqueues it on a
// simulated stream: whatever the input, the device answers with a typed
// error or runs the command, and never panics.
func FuzzEnqueue(f *testing.F) {
	r := newRig(f, sim.Config{Clock: sim.ClockZeroCost})
	s := r.stream()
	buf := r.counter(s, 64)
	for _, c := range []cuda.Command{r.inc(buf)} {
		data, _ := backend.EncodeCommand(c)
		f.Add(data)
	}
	z, _ := cuda.Zero(buf.Whole())
	data, _ := backend.EncodeCommand(z)
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		var c cuda.Command
		if err := backend.DecodeCommand(&c, data); err != nil {
			return
		}
		if err := s.Enqueue(c); err != nil {
			var ce *cuda.Error
			if !errors.As(err, &ce) {
				t.Fatalf("Enqueue(%v): got err %v (%T), want a *cuda.Error", c, err, err)
			}
		}
		_ = s.Query()
	})
}

// BenchmarkInitCheck measures Config.InitCheck, off and on, in the
// zero-cost mode: the launch path (graph launches of K=8 increments of
// one element, as BenchmarkLaunch), and a replay-loop step (upload 4 KiB,
// replay a graph of 8 axpy launches over 1024 floats, read 4 KiB back),
// with its regions written throughout, and with each launch's x region
// 4x what is written and read (a kernel that reads a cache up to its
// position: every launch is probed).
func BenchmarkInitCheck(b *testing.B) {
	for _, on := range []bool{false, true} {
		mode := map[bool]string{false: "off", true: "on"}[on]
		b.Run("graph/K=8/"+mode, func(b *testing.B) {
			r := newRig(b, sim.Config{Clock: sim.ClockZeroCost, InitCheck: on})
			s := r.stream()
			buf := r.counter(s, 1)
			x := r.capture(s, buf, 8)
			b.ResetTimer()
			for i := range b.N {
				if err := s.Launch(x); err != nil {
					b.Fatalf("Launch: got err %v, want nil", err)
				}
				if i%64 == 63 {
					_ = s.Synchronize()
				}
			}
			if err := s.Synchronize(); err != nil {
				b.Fatalf("Synchronize: got err %v, want nil", err)
			}
		})
		for _, region := range []int{1024, 4096} {
			name := map[int]string{1024: "step/", 4096: "step-probed/"}[region] + mode
			b.Run(name, func(b *testing.B) {
				const n = 1024
				r := newRig(b, sim.Config{Clock: sim.ClockZeroCost, InitCheck: on, Kernels: testKernels()})
				s := r.stream()
				y, x := r.alloc(n, cuda.F32), r.alloc(region, cuda.F32)
				r.zero(s, y.Whole())
				in, err := cuda.Upload(r.region(x, 0, n), make([]byte, 4*n))
				if err != nil {
					b.Fatalf("cuda.Upload: got err %v, want nil", err)
				}
				cmds := make([]cuda.Command, 8)
				for i := range cmds {
					cmds[i] = r.axpy(y.Whole(), x.Whole(), n)
				}
				_, ex := r.captured(s, cmds...)
				out := make([]byte, 4*n)
				b.ResetTimer()
				for range b.N {
					if err := s.Enqueue(in); err != nil {
						b.Fatalf("Enqueue: got err %v, want nil", err)
					}
					if err := s.Launch(ex); err != nil {
						b.Fatalf("Launch: got err %v, want nil", err)
					}
					if err := s.Readback(y.Whole(), out); err != nil {
						b.Fatalf("Readback: got err %v, want nil", err)
					}
				}
			})
		}
	}
}

// BenchmarkRebind is the simulated device's own cost of an in-place
// parameter update of K kernel nodes (Exec.Rebind), in turn to two
// tenants' buffers: of the same sizes (only the buffers differ, the
// checks the nodes passed hold but the buffers'), and of other sizes (each
// command checked in full). ns per rebind, and per node.
func BenchmarkRebind(b *testing.B) {
	for _, k := range []int{16, 64} {
		for _, sizes := range []string{"same", "other"} {
			b.Run(fmt.Sprintf("K=%d/sizes=%s", k, sizes), func(b *testing.B) {
				r := newRig(b, sim.Config{Clock: sim.ClockZeroCost})
				s := r.stream()
				a := r.counter(s, 16)
				n := 16
				if sizes == "other" {
					n = 32
				}
				other := r.counter(s, n)
				x := r.capture(s, a, k)
				steps := [2][]cuda.Command{}
				for i, buf := range []cuda.Buffer{a, other} {
					for range k {
						steps[i] = append(steps[i], r.inc(buf))
					}
				}
				b.ResetTimer()
				for i := range b.N {
					if err := x.Rebind(steps[i%2]); err != nil {
						b.Fatalf("Rebind: got err %v, want nil", err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/node")
			})
		}
	}
}
