package sim_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
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
		data, _ := c.MarshalBinary()
		f.Add(data)
	}
	z, _ := cuda.Zero(buf.Whole())
	data, _ := z.MarshalBinary()
	f.Add(data)
	f.Fuzz(func(t *testing.T, data []byte) {
		var c cuda.Command
		if err := c.UnmarshalBinary(data); err != nil {
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
