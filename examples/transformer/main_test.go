package main

import (
	"errors"
	"testing"

	"github.com/lanesched/lanes/cuda"
)

// TestRunsOnTheSimulator: the example runs as CI runs it, on the simulated
// device with its Go references, with tiny sizes: every tenant's result
// within tolerance of the float64 reference, eager and replayed alike,
// every replayed step one graph launch.
func TestRunsOnTheSimulator(t *testing.T) {
	if err := run([]string{"--channels", "32", "--heads", "2", "--ctx", "8", "--batch", "2", "--tenants", "2", "--lanes", "2", "--steps", "6", "--inflight", "2"}); err != nil {
		t.Fatalf("run: got err %v, want nil", err)
	}
	// Four tenants on one lane, all from their first steps: each still
	// captures (the lane drains once for it) and its last step replays.
	if err := run([]string{"--channels", "32", "--heads", "2", "--ctx", "8", "--batch", "2", "--tenants", "4", "--lanes", "1", "--steps", "8", "--inflight", "2"}); err != nil {
		t.Fatalf("run with four tenants on one lane: got err %v, want nil", err)
	}
}

// TestRefusesBadFlags: sizes the kernels cannot serve are refused before
// any device is opened.
func TestRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--heads", "3"},               // 128 channels do not split into 3 heads
		{"--ctx", "8", "--steps", "9"}, // more steps than KV-cache positions
		{"--ctx", "100000"},            // scores beyond shared memory
		{"--tenants", "0"},
		{"--lanes", "1000"},
		{"--no-such-flag"},
	} {
		if err := run(args); err == nil {
			t.Errorf("run(%q): got nil, want an error", args)
		}
	}
}

// TestShapeRulesRefuseBadAttentionLaunches: attention_f32 takes its
// sequence and head from blockIdx.x without more than a guard, reduces
// over a power-of-two block, and keeps ctx scores in dynamic shared
// memory: a launch with another grid, such a block or too little shared
// memory is refused when it is built, before any device sees it.
func TestShapeRulesRefuseBadAttentionLaunches(t *testing.T) {
	spec := module().Kernels[attention].Spec
	const batch, ctx, heads, hd = 2, 8, 2, 16
	const channels = heads * hd
	buf := func(id, n uint64, e cuda.ElementType) cuda.Arg {
		return cuda.BufferArg(cuda.Region{Buffer: cuda.Buffer{Device: 1, ID: id, Size: 4 * n, Align: 256, Elem: e, Addr: 0x1000 * id}, Length: 4 * n})
	}
	args := []cuda.Arg{buf(1, batch*channels, cuda.F32), buf(2, 3*batch*channels, cuda.F32), buf(3, batch*ctx*channels, cuda.F32), buf(4, batch*ctx*channels, cuda.F32), buf(5, 1, cuda.I32),
		cuda.I32Arg(batch), cuda.I32Arg(ctx), cuda.I32Arg(heads), cuda.I32Arg(hd), cuda.U64Arg(ctx * channels), cuda.F32Arg(0.25)}
	good := cuda.LaunchConfig{Grid: cuda.Dim3{X: batch * heads, Y: 1, Z: 1}, Block: cuda.Dim3{X: 32, Y: 1, Z: 1}, SharedBytes: 4 * ctx}
	if _, err := cuda.Launch(&spec, good, args...); err != nil {
		t.Fatalf("one block of 32 per sequence and head, %d bytes of shared memory: got err %v, want nil", good.SharedBytes, err)
	}
	for name, edit := range map[string]func(*cuda.LaunchConfig){
		"too little shared memory": func(c *cuda.LaunchConfig) { c.SharedBytes = 4*ctx - 4 },
		"no shared memory":         func(c *cuda.LaunchConfig) { c.SharedBytes = 0 },
		"a block per sequence":     func(c *cuda.LaunchConfig) { c.Grid.X = batch },
		"a block too many":         func(c *cuda.LaunchConfig) { c.Grid.X = batch*heads + 1 },
		"a two-dimensional grid":   func(c *cuda.LaunchConfig) { c.Grid.Y = 2 },
		"a block of 48":            func(c *cuda.LaunchConfig) { c.Block.X = 48 },
		"a block of 512":           func(c *cuda.LaunchConfig) { c.Block.X = 512 },
	} {
		cfg := good
		edit(&cfg)
		if _, err := cuda.Launch(&spec, cfg, args...); !errors.Is(err, cuda.ErrLaunchConfig) {
			t.Errorf("%s (grid %v, block %v, %d shared bytes): got err %v, want cuda.ErrLaunchConfig", name, cfg.Grid, cfg.Block, cfg.SharedBytes, err)
		}
	}
	// A stride between sequences shorter than one sequence's cache would
	// overlap them: the extent check refuses it.
	short := append([]cuda.Arg(nil), args...)
	short[9] = cuda.U64Arg(ctx*channels - 1)
	if _, err := cuda.Launch(&spec, good, short...); !errors.Is(err, cuda.ErrOutOfBounds) {
		t.Errorf("seq_stride %d: got err %v, want cuda.ErrOutOfBounds", ctx*channels-1, err)
	}
}

// TestSweepRefusesMoreInFlightThanSteps: a sweep whose steps in flight
// reach its steps per tenant would time no step (rows of zeros and NaN):
// it is refused, and a small sweep runs and checks its replays.
func TestSweepRefusesMoreInFlightThanSteps(t *testing.T) {
	if err := run([]string{"--sweep", "--channels", "32", "--heads", "2", "--sweep-inflight", "1,32"}); err == nil {
		t.Fatalf("--sweep-inflight 32 with --steps 32: got nil, want a refusal")
	}
	if err := run([]string{"--sweep", "--channels", "32", "--heads", "2", "--ctx", "8", "--steps", "8", "--sweep-tenants", "1,2", "--sweep-inflight", "1,2"}); err != nil {
		t.Fatalf("a small sweep: got err %v, want nil", err)
	}
}
