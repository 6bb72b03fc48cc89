package actors_test

import (
	"context"
	"fmt"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// A tenant's decode step, submitted three times: the first submission
// captures it, the others replay the captured graph.
func Example() {
	ctx := context.Background()
	dev, _ := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	defer dev.Close()
	s, _ := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2})
	defer s.Stop(ctx)

	buf, _ := dev.Alloc(cuda.BufferSpec{Size: 4 * 256, Elem: cuda.I32})
	zero, _ := cuda.Zero(buf.Whole())
	inc, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(256, 128), cuda.BufferArg(buf.Whole()), cuda.I32Arg(256))
	replay := lanes.Replayable(inc, cache.LaunchKey("example", inc), cache.PlanScope())
	step := lanes.Batch{Entries: []lanes.Entry{
		{Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: zero},
		{Phase: cache.PhaseCompute, Node: 0, Command: inc, Replay: replay},
		{Phase: cache.PhaseCompute, Node: 1, Command: inc, Replay: replay},
	}}
	for i := range 3 {
		r, err := s.Submit(ctx, "tenant-a", step)
		if err != nil {
			fmt.Println(err)
			return
		}
		rows := r.Attribution.Rows
		fmt.Printf("step %d: %v, entry 0 %s (%v), entries 1-2 replayed: %v\n", i, r.Outcome, rows[0].Op, rows[0].Reason, rows[1].Replayed && rows[2].Replayed)
	}
	// Output:
	// step 0: succeeded, entry 0 zero (not_compute), entries 1-2 replayed: true
	// step 1: succeeded, entry 0 zero (not_compute), entries 1-2 replayed: true
	// step 2: succeeded, entry 0 zero (not_compute), entries 1-2 replayed: true
}
