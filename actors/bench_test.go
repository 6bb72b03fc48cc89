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
	"golang.org/x/sys/unix"
)

// BenchmarkScheduler measures the scheduler's own cost on the simulator
// that neither models time nor computes bytes (ClockZeroCost, NoData):
// closed-loop clients (four per lane, one tenant each) submit one-command
// batches; it reports submissions per second, the p50 and p99
// submit-to-receipt latency, and the process's CPU time and allocations per
// submission (clients, lanes, the device's bookkeeping and the runtime).
func BenchmarkScheduler(b *testing.B) {
	for _, nl := range []int{1, 4, 8} {
		b.Run(fmt.Sprintf("lanes=%d", nl), func(b *testing.B) {
			clients := 4 * nl
			dev := newDevice(b, sim.Config{Clock: sim.ClockZeroCost, NoData: true}, clients)
			s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: nl})
			if err != nil {
				b.Fatalf("actors.Start: got err %v, want nil", err)
			}
			defer s.Stop(context.Background())
			per := max(b.N/clients, 1)
			lat := make([][]time.Duration, clients)
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), processCPU()
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
			elapsed, cpu := time.Since(start), processCPU()-cpu0
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
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(len(all)), "cpu-ns/sub")
			b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-us")
		})
	}
}

// processCPU is the process's user and system time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
