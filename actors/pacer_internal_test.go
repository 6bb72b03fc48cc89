package actors

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
)

// pace plays a lane against a stream whose every submission holds it for
// hold: the lane looks when the pacer says the fence is due, late by late
// when it was not spinning, and then every spinEvery until it sees the
// end. It returns what the pacer learned after rounds submissions.
func pace(p *fencePacer, hold, late, spinEvery time.Duration, rounds int) time.Duration {
	t0 := time.Unix(0, 0)
	for range rounds {
		look := p.est + late
		for look < hold {
			p.observe(t0, t0.Add(look), 0)
			look += spinEvery
		}
		p.observe(t0, t0.Add(look), 1)
	}
	return p.est
}

// TestPacerLearnsTheHold: a lane that spins (looks 2 µs apart, on time)
// learns the time a submission holds the stream to within a few percent,
// and one whose first look comes a millisecond late (a parked timer under
// a millisecond, when the process is idle) still learns a time no longer
// than the hold, so it keeps asking early rather than drifting later with
// each late look.
func TestPacerLearnsTheHold(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hold, late time.Duration
		lo, hi     time.Duration
	}{
		{"spinning", 67 * time.Microsecond, 0, 60 * time.Microsecond, 72 * time.Microsecond},
		{"a millisecond late", 67 * time.Microsecond, time.Millisecond, 0, 67 * time.Microsecond},
		{"long steps, late", 5 * time.Millisecond, time.Millisecond, 3 * time.Millisecond, 5200 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p fencePacer
			got := pace(&p, tc.hold, tc.late, 2*time.Microsecond, 400)
			if got < tc.lo || got > tc.hi {
				t.Fatalf("learned %v for a hold of %v, looks %v late: want %v to %v", got, tc.hold, tc.late, tc.lo, tc.hi)
			}
		})
	}
}

// TestPacerSharesATimeAmongEnds: ends seen together share the time since
// the lane's progress, and nothing learned is forgotten by forget alone.
func TestPacerSharesATimeAmongEnds(t *testing.T) {
	var p fencePacer
	t0 := time.Unix(0, 0)
	p.observe(t0, t0.Add(300*time.Microsecond), 0)
	p.observe(t0, t0.Add(302*time.Microsecond), 3)
	if want := 301 * time.Microsecond / 3; p.est != want {
		t.Fatalf("three ends bracketed at 300-302 µs: learned %v, want %v", p.est, want)
	}
	p.forget()
	if p.est != 0 || !p.emptyAt.IsZero() {
		t.Fatalf("after forget: got %+v, want nothing learned", p)
	}
}

// TestAnIdleLaneHoldsNoSpinPlace: with places to spin (as on a machine of
// 16 CPUs), lanes of the zero Config that served steps from many callers
// hold none once their work ended, and every step ended well.
func TestAnIdleLaneHoldsNoSpinPlace(t *testing.T) {
	old := spinBudget
	spinBudget = 4
	t.Cleanup(func() { spinBudget = old })
	dev, err := sim.New(sim.Config{Clock: sim.ClockRealTime})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	s, err := Start(context.Background(), Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2})
	if err != nil {
		t.Fatalf("Start: got err %v, want nil", err)
	}
	t.Cleanup(func() {
		_ = s.Stop(context.Background())
		_ = dev.Close()
	})
	var wg sync.WaitGroup
	for g := range 4 {
		buf, _ := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		testdev.Zero(t, dev, buf)
		inc, _ := cuda.Launch(dev.Registry().MustSpec("inc_i32"), cuda.Linear(16, 16), cuda.BufferArg(buf.Whole()), cuda.I32Arg(16))
		b := lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: inc,
			Replay: lanes.Replayable(inc, cache.LaunchKey("t", inc), cache.PlanScope())}}}
		tenant := string(rune('a' + g))
		if err := s.Own(tenant, buf); err != nil {
			t.Fatalf("Own: got err %v, want nil", err)
		}
		wg.Go(func() {
			for range 100 {
				if _, err := s.Submit(context.Background(), tenant, b); err != nil {
					t.Errorf("Submit(%s): got err %v, want nil", tenant, err)
					return
				}
			}
		})
	}
	wg.Wait()
	eventually(t, "no lane spinning", func() (string, bool) {
		n := spinning.Load()
		return strconv.FormatInt(n, 10) + " places held", n == 0
	})
}
