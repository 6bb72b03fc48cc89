package lanecore_test

import (
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// BenchmarkSubmit measures the lane's own overhead per submitted command on
// the zero-cost simulator: a batch of K commands, eager and replayed, polled
// every iteration.
func BenchmarkSubmit(b *testing.B) {
	for _, k := range []int{8, 64} {
		for _, mode := range []string{"eager", "replayed"} {
			b.Run(fmt.Sprintf("%s/K=%d", mode, k), func(b *testing.B) {
				r := newRig(b, sim.ClockZeroCost, 1)
				var entries []lanes.Entry
				for n := range k {
					if mode == "eager" {
						entries = append(entries, r.eagerInc(0, n))
					} else {
						entries = append(entries, r.inc(0, n))
					}
				}
				batch := lanes.Batch{Entries: entries}
				if mode == "replayed" {
					if _, err := r.lane.Configure(4); err != nil {
						b.Fatalf("Configure(4): got err %v, want nil", err)
					}
					r.submit(batch)
					if _, _, err := r.lane.Synchronize(); err != nil {
						b.Fatalf("Synchronize after the capture: got err %v, want nil", err)
					}
				}
				b.ResetTimer()
				for i := range b.N {
					if _, err := r.lane.Submit(batch); err != nil {
						b.Fatalf("Submit %d: got err %v, want nil", i, err)
					}
					if i%32 == 31 {
						if _, _, err := r.lane.Synchronize(); err != nil {
							b.Fatalf("Synchronize after submission %d: got err %v, want nil", i, err)
						}
					}
				}
				_, _, _ = r.lane.Synchronize()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*k), "ns/command")
			})
		}
	}
}
