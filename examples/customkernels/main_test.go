package main

import (
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
)

// TestRunsOnTheSimulator: the example runs as CI runs it, on the simulated
// device with its Go references, eagerly and replayed, within tolerance.
func TestRunsOnTheSimulator(t *testing.T) {
	if err := run([]string{"--rows", "4", "--k", "64", "--n", "32", "--steps", "20"}); err != nil {
		t.Fatalf("run: got err %v, want nil", err)
	}
	for _, bad := range [][]string{{"--rows", "0"}, {"--lanes", "0"}, {"--tenants", "0"}, {"extra"}} {
		if err := run(bad); err == nil {
			t.Fatalf("run(%v): got nil, want an error", bad)
		}
	}
}

// TestShapeRulesRefuseBadLaunches: rmsnorm takes its row from blockIdx.x
// without a guard and reduces over a power-of-two block: a grid with more
// blocks than rows, or a block its reduction cannot use, is refused when
// the launch is built, before any device sees it.
func TestShapeRulesRefuseBadLaunches(t *testing.T) {
	spec := module().Kernels[rmsnorm].Spec
	const rows, cols = 4, 64
	buf := func(n uint64) cuda.Arg {
		return cuda.BufferArg(cuda.Region{Buffer: cuda.Buffer{Device: 1, ID: 1, Size: 4 * n, Align: 256, Elem: cuda.F32, Addr: 0x1000}, Length: 4 * n})
	}
	args := []cuda.Arg{buf(rows * cols), buf(rows * cols), buf(cols), cuda.I32Arg(rows), cuda.I32Arg(cols), cuda.F32Arg(1e-5)}
	launch := func(grid, block cuda.Dim3) error {
		_, err := cuda.Launch(&spec, cuda.LaunchConfig{Grid: grid, Block: block}, args...)
		return err
	}
	if err := launch(cuda.Dim3{X: rows, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}); err != nil {
		t.Fatalf("one block of 256 per row: got err %v, want nil", err)
	}
	for _, c := range []struct{ grid, block cuda.Dim3 }{
		{cuda.Dim3{X: rows + 1, Y: 1, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}}, // a block past the last row
		{cuda.Dim3{X: rows, Y: 2, Z: 1}, cuda.Dim3{X: 256, Y: 1, Z: 1}},
		{cuda.Dim3{X: rows, Y: 1, Z: 1}, cuda.Dim3{X: 200, Y: 1, Z: 1}}, // not a power of two
		{cuda.Dim3{X: rows, Y: 1, Z: 1}, cuda.Dim3{X: 512, Y: 1, Z: 1}},
	} {
		if err := launch(c.grid, c.block); !errors.Is(err, cuda.ErrLaunchConfig) {
			t.Errorf("grid %v, block %v: got err %v, want cuda.ErrLaunchConfig", c.grid, c.block, err)
		}
	}
}
