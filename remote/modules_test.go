package remote_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/conformance"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

func init() {
	children["modules-host"] = modulesHostChild
	children["modules-front"] = modulesFrontChild
}

// modulesHostChild serves a lane host of one's own on a simulated device
// that loads the conformance suite's user module with its Go reference.
func modulesHostChild() int {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		return 1
	}
	h, err := remote.Serve(context.Background(), remote.HostConfig{Name: "modules", Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Modules: []kernels.Module{conformance.UserModule()}})
	if err != nil {
		fmt.Println("Serve:", err)
		return 1
	}
	fmt.Println(h.Listening())
	select {}
}

// modulesFrontChild starts a front of the host at $LANES_HOST with the
// user module, declared wrongly when $LANES_MODULE is "wrong", and says
// how its start went.
func modulesFrontChild() int {
	m := conformance.UserModule()
	if os.Getenv("LANES_MODULE") == "wrong" {
		m = conformance.UserModule(cuda.Param{Name: "x", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessReadWrite})
	}
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}, Modules: []kernels.Module{m}, Logf: func(string, ...any) {}})
	if err == nil {
		_ = f.Stop(context.Background())
	}
	fmt.Printf("start: %v (refused %v)\n", err, errors.Is(err, remote.ErrRefused))
	return 0
}

// startModulesFront runs modulesFrontChild against addr and returns what
// it said.
func startModulesFront(t *testing.T, addr, module string) string {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=modules-front", "LANES_HOST="+addr, "LANES_MODULE="+module)
	out, err := child.CombinedOutput()
	if err != nil {
		t.Fatalf("the front's process: %v (%s)", err, out)
	}
	return string(out)
}

// TestModulesMatchOneProcess: a front's module (FrontConfig.Modules) is
// served by a lane host of one's own that loaded it (HostConfig.Modules,
// with its Go reference on the sim): a step of its kernel gives the bytes
// and receipt rows it gives in one process. A stock simulated host, which
// has no Go reference for it, refuses the front saying so, and so does a
// host whose module of that name differs; a module that is no module is
// refused by StartFront before anything starts.
func TestModulesMatchOneProcess(t *testing.T) {
	ctx := context.Background()
	module := conformance.UserModule()
	spec := module.Kernels.MustSpec(conformance.UserScale)
	step := func(t *testing.T, x cuda.Buffer) lanes.Batch {
		up, _ := cuda.Upload(x.Whole(), f32Bytes(1, 2, 3, 4))
		scale, err := cuda.Launch(spec, cuda.Linear(4, 4), cuda.BufferArg(x.Whole()), cuda.F32Arg(3), cuda.I32Arg(4))
		if err != nil {
			t.Fatal(err)
		}
		return lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up), lanes.Replayed("user", 0, scale), lanes.Replayed("user", 1, scale)}}
	}
	type side struct {
		rows [][]lanes.Row
		x    []byte
	}
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost, Modules: []kernels.Module{module}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	var local side
	x, _ := dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.F32})
	for i := range 3 {
		r, err := s.Submit(ctx, "a", step(t, x))
		if err != nil {
			t.Fatalf("step %d in one process: got err %v, want nil", i, err)
		}
		local.rows = append(local.rows, r.Attribution.Rows)
	}
	local.x = readLocal(t, backend.Must(dev), x.Whole())

	addr := startChildHost(t, "modules-host")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Modules: []kernels.Module{module}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront with the module its host loaded: got err %v, want nil", err)
	}
	defer f.Stop(ctx)
	var through side
	hx, err := f.Alloc(ctx, "a", cuda.BufferSpec{Size: 16, Elem: cuda.F32})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, err := f.Submit(ctx, "a", step(t, hx))
		if err != nil {
			t.Fatalf("step %d through the lane host: got err %v, want nil", i, err)
		}
		through.rows = append(through.rows, r.Attribution.Rows)
	}
	if through.x, err = f.Read(ctx, "a", hx.Whole()); err != nil {
		t.Fatal(err)
	}
	if want := f32Bytes(9, 18, 27, 36); !reflect.DeepEqual(local.x, want) {
		t.Fatalf("in one process: x = %v, want %v", local.x, want)
	}
	if !reflect.DeepEqual(through, local) {
		t.Errorf("through the lane host:\n%+v\nin one process:\n%+v\nwant the same", through, local)
	}

	said := startModulesFront(t, addr, "wrong")
	t.Log(said)
	if !strings.Contains(said, "differs") || !strings.Contains(said, "refused true") {
		t.Errorf("a front whose module of that name differs: got %q, want the start refused, saying it differs", said)
	}
	_, stock := startHostProcess(t, "--sim-clock", "zero")
	said = startModulesFront(t, stock, "same")
	t.Log(said)
	if !strings.Contains(said, "Go reference") || !strings.Contains(said, "refused true") {
		t.Errorf("a stock simulated host: got %q, want the start refused, saying the kernel has no Go reference there", said)
	}
	noImage := module
	noImage.Image = nil
	if _, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Modules: []kernels.Module{noImage}}); !errors.Is(err, remote.ErrConfig) || !errors.Is(err, kernels.ErrInvalidModule) {
		t.Errorf("a module with no image: got err %v, want remote.ErrConfig and kernels.ErrInvalidModule", err)
	}
}
