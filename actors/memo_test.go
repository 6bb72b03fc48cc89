package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/lanes"
)

// submitMemo submits b for tenant with memo and waits for its end.
func submitMemo(s *actors.Scheduler, tenant string, b lanes.Batch, memo *schedhook.OwnershipMemo) error {
	p, err := schedhook.SubmitNotifyMemo(s, context.Background(), tenant, b, memo, nil)
	if err != nil {
		return err
	}
	_, err = p.Result()
	return err
}

// TestAMemoHoldsOnlyWhileOwnershipStands: a batch's ownership verdict,
// kept between its submissions, is the tenant's alone and lapses with
// any change of ownership: a forgotten tenant's buffer is no longer its
// own, though the batch and the memo are the same.
func TestAMemoHoldsOnlyWhileOwnershipStands(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 2)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8, StrictOwnership: true})
	if err := s.Own("a", dev.bufs[0]); err != nil {
		t.Fatalf("Own(a, buffer 0): %v", err)
	}
	step := dev.batch(0, 1)
	var memo schedhook.OwnershipMemo
	for i := range 3 {
		if err := submitMemo(s, "a", step, &memo); err != nil {
			t.Fatalf("tenant a's step %d with the memo: got err %v, want nil", i, err)
		}
	}
	if err := submitMemo(s, "b", step, &memo); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("tenant b submitting tenant a's step with a's memo: got err %v, want actors.ErrNotYours", err)
	}
	if err := submitMemo(s, "a", step, &memo); err != nil {
		t.Fatalf("tenant a after b was refused: got err %v, want nil", err)
	}
	if err := s.Forget("a"); err != nil {
		t.Fatalf("Forget(a): %v", err)
	}
	if err := submitMemo(s, "a", step, &memo); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("the step of a forgotten tenant, whose buffer no one owns now (strict): got err %v, want actors.ErrNotYours", err)
	}
	if err := s.Own("b", dev.bufs[0]); err != nil {
		t.Fatalf("Own(b, buffer 0) once a let it go: %v", err)
	}
	if err := submitMemo(s, "b", step, &memo); err != nil {
		t.Fatalf("tenant b's step on its buffer now: got err %v, want nil", err)
	}
	if err := submitMemo(s, "a", step, &memo); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("tenant a naming b's buffer with b's memo: got err %v, want actors.ErrNotYours", err)
	}
	if err := submitMemo(s, "b", step, nil); err != nil {
		t.Fatalf("a nil memo (SubmitNotify): got err %v, want nil", err)
	}
	// Another batch with b's memo is checked anew: b names a's... buffer 1,
	// which no one owns (strict).
	if err := submitMemo(s, "b", dev.batch(1, 1), &memo); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("another batch with b's memo, naming a buffer no one owns: got err %v, want actors.ErrNotYours", err)
	}
	retained := step
	retained.Retain = []cuda.Buffer{dev.bufs[1]}
	if err := submitMemo(s, "b", retained, &memo); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("the batch with a buffer no one owns retained: got err %v, want actors.ErrNotYours", err)
	}
	// One memo shared by goroutines of two tenants (a lane host's shards
	// share a template's): each verdict stays its tenant's.
	var wg sync.WaitGroup
	errs := make(chan error, 80)
	for _, tenant := range []string{"a", "b", "a", "b"} {
		wg.Go(func() {
			for range 20 {
				err := submitMemo(s, tenant, step, &memo)
				if (tenant == "b") != (err == nil) || err != nil && !errors.Is(err, actors.ErrNotYours) {
					errs <- fmt.Errorf("tenant %s: got err %v", tenant, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSharedStagingIsReadOnly: tenants stage in from shared host staging
// but may not stage out into it, nor make it a staged program's input slot
// (found from outside: any tenant could write what every tenant reads),
// as they may not write a shared buffer.
func TestSharedStagingIsReadOnly(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8})
	h, err := dev.AllocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ShareHost(h); err != nil {
		t.Fatal(err)
	}
	if err := s.Own("a", dev.bufs[0]); err != nil {
		t.Fatal(err)
	}
	in, err := cuda.StageIn(dev.bufs[0].Whole(), h.Whole())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, in)}}); err != nil {
		t.Fatalf("a stage-in from shared staging: got err %v, want nil", err)
	}
	// A staged program whose input slot stages through it: a replay would
	// write the caller's inputs there.
	a, _ := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	o, _ := dev.AllocHost(64)
	inc, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(a.Whole()), cuda.I32Arg(16))
	spec := lanes.StagedSpec{Inputs: []lanes.Slot{{Staging: h.Whole(), Device: a.Whole()}}, InputMap: []int{0}, Outputs: []lanes.Slot{{Staging: o.Whole(), Device: a.Whole()}}, OutputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: inc, Replay: lanes.Replayable(inc, cache.LaunchKey("a", inc), cache.PlanScope())}}}
	if _, err := s.PrepareStaged(context.Background(), "a", 0, spec); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("a staged program with an input slot in shared staging: got err %v, want actors.ErrNotYours", err)
	}
	out, err := cuda.StageOut(h.Whole(), dev.bufs[0].Whole())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, out)}}); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("a stage-out into shared staging: got err %v, want actors.ErrNotYours", err)
	}
}
