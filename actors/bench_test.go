package actors_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// BenchmarkScheduler measures the scheduler's own overhead on the zero-cost
// simulator: closed-loop clients (four per lane, one tenant each) submit
// one-command batches; it reports submissions per second and the p50 and
// p99 submit-to-receipt latency.
func BenchmarkScheduler(b *testing.B) {
	for _, nl := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("lanes=%d", nl), func(b *testing.B) {
			clients := 4 * nl
			dev := newDevice(b, sim.Config{Clock: sim.ClockZeroCost}, clients)
			s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: nl})
			if err != nil {
				b.Fatalf("actors.Start: got err %v, want nil", err)
			}
			defer s.Stop(context.Background())
			per := max(b.N/clients, 1)
			lat := make([][]time.Duration, clients)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tenant := fmt.Sprintf("t%d", c)
					batch := dev.batch(c, 1)
					for range per {
						t0 := time.Now()
						if _, err := s.Submit(context.Background(), tenant, batch); err != nil {
							b.Errorf("Submit(%s): got err %v, want nil", tenant, err)
							return
						}
						lat[c] = append(lat[c], time.Since(t0))
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			var all []time.Duration
			for _, l := range lat {
				all = append(all, l...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			if len(all) == 0 {
				return
			}
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "subs/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
		})
	}
}
