package remote_test

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/lanesched/lanes/remote"
)

// BenchmarkRoundTrip: encoded steps of 16 replayed launches through a
// front to a lane host process (zero-cost simulated device) and back, 16
// tenants submitting at once, one step in flight each, under
// context.Background (a serving loop's).
func BenchmarkRoundTrip(b *testing.B) { roundTrips(context.Background(), b) }

// BenchmarkRoundTripWithdrawable is BenchmarkRoundTrip under a context
// that can end (and does not): each step is withdrawable, its context
// watched on the front and the host.
func BenchmarkRoundTripWithdrawable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	roundTrips(ctx, b)
}

func roundTrips(ctx context.Context, b *testing.B) {
	args := []string{"--sim-clock", "zero", "--lanes", "2"}
	if p := os.Getenv("LANEHOST_CPUPROFILE"); p != "" {
		args = append(args, "--cpuprofile", p)
	}
	if p := os.Getenv("LANEHOST_TRACE"); p != "" {
		args = append(args, "--exectrace", p)
	}
	cmd, addr := startHostProcess(b, args...)
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: b.Logf})
	if err != nil {
		b.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	callers := 16
	var cs []counter
	for i := range callers {
		cs = append(cs, setUp(b, f, "tenant-"+string(rune('a'+i))))
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	per := b.N/callers + 1
	for _, c := range cs {
		step, err := f.Encode(c.step(b, 16))
		if err != nil {
			b.Fatalf("Encode: got err %v, want nil", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				p, err := f.SubmitEncoded(ctx, c.tenant, step)
				if err == nil {
					_, err = p.Result()
				}
				if err != nil {
					b.Errorf("Submit: got err %v, want nil", err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
