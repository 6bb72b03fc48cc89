//go:build cuda

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/conformance"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

func init() { children["modules-front"] = modulesFront }

// modulesFront is a front of the GPU host at $CALLHOST_ADDR with the
// conformance suite's user module (declared wrongly when
// $CALLHOST_MODULE is "wrong"): it scales x by 3 through the host and
// says what it read back, or how its start went.
func modulesFront() int {
	ctx := context.Background()
	m := conformance.UserModule()
	if os.Getenv("CALLHOST_MODULE") == "wrong" {
		m = conformance.UserModule(cuda.Param{Name: "x", Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: cuda.AccessReadWrite})
	}
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{os.Getenv("CALLHOST_ADDR")}, Modules: []kernels.Module{m}, Logf: func(string, ...any) {}})
	if err != nil {
		fmt.Printf("start: %v\n", err)
		return 0
	}
	defer f.Stop(ctx)
	x, err := f.Alloc(ctx, "t", cuda.BufferSpec{Size: 16, Elem: cuda.F32})
	if err != nil {
		fmt.Println("alloc:", err)
		return 1
	}
	up, _ := cuda.Upload(x.Whole(), f32s(1, 2, 3, 4))
	scale, err := cuda.Launch(m.Kernels.MustSpec(conformance.UserScale), cuda.Linear(4, 4), cuda.BufferArg(x.Whole()), cuda.F32Arg(3), cuda.I32Arg(4))
	if err != nil {
		fmt.Println("launch:", err)
		return 1
	}
	for i := range 3 {
		r, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up), lanes.Replayed("user", 0, scale)}})
		if err != nil {
			fmt.Printf("step %d: %v\n", i, err)
			return 1
		}
		if i == 2 && !r.Attribution.Rows[1].Replayed {
			fmt.Printf("step %d: the launch's row %+v was not replayed\n", i, r.Attribution.Rows[1])
		}
	}
	got, err := f.Read(ctx, "t", x.Whole())
	fmt.Printf("read %v %v match %v\n", got, err, reflect.DeepEqual(got, f32s(3, 6, 9, 12)))
	return 0
}

// TestAFrontsModuleLoadsOnTheGPUHost: a front's own module
// (FrontConfig.Modules) is loaded by the GPU host before it serves the
// front, checked there by the driver: its kernel runs, replayed, through
// the host; a declaration the driver contradicts refuses the front.
func TestAFrontsModuleLoadsOnTheGPUHost(t *testing.T) {
	addr := startHost(t)
	run := func(module string) string {
		c := exec.Command(os.Args[0])
		c.Env = append(os.Environ(), "CALLHOST_CHILD=modules-front", "CALLHOST_ADDR="+addr, "CALLHOST_MODULE="+module)
		b, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("the front's process: %v (%s)", err, b)
		}
		t.Logf("%s front: %s", module, b)
		return string(b)
	}
	// The wrong declaration first: the driver, not an earlier load of the
	// same name, is what refuses it.
	if got := run("wrong"); !strings.Contains(got, "start:") || !strings.Contains(got, "refused") {
		t.Errorf("a front whose declaration the driver contradicts: got %q, want its start refused", got)
	}
	if got := run("right"); !strings.Contains(got, "match true") {
		t.Errorf("a front with the user module: got %q, want x scaled by 3 through the GPU host", got)
	}
	c := exec.Command(os.Args[0])
	c.Env = append(os.Environ(), "CALLHOST_CHILD=parity-front", "CALLHOST_ADDR="+addr)
	b, err := c.CombinedOutput()
	t.Logf("programs and staged replays through the GPU host: %s", b)
	if err != nil || !strings.Contains(string(b), "program ok") || !strings.Contains(string(b), "staged ok") || !strings.Contains(string(b), "large staged ok") {
		t.Errorf("programs and staged replays through the GPU host: got %q (%v), want both ok", b, err)
	}
}
