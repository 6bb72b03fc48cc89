package sim_test

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// TestALargeAllocLetsTheProcessRun: filling a large new buffer (a gigabyte) on a thread of its own never stops the rest of the process
// for long, collections included: a lane host allocating gigabytes keeps
// sending its heartbeats. (Filling by copies alone, the loop never reached
// a point where the runtime could stop it: a collection's stop of the
// world waited the whole fill, and the host's front lost it.)
func TestALargeAllocLetsTheProcessRun(t *testing.T) {
	if os.Getenv("LANES_TIMING") == "" {
		t.Skip("a wall-clock timing test: scripts/test.sh runs it alone, with LANES_TIMING=1, on a quiet machine")
	}
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	done := make(chan struct{})
	gaps := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for last := time.Now(); ; {
			select {
			case <-done:
				gaps <- worst
				return
			case <-time.After(time.Millisecond):
			}
			runtime.GC() // a collection now and then: each stops the world
			worst = max(worst, time.Since(last))
			last = time.Now()
		}
	}()
	filled := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // as a lane host's operations run
		defer runtime.UnlockOSThread()
		_, err := dev.Alloc(cuda.BufferSpec{Size: 1 << 30, Elem: cuda.U8})
		filled <- err
	}()
	if err := <-filled; err != nil {
		t.Fatal(err)
	}
	close(done)
	worst := <-gaps
	t.Logf("the longest the process stood still: %v", worst)
	if worst > 250*time.Millisecond {
		t.Fatalf("the longest the process stood still while a 1 GiB buffer was filled: %v, want at most 250 ms", worst)
	}
}
