package actors_test

import (
	"context"
	"fmt"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
)

// A tenant's decode step, submitted three times: the first submission
// captures it, the others replay the captured graph. It runs unchanged on
// both backends: openExampleDevice is the simulated device here and the
// GPU with the cuda build tag.
func Example() {
	if err := runExample(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// step 0: succeeded, entry 0 zero (not_compute), entries 1-2 replayed: true
	// step 1: succeeded, entry 0 zero (not_compute), entries 1-2 replayed: true
	// step 2: succeeded, entry 0 zero (not_compute), entries 1-2 replayed: true
}

func runExample() error {
	ctx := context.Background()
	dev, err := openExampleDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	unbind, err := dev.BindThread() // the real device serves a goroutine bound to its context
	if err != nil {
		return err
	}
	defer unbind()
	s, err := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2})
	if err != nil {
		return err
	}
	defer s.Stop(ctx)

	buf, err := dev.Alloc(cuda.BufferSpec{Size: 4 * 256, Elem: cuda.I32})
	if err != nil {
		return err
	}
	if err := s.Own("tenant-a", buf); err != nil {
		return err
	}
	zero, err := cuda.Zero(buf.Whole())
	if err != nil {
		return err
	}
	inc, err := cuda.LaunchNamed(dev.Kernels(), kernels.Inc, cuda.Linear(256, 128), cuda.BufferArg(buf.Whole()), cuda.I32Arg(256))
	if err != nil {
		return err
	}
	step := lanes.Batch{Entries: []lanes.Entry{
		lanes.Eager(cache.PhaseInitialization, zero),
		lanes.Replayed("example/v1", 0, inc),
		lanes.Replayed("example/v1", 1, inc),
	}}
	for i := range 3 {
		r, err := s.Submit(ctx, "tenant-a", step)
		if err != nil {
			return err
		}
		rows := r.Attribution.Rows
		fmt.Printf("step %d: %v, entry 0 %s (%v), entries 1-2 replayed: %v\n", i, r.Outcome, rows[0].Op, rows[0].Reason, rows[1].Replayed && rows[2].Replayed)
	}
	return nil
}
