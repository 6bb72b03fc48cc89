package embedder_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/embedder"
	"github.com/lanesched/lanes/lanes"
)

// TestOutOfBoundsKernelErrorChain: a kernel that writes far outside its
// buffer (the unchecked poke kernel, which only a test's device registers)
// faults the device for real; the error Submit returns reaches the device's
// CUresult through every layer, is the device's blame, and the scheduler
// takes the device's lanes out. On a GPU it poisons the process's CUDA
// state, so it runs only with EMBEDDER_POISON=1, alone in its process.
func TestOutOfBoundsKernelErrorChain(t *testing.T) {
	if embedder.OnGPU && os.Getenv("EMBEDDER_POISON") == "" {
		t.Skip("poisons the process's CUDA state: run alone with EMBEDDER_POISON=1")
	}
	b := start(t, embedder.OpenFaultDevice, actors.Config{LanesPerDevice: 2, CacheCapacity: -1})
	tn := tenant(t, b, "reckless", 16)
	poke, err := b.Kernel("poke_i32")
	if err != nil {
		t.Fatalf("Kernel(poke_i32): got err %v, want nil", err)
	}
	var p cuda.Buffer
	if err := b.Do(func() error {
		p, err = b.Dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		return err
	}); err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	if err := b.S.Own(tn.Name, p); err != nil {
		t.Fatalf("Own(%s): got err %v, want nil", tn.Name, err)
	}
	// 2^31 elements (8 GiB) past a 64-byte buffer.
	c, err := cuda.Launch(poke, cuda.Linear(1, 1), cuda.BufferArg(p.Whole()), cuda.U32Arg(1<<31), cuda.I32Arg(7))
	if err != nil {
		t.Fatalf("cuda.Launch(poke_i32): got err %v, want nil", err)
	}
	_, err = b.S.Submit(context.Background(), tn.Name, lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Command: c}}})
	var le *lanes.Error
	var ce *cuda.Error
	switch {
	case !errors.As(err, &le):
		t.Fatalf("Submit's error: got %v, want a *lanes.Error", err)
	case !errors.Is(err, actors.ErrIndeterminate):
		t.Fatalf("Submit's error: got %v, want one wrapping actors.ErrIndeterminate", err)
	case !errors.Is(err, cuda.ErrIllegalAddress):
		t.Fatalf("Submit's error: got %v, want one errors.Is reaches cuda.ErrIllegalAddress through", err)
	case !errors.As(err, &ce):
		t.Fatalf("Submit's error: got %v, want one wrapping the device's *cuda.Error", err)
	case !errors.Is(err, cuda.ErrIllegalAddress) || ce.Code.String() != "cuda_illegal_address" || int(ce.Code) != 700:
		t.Fatalf("the device's code: got CUresult %d (%v), want CUresult 700 (cuda_illegal_address, errors.Is cuda.ErrIllegalAddress)", int(ce.Code), ce.Code)
	}
	if cl := cuda.Classify(err); cl.Blame != cuda.BlameDevice || !cl.Sticky || cl.NotSubmitted || cl.Retryable {
		t.Fatalf("Classify: got %+v, want the device's blame, sticky, submitted, not retryable", cl)
	}
	t.Logf("Submit -> *lanes.Error{Op: %q, Code: %v} -> actors.ErrIndeterminate -> *cuda.Error{Op: %q, Code: CUresult %d}: %v", le.Op, le.Code, ce.Op, int(ce.Code), err)
}
