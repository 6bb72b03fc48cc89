//go:build cuda

package driver_test

import (
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// BenchmarkWarmRebuild is a lane rebuilt in place of one that replayed 8
// segments of 64 launches: the time to its first replay, cold (the first
// step captures, instantiates and uploads, then launches) and warm (Warm
// captures the predecessor's recipes before traffic, then the first step
// launches): cold-first-us, warm-us (Warm itself) and warm-first-us.
func BenchmarkWarmRebuild(b *testing.B) {
	const segments, k = 8, 64
	dev := bindOpen(b)
	spec := dev.Kernels().(kernels.Registry).MustSpec(kernels.Inc)
	var batches []lanes.Batch
	for range segments {
		buf, err := dev.Alloc(cuda.BufferSpec{Size: 4096, Elem: cuda.I32})
		if err != nil {
			b.Fatalf("Alloc: got err %v, want nil", err)
		}
		var es []lanes.Entry
		for n := range k {
			cmd, err := cuda.Launch(spec, cuda.Linear(1024, 256), cuda.BufferArg(buf.Whole()), cuda.I32Arg(1024))
			if err != nil {
				b.Fatalf("cuda.Launch: got err %v, want nil", err)
			}
			es = append(es, lanes.Replayed("bench", n, cmd))
		}
		batches = append(batches, lanes.Batch{Entries: es})
	}
	epoch := time.Now()
	now := func() time.Duration { return time.Since(epoch) }
	newLane := func() *lanecore.Lane {
		st, err := backend.Must(dev).NewStream()
		if err != nil {
			b.Fatalf("NewStream: got err %v, want nil", err)
		}
		l, err := lanecore.New(lanecore.Config{Device: backend.Must(dev), Stream: st, Now: now})
		if err != nil {
			b.Fatalf("lanecore.New: got err %v, want nil", err)
		}
		if _, err := l.Configure(16); err != nil {
			b.Fatalf("Configure: got err %v, want nil", err)
		}
		return l
	}
	step := func(l *lanecore.Lane, batch lanes.Batch) {
		if _, err := l.Submit(batch); err != nil {
			b.Fatalf("Submit: got err %v, want nil", err)
		}
		if _, _, err := l.Synchronize(); err != nil {
			b.Fatalf("Synchronize: got err %v, want nil", err)
		}
	}
	old := newLane()
	for range 3 {
		for _, batch := range batches {
			step(old, batch)
		}
	}
	recipes := old.Recipes()
	if len(recipes) != segments {
		b.Fatalf("Recipes: got %d, want %d", len(recipes), segments)
	}
	var cold, warm, warmFirst time.Duration
	b.ResetTimer()
	for range b.N {
		l := newLane()
		t0 := time.Now()
		step(l, batches[0])
		cold += time.Since(t0)
		if c := l.Counters(); c.ReplayedSegments != 1 || c.Captured != 1 {
			b.Fatalf("cold lane: got %+v, want one capture and one replay", c)
		}
		w := newLane()
		t0 = time.Now()
		rep, err := w.Warm(recipes, time.Second)
		warm += time.Since(t0)
		if err != nil || rep.Captured != segments {
			b.Fatalf("Warm: got %v, %v; want all %d captured", rep, err, segments)
		}
		t0 = time.Now()
		step(w, batches[0])
		warmFirst += time.Since(t0)
		if c := w.Counters(); c.ReplayedSegments != 1 || c.Captured != 0 {
			b.Fatalf("warm lane: got %+v, want a replay and no capture", c)
		}
	}
	b.StopTimer()
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(us(cold), "cold-first-us")
	b.ReportMetric(us(warm), "warm-us")
	b.ReportMetric(us(warmFirst), "warm-first-us")
}
