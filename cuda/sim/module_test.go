package sim_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/conformance"
)

// TestModulesAtOpenAndWhileLaunching: a module given at open is loaded
// there (a bad one fails New), and modules loaded while streams launch
// race with nothing (the race detector watches).
func TestModulesAtOpenAndWhileLaunching(t *testing.T) {
	r := newRig(t, sim.Config{Clock: sim.ClockZeroCost, Modules: []kernels.Module{conformance.UserModule()}})
	if _, ok := r.dev.Kernels().Kernel(conformance.UserScale); !ok {
		t.Fatalf("after sim.New with Modules: got no kernel %s, want it loaded", conformance.UserScale)
	}
	bad := conformance.UserModule()
	bad.Kernels[conformance.UserScale].Body = nil
	if _, err := sim.New(sim.Config{Modules: []kernels.Module{bad}}); !errors.Is(err, kernels.ErrInvalidModule) {
		t.Fatalf("sim.New with a module without a Go reference: got err %v, want kernels.ErrInvalidModule", err)
	}

	s := r.stream()
	buf, err := r.dev.Alloc(cuda.BufferSpec{Size: 4 * 64, Elem: cuda.F32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	spec, _ := r.dev.Kernels().Kernel(conformance.UserScale)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 20 {
			m := conformance.UserModule()
			k := m.Kernels[conformance.UserScale]
			k.Spec.Name = fmt.Sprintf("copy_%d", i)
			m.Kernels = kernels.Registry{k.Spec.Name: k}
			// The same kernel under another name, in its own image.
			m.Image = bytes.ReplaceAll(m.Image, []byte(conformance.UserScale), []byte(k.Spec.Name))
			if err := r.dev.LoadModule(m); err != nil {
				t.Errorf("LoadModule(copy_%d): got err %v, want nil", i, err)
			}
		}
	}()
	for range 200 {
		c, err := cuda.Launch(&spec, cuda.Linear(64, 64), cuda.BufferArg(buf.Whole()), cuda.F32Arg(1), cuda.I32Arg(64))
		if err != nil {
			t.Fatalf("build launch: got err %v, want nil", err)
		}
		if err := s.Enqueue(c); err != nil {
			t.Fatalf("Enqueue: got err %v, want nil", err)
		}
	}
	wg.Wait()
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize: got err %v, want nil", err)
	}
	if _, ok := r.dev.Kernels().Kernel("copy_19"); !ok {
		t.Fatalf("after 20 loads: got no kernel copy_19, want every load kept")
	}
}

// TestUserCodeFailsWithoutCrashing: a kernel reference that panics or
// returns an error fails its work as a faulting kernel does (a sticky
// launch failure carrying a *cuda.CallError), never the process; and a
// spec edited after loading changes nothing on the device.
func TestUserCodeFailsWithoutCrashing(t *testing.T) {
	for name, body := range map[string]func(kernels.Shape, []kernels.Memory, []cuda.Arg) error{
		"panics":  func(kernels.Shape, []kernels.Memory, []cuda.Arg) error { panic("body exploded") },
		"indexes": func(_ kernels.Shape, m []kernels.Memory, _ []cuda.Arg) error { m[0][len(m[0])+3] = 1; return nil },
		"errs":    func(kernels.Shape, []kernels.Memory, []cuda.Arg) error { return errors.New("mine") },
	} {
		m := conformance.UserModule()
		m.Kernels[conformance.UserScale].Body = body
		r := newRig(t, sim.Config{Clock: sim.ClockZeroCost, Modules: []kernels.Module{m}})
		m.Kernels[conformance.UserScale].Spec.Params[1].Elem = cuda.I32 // after loading: must not reach the device
		spec, _ := r.dev.Kernels().Kernel(conformance.UserScale)
		if spec.Params[1].Elem != cuda.F32 {
			t.Fatalf("%s: the device's spec after the caller edited its own: got param 1 %v, want f32", name, spec.Params[1].Elem)
		}
		s := r.stream()
		buf, err := r.dev.Alloc(cuda.BufferSpec{Size: 4 * 64, Elem: cuda.F32})
		if err != nil {
			t.Fatalf("%s: Alloc: got err %v, want nil", name, err)
		}
		c, err := cuda.Launch(&spec, cuda.Linear(64, 64), cuda.BufferArg(buf.Whole()), cuda.F32Arg(2), cuda.I32Arg(64))
		if err != nil {
			t.Fatalf("%s: Launch: got err %v, want nil", name, err)
		}
		r.enqueue(s, c)
		err = s.Synchronize()
		var ce *cuda.CallError
		if !errors.As(err, &ce) || cuda.Classify(err).Code != codes.LaunchFailed || !cuda.Classify(err).Sticky {
			t.Fatalf("%s: Synchronize: got err %v, want a sticky launch failure carrying a *cuda.CallError", name, err)
		}
	}
	if _, err := cuda.Call(nil); !errors.Is(err, cuda.ErrInvalidCommand) {
		t.Fatalf("cuda.Call(nil): got err %v, want cuda.ErrInvalidCommand", err)
	}
	nilCall := cuda.Command{Kind: cuda.KindCall}
	if n := backend.RegionCount(nilCall) + len(backend.Touches(nilCall, nil)) + int(backend.CommandBytes(nilCall)); n != 0 {
		t.Fatalf("a call command without its LibraryCall: got %d regions, touches and bytes, want none (and no panic)", n)
	}
}
