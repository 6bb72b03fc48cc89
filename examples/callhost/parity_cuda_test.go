//go:build cuda

package main

import (
	"context"
	"fmt"
	"os"
	"reflect"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
)

func init() { children["parity-front"] = parityFront }

// parityFront is a front of the GPU host at $CALLHOST_ADDR that prepares
// and replays a staged program (the host's pinned staging), and declares,
// seals and invokes a program: it prints "staged ok" and "program ok", or
// what went wrong.
func parityFront() int {
	ctx := context.Background()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{os.Getenv("CALLHOST_ADDR")}, Logf: func(string, ...any) {}})
	if err != nil {
		fmt.Println("start:", err)
		return 1
	}
	defer f.Stop(ctx)
	fail := func(what string, err error) int { fmt.Printf("%s: %v\n", what, err); return 1 }
	spec := cuda.BufferSpec{Size: 16, Elem: cuda.F32}
	in, err := f.Alloc(ctx, "t", spec)
	if err != nil {
		return fail("alloc", err)
	}
	out, _ := f.Alloc(ctx, "t", spec)
	add, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(out.Whole()), cuda.BufferArg(in.Whole()), cuda.BufferArg(in.Whole()), cuda.I32Arg(4))
	if err != nil {
		return fail("launch", err)
	}
	double := lanes.Entry{Phase: cache.PhaseCompute, Node: 0, Command: add, Replay: lanes.Replayable(add, cache.LaunchKey("parity", add), cache.PlanScope())}

	// A staged program, first: its lane's preparation must be open (the
	// program below seals its tenant's lane).
	in2, _ := f.Alloc(ctx, "s", spec)
	out2, _ := f.Alloc(ctx, "s", spec)
	add2, _ := cuda.Launch(kernels.Builtin().MustSpec(kernels.Add), cuda.Linear(4, 4), cuda.BufferArg(out2.Whole()), cuda.BufferArg(in2.Whole()), cuda.BufferArg(in2.Whole()), cuda.I32Arg(4))
	prog, err := f.PrepareStaged(ctx, "s", remote.StagedSpec{Inputs: []cuda.Region{in2.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{out2.Whole()}, OutputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add2, Replay: lanes.Replayable(add2, cache.LaunchKey("parity", add2), cache.PlanScope())}}})
	if err != nil {
		return fail("prepare staged", err)
	}
	var flags []bool
	for i, input := range [][]byte{f32s(1, 2, 3, 4), f32s(1, 2, 3, 4), f32s(5, 6, 7, 8)} {
		res, err := f.Replay(ctx, "s", prog, [][]byte{input}, true)
		if err != nil {
			return fail(fmt.Sprintf("replay %d", i), err)
		}
		want := f32s(2, 4, 6, 8)
		if i == 2 {
			want = f32s(10, 12, 14, 16)
		}
		if len(res.Outputs) != 1 || !reflect.DeepEqual(res.Outputs[0], want) {
			return fail(fmt.Sprintf("replay %d: outputs %v, want %v", i, res.Outputs, want), nil)
		}
		flags = append(flags, res.OutputCache)
	}
	if !reflect.DeepEqual(flags, []bool{false, true, false}) {
		return fail(fmt.Sprintf("output-cache hits %v, want the second replay's alone", flags), nil)
	}
	if err := f.ReleaseStaged(ctx, "s", prog); err != nil {
		return fail("release", err)
	}
	fmt.Println("staged ok")

	// 64 KiB inputs: through the data plane's upload area, which the GPU
	// host pins and copies from in place.
	const n = 16 << 10
	big := cuda.BufferSpec{Size: 4 * n, Elem: cuda.F32}
	in3, _ := f.Alloc(ctx, "u", big)
	out3, _ := f.Alloc(ctx, "u", big)
	add3, _ := cuda.Launch(kernels.Builtin().MustSpec(kernels.Add), cuda.Linear(n, 256), cuda.BufferArg(out3.Whole()), cuda.BufferArg(in3.Whole()), cuda.BufferArg(in3.Whole()), cuda.I32Arg(n))
	prog3, err := f.PrepareStaged(ctx, "u", remote.StagedSpec{Inputs: []cuda.Region{in3.Whole()}, InputMap: []int{0}, Outputs: []cuda.Region{out3.Whole()}, OutputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: add3, Replay: lanes.Replayable(add3, cache.LaunchKey("parity", add3), cache.PlanScope())}}})
	if err != nil {
		return fail("prepare the large staged program", err)
	}
	before := f.Hosts()[0].AreaUploads
	for round := range 3 {
		vs, doubled := make([]float32, n), make([]float32, n)
		for i := range vs {
			vs[i] = float32(i%97 + round)
			doubled[i] = 2 * vs[i]
		}
		res, err := f.Replay(ctx, "u", prog3, [][]byte{f32s(vs...)}, true)
		if err != nil || len(res.Outputs) != 1 || !reflect.DeepEqual(res.Outputs[0], f32s(doubled...)) {
			return fail(fmt.Sprintf("large replay %d: the outputs are not the inputs doubled", round), err)
		}
	}
	if up := f.Hosts()[0].AreaUploads - before; up != 3 {
		return fail(fmt.Sprintf("large replays: %d through the upload area, want 3", up), nil)
	}
	fmt.Println("large staged ok")
	// A program: declared, sealed, read from the catalog, invoked.
	up, _ := cuda.Upload(in.Whole(), f32s(1, 2, 3, 4))
	if _, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up)}}); err != nil {
		return fail("upload", err)
	}
	id := programs.ID{Runtime: f.Hosts()[0].Runtime, Name: "double"}
	if _, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{double}, Program: &programs.Capture{ID: id, Nodes: 1}}); err != nil {
		return fail("declare", err)
	}
	if _, err := f.Seal(ctx, "t"); err != nil {
		return fail("seal", err)
	}
	cat, err := f.Catalog(ctx, "t")
	if err != nil || len(cat) != 1 || len(cat[0].Segments) != 1 {
		return fail(fmt.Sprintf("catalog %+v", cat), err)
	}
	zero, _ := cuda.Upload(out.Whole(), make([]byte, 16))
	if _, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, zero)}}); err != nil {
		return fail("zero", err)
	}
	r, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &programs.Invocation{Program: id, Segment: cat[0].Segments[0]}}}})
	if err != nil {
		return fail("invoke", err)
	}
	got, err := f.Read(ctx, "t", out.Whole())
	if err != nil || !reflect.DeepEqual(got, f32s(2, 4, 6, 8)) || len(r.Attribution.Segments) != 1 {
		return fail(fmt.Sprintf("invoked: out %v, segments %d", got, len(r.Attribution.Segments)), err)
	}
	fmt.Println("program ok")

	return 0
}
