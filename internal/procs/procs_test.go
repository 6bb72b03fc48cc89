package procs

import (
	"runtime"
	"strconv"
	"testing"
)

// TestSharedSplitsOnlyASmallMachine: half the CPUs (at least one) on a
// machine of SmallMachine CPUs or fewer, nothing on a larger one, and
// never over GOMAXPROCS set in the environment or in a launch's own.
func TestSharedSplitsOnlyASmallMachine(t *testing.T) {
	n, ok := Shared()
	if small := runtime.NumCPU() <= SmallMachine; ok != small {
		t.Fatalf("Shared on %d CPUs: got ok %v, want %v", runtime.NumCPU(), ok, small)
	}
	want := ""
	if ok {
		if n != max(1, runtime.NumCPU()/2) {
			t.Fatalf("Shared on %d CPUs: got %d, want half, at least 1", runtime.NumCPU(), n)
		}
		want = "GOMAXPROCS=" + strconv.Itoa(n)
	}
	if got := Env(nil); got != want {
		t.Fatalf("Env(nil): got %q, want %q", got, want)
	}
	if got := Env([]string{"X=1", "GOMAXPROCS=3"}); got != "" {
		t.Fatalf("Env with a launch's own GOMAXPROCS: got %q, want none", got)
	}
	t.Setenv("GOMAXPROCS", "2")
	if _, ok := Shared(); ok {
		t.Fatalf("Shared under GOMAXPROCS in the environment: got ok, want the environment's")
	}
}
