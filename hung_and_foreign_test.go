package lanes_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// TestAHungTenantHoldsUpNoOtherTenantsRead: after one tenant's kernel
// hangs and its lane is abandoned, another tenant's Read still returns
// (its pinned staging is freed in the background: a free waits for the
// whole device, and the hung kernel never ends).
func TestAHungTenantHoldsUpNoOtherTenantsRead(t *testing.T) {
	ctx := context.Background()
	dev, err := sim.New(sim.Config{Clock: sim.ClockRealTime})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	srv, err := lanes.Start(ctx, lanes.Config{Devices: []lanes.Device{dev}, Scheduler: actors.Config{LanesPerDevice: 2, HangTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = srv.Stop(stopCtx)
	}()
	bufs := map[string]lanes.Buffer{}
	for _, tenant := range []string{"hangs", "reads"} {
		b, err := srv.Alloc(ctx, tenant, lanes.BufferSpec{Size: 4096, Elem: lanes.F32})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Upload(ctx, tenant, b.Whole(), make([]byte, 4096)); err != nil {
			t.Fatal(err)
		}
		bufs[tenant] = b
	}
	fill, err := lanes.Launch(srv.Kernels(), "fill_f32", lanes.Linear(1024, 256), lanes.BufferArg(bufs["hangs"].Whole()), lanes.F32Arg(2), lanes.I32Arg(1024))
	if err != nil {
		t.Fatal(err)
	}
	if err := dev.InjectFault(sim.Fault{Kind: sim.FaultHang, Kernel: "fill_f32", Nth: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Submit(ctx, "hangs", lanes.Batch{Entries: []lanes.Entry{lanes.Input(fill)}}); !errors.Is(err, actors.ErrHung) {
		t.Fatalf("the hanging step: got err %v, want actors.ErrHung", err)
	}
	done := make(chan error, 1)
	go func() {
		readCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for range 3 { // each Read frees its staging
			if _, err := srv.Read(readCtx, "reads", bufs["reads"].Whole()); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("another tenant's Read after the hang: got err %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("another tenant's Read after the hang: still blocked after 30 s")
	}
}

// foreign is a cuda.Device of no backend of lanes'.
type foreign struct{ lanes.Device }

// TestStartRefusesAForeignDevice: the front door refuses a Device no
// backend of lanes' made, before anything starts, saying how to make one
// (even beside the device it wraps, which it is not a second copy of).
func TestStartRefusesAForeignDevice(t *testing.T) {
	ctx := context.Background()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for _, devs := range [][]lanes.Device{{foreign{dev}}, {dev, foreign{dev}}} {
		srv, err := lanes.Start(ctx, lanes.Config{Devices: devs})
		if err == nil {
			_ = srv.Stop(ctx)
			t.Fatalf("Start with %d devices, one foreign: got nil, want an error", len(devs))
		}
		if !errors.Is(err, actors.ErrInvalidArgument) || !strings.Contains(err.Error(), "sim.New or driver.Open") || lanes.Classify(err).Blame != cuda.BlameCaller {
			t.Fatalf("Start with a foreign device: got %v, want actors.ErrInvalidArgument naming sim.New or driver.Open", err)
		}
	}
}
