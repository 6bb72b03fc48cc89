//go:build cuda

package driver_test

import (
	"context"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
)

// TestOutOfBoundsKernelQuarantinesWithoutCrash writes outside an
// allocation on GPU 0 through the scheduler: the faulting lanes are
// quarantined and the process carries on. The H200 (driver 580) showed that
// the sticky error also fails kernel launches on GPU 1 from this process, so
// the scheduler quarantines every GPU's lanes: the test checks that GPU 1
// refuses work as the GPU does, and that nothing crashes. It poisons the
// process's CUDA state: run it alone.
func TestOutOfBoundsKernelQuarantinesWithoutCrash(t *testing.T) {
	var devs []cuda.Device
	for i := range 2 {
		d, err := driver.Open(driver.Config{Ordinal: i, Kernels: kernels.Builtin().With(kernels.FaultInjection())})
		if err != nil {
			if i == 0 {
				t.Fatalf("driver.Open(GPU 0): got err %v, want nil (a sticky fault earlier in this process poisons the primary context: run this test alone, -test.run '^TestOutOfBoundsKernelQuarantinesWithoutCrash$')", err)
			}
			t.Logf("one GPU only: %v", err)
			break
		}
		devs = append(devs, d)
	}
	s, err := actors.Start(context.Background(), actors.Config{Devices: devs, LanesPerDevice: 2, CacheCapacity: -1})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	defer s.Stop(context.Background())
	batchOn := func(d cuda.Device, name string, args ...cuda.Arg) lanes.Batch {
		unbind, _ := d.BindThread()
		defer unbind()
		c, err := cuda.Launch(d.Kernels().(kernels.Registry).MustSpec(name), cuda.Linear(16, 16), args...)
		if err != nil {
			t.Fatalf("cuda.Launch(%s): got err %v, want nil", name, err)
		}
		return lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Command: c}}}
	}
	alloc := func(d cuda.Device) cuda.Buffer {
		unbind, _ := d.BindThread()
		defer unbind()
		b, err := d.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("Alloc(64 bytes): got err %v, want nil", err)
		}
		return b
	}
	b0 := alloc(devs[0])
	var b1 cuda.Buffer
	if len(devs) == 2 {
		b1 = alloc(devs[1]) // before the fault
	}
	_, err = s.Submit(context.Background(), "victim", batchOn(devs[0], kernels.Poke, cuda.BufferArg(b0.Whole()), cuda.U32Arg(1<<31), cuda.I32Arg(7)))
	t.Logf("out-of-bounds write on GPU 0: %v", err)
	if err == nil {
		t.Fatal("Submit of an out-of-bounds write on GPU 0: got err nil, want an error")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := s.Lanes()
		if st[0].Health == actors.HealthQuarantined && st[1].Health == actors.HealthQuarantined {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10 s: got GPU 0's lanes %v and %v, want both %v (%+v)", st[0].Health, st[1].Health, actors.HealthQuarantined, st)
		}
		time.Sleep(time.Millisecond)
	}
	for _, l := range s.Lanes() {
		t.Logf("lane %d on device %d: %v %v", l.ID, l.Device, l.Health, l.Cause)
	}
	if len(devs) == 2 {
		_, err := s.Submit(context.Background(), "other", batchOn(devs[1], kernels.Inc, cuda.BufferArg(b1.Whole()), cuda.I32Arg(16)))
		t.Logf("a launch on GPU 1 after GPU 0's fault: %v", err)
		if st := s.Lanes(); st[2].Health != actors.HealthQuarantined || st[3].Health != actors.HealthQuarantined {
			t.Fatalf("after a process-wide sticky error: got GPU 1's lanes %v and %v, want both %v (%+v)", st[2].Health, st[3].Health, actors.HealthQuarantined, st[2:])
		}
	}
}
