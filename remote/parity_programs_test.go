package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/internal/wire"
)

// programSentinels are the sentinels of programs' and patches' mistakes.
var programSentinels = map[string]error{
	"programs.ErrNotSealed": programs.ErrNotSealed, "programs.ErrUnknownProgram": programs.ErrUnknownProgram,
	"programs.ErrSegmentMismatch": programs.ErrSegmentMismatch, "programs.ErrForeignRuntime": programs.ErrForeignRuntime, "programs.ErrTopology": programs.ErrTopology,
	"actors.ErrNotYours": actors.ErrNotYours, "lanes.ErrPatch": lanes.ErrPatch, "cache.ErrNotOpen": cache.ErrNotOpen,
	"lanes.ErrInvalidBatch": lanes.ErrInvalidBatch,
}

func programErrors(err error) []string {
	var is []string
	for name, s := range programSentinels {
		if errors.Is(err, s) {
			is = append(is, name)
		}
	}
	if len(is) == 0 && err != nil {
		is = append(is, "unmatched")
	}
	return is
}

// programSide is one way to a lane: one process, or a lane host through
// a front. seal and catalog act on the lane a tenant's batches ran on.
type programSide struct {
	runtime string
	alloc   func(tenant string, spec cuda.BufferSpec) cuda.Buffer
	submit  func(tenant string, b lanes.Batch) (lanes.Receipt, error)
	seal    func(tenant string, lane int) (cache.Preparation, error)
	catalog func(tenant string, lane int) ([]programs.Descriptor, error)
	read    func(tenant string, r cuda.Region) []byte
}

// programRun is what a side showed of the same program's life.
type programRun struct {
	captured, invoked, patched receiptShape
	sealed                     cache.Preparation
	catalog                    []programs.Descriptor
	counts, binding            []byte
	errs                       map[string][]string
	texts                      []string // the errors' messages
}

// runProgram declares a program of three launches, seals its lane, reads
// the catalog, invokes its segment, patches a binding layout, and makes
// the mistakes a caller makes with each.
func runProgram(t *testing.T, p programSide) programRun {
	t.Helper()
	run := programRun{errs: map[string][]string{}}
	note := func(what string, err error) {
		run.errs[what] = programErrors(err)
		if err != nil {
			run.texts = append(run.texts, err.Error())
		}
	}
	counts := p.alloc("a", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	bind := p.alloc("a", cuda.BufferSpec{Size: 16, Elem: cuda.U8})
	side := p.alloc("a", cuda.BufferSpec{Size: 4, Elem: cuda.U8})
	theirs := p.alloc("b", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	inc := func(b cuda.Buffer, node int) lanes.Entry {
		cmd, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		if err != nil {
			t.Fatal(err)
		}
		return lanes.Replayed("program", node, cmd)
	}
	var zeros []lanes.Entry
	for _, b := range []cuda.Buffer{counts, bind, side} {
		up, _ := cuda.Upload(b.Whole(), make([]byte, b.Size))
		zeros = append(zeros, lanes.Eager(0, up))
	}
	if _, err := p.submit("a", lanes.Batch{Entries: zeros}); err != nil {
		t.Fatal(err)
	}
	id := programs.ID{Runtime: p.runtime, Name: "step"}
	invoke := func(tenant string, inv programs.Invocation) error {
		_, err := p.submit(tenant, lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &inv}}})
		return err
	}
	if _, err := p.submit("b", lanes.Batch{Entries: []lanes.Entry{inc(theirs, 0)}}); err != nil {
		t.Fatal(err) // b on the lane too
	}
	r, err := p.submit("a", lanes.Batch{Entries: []lanes.Entry{inc(counts, 0), inc(counts, 1), inc(counts, 2)}, Program: &programs.Capture{ID: id, Nodes: 3}, Timing: lanes.TimingKernel})
	if err != nil {
		t.Fatalf("the program's batch: got err %v, want nil", err)
	}
	run.captured = shapeOf(r)
	lane := r.Lane
	note("invoked before the lane is sealed", invoke("a", programs.Invocation{Program: id, Segment: programs.Segment{End: 3, Commands: 3}}))
	_, err = p.submit("b", lanes.Batch{Entries: []lanes.Entry{inc(theirs, 0), inc(theirs, 1), inc(theirs, 2)}, Program: &programs.Capture{ID: id, Nodes: 3}})
	note("another tenant declaring the name", err)
	_, err = p.submit("a", lanes.Batch{Entries: []lanes.Entry{inc(counts, 0)}, Program: &programs.Capture{ID: programs.ID{Runtime: p.runtime}, Nodes: 1}})
	note("a program with no name", err)
	if run.sealed, err = p.seal("a", lane); err != nil {
		t.Fatalf("Seal: got err %v, want nil", err)
	}
	_, err = p.seal("a", lane)
	note("sealed twice", err)
	if run.catalog, err = p.catalog("a", lane); err != nil {
		t.Fatalf("Catalog: got err %v, want nil", err)
	}
	if len(run.catalog) != 1 || len(run.catalog[0].Segments) != 1 || run.catalog[0].ID != id {
		t.Fatalf("got catalog %+v, want one program of one segment", run.catalog)
	}
	seg := run.catalog[0].Segments[0]
	r, err = p.submit("a", lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &programs.Invocation{Program: id, Segment: seg}}}, Timing: lanes.TimingKernel})
	if err != nil {
		t.Fatalf("the invocation: got err %v, want nil", err)
	}
	run.invoked = shapeOf(r)
	bad := seg
	bad.Commands = 9
	note("a segment the catalog does not hold", invoke("a", programs.Invocation{Program: id, Segment: bad}))
	note("a program never declared", invoke("a", programs.Invocation{Program: programs.ID{Runtime: p.runtime, Name: "nope"}, Segment: seg}))
	note("another runtime's program", invoke("a", programs.Invocation{Program: programs.ID{Runtime: "other", Name: "step"}, Segment: seg}))
	note("another tenant's program", invoke("b", programs.Invocation{Program: id, Segment: seg}))

	layout := &lanes.Layout{ID: "wave", Region: bind.Whole(), Fields: []lanes.Field{{Offset: 0, Length: 4}, {Offset: 4, Length: 8}, {Offset: 12, Length: 4}}}
	typed := func(field int, fill byte, n int) lanes.Patch {
		return lanes.Patch{Layout: layout, Field: field, Bytes: bytes.Repeat([]byte{fill}, n)}
	}
	opaque := lanes.Patch{Dst: side.Whole(), Bytes: []byte{9, 9, 9, 9}}
	eager := inc(counts, 0)
	eager.Replay, eager.Phase = nil, 0
	r, err = p.submit("a", lanes.Batch{Entries: []lanes.Entry{eager}, Patches: []lanes.Patch{typed(2, 3, 4), opaque, typed(0, 1, 4), typed(1, 2, 8)}})
	if err != nil {
		t.Fatalf("the patches' batch: got err %v, want nil", err)
	}
	run.patched = shapeOf(r)
	_, err = p.submit("a", lanes.Batch{Entries: []lanes.Entry{eager}, Patches: []lanes.Patch{typed(0, 7, 4), typed(1, 7, 8)}})
	note("a layout patched but for one field", err)
	_, err = p.submit("a", lanes.Batch{Entries: []lanes.Entry{eager}, Patches: []lanes.Patch{{Dst: theirs.Whole(), Bytes: make([]byte, 64)}}})
	note("a patch of another tenant's buffer", err)
	run.counts, run.binding = p.read("a", counts.Whole()), append(p.read("a", bind.Whole()), p.read("a", side.Whole())...)
	return run
}

// TestProgramsMatchOneProcess: a program declared, sealed, read from the
// catalog and invoked, and binding patches, through a lane host give the
// bytes, receipts, preparation, catalog and errors they give in one
// process; and a second front on the same host has program names of its
// own (as it has tenants of its own).
func TestProgramsMatchOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, s := oneProcess(t, 1)
	local := programSide{
		runtime: s.Runtime(),
		alloc: func(tenant string, spec cuda.BufferSpec) cuda.Buffer {
			b, err := dev.Alloc(spec)
			if err == nil {
				err = s.Own(tenant, b)
			}
			if err != nil {
				t.Fatal(err)
			}
			testdev.Zero(t, dev, b)
			return b
		},
		submit:  func(tenant string, b lanes.Batch) (lanes.Receipt, error) { return s.Submit(ctx, tenant, b) },
		seal:    func(_ string, lane int) (cache.Preparation, error) { return s.Seal(ctx, lane) },
		catalog: func(_ string, lane int) ([]programs.Descriptor, error) { return s.Catalog(ctx, lane) },
		read:    func(_ string, r cuda.Region) []byte { return readLocal(t, backend.Must(dev), r) },
	}
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "1")
	front := func(t *testing.T) (*remote.Front, programSide) { // one front per process

		f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = f.Stop(ctx) })
		st := waitServing(t, f, addr, 0, within(10*time.Second))
		return f, programSide{
			runtime: st.Runtime,
			alloc: func(tenant string, spec cuda.BufferSpec) cuda.Buffer {
				b, err := f.Alloc(ctx, tenant, spec)
				if err != nil {
					t.Fatal(err)
				}
				zeroOnFront(t, f, tenant, b)
				return b
			},
			submit:  func(tenant string, b lanes.Batch) (lanes.Receipt, error) { return f.Submit(ctx, tenant, b) },
			seal:    func(tenant string, _ int) (cache.Preparation, error) { return f.Seal(ctx, tenant) },
			catalog: func(tenant string, _ int) ([]programs.Descriptor, error) { return f.Catalog(ctx, tenant) },
			read: func(tenant string, r cuda.Region) []byte {
				b, err := f.Read(ctx, tenant, r)
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
		}
	}
	f, viaHost := front(t)
	if len(f.Hosts()) != 1 {
		t.Fatal("want one host")
	}
	if viaHost.runtime != local.runtime {
		t.Fatalf("HostStatus.Runtime %q, one process's %q: want the same (both default)", viaHost.runtime, local.runtime)
	}
	// A second front's tenant "a" (another process: one front each)
	// declares "step" on the same lane first: its own name, which the
	// first front's "a" neither sees in its catalog nor collides with.
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front-program", "LANES_HOST="+addr)
	if out, err := child.CombinedOutput(); err != nil || !strings.Contains(string(out), "declared step") {
		t.Fatalf("another front's tenant declaring its own program \"step\": got %q (%v), want it declared", out, err)
	}

	want, got := runProgram(t, local), runProgram(t, viaHost)
	if want16 := bytes.Repeat([]byte{7, 0, 0, 0}, 16); !bytes.Equal(want.counts, want16) {
		t.Fatalf("in one process: counts %v, want seven increments of each (three captured, three invoked, one eager)", want.counts)
	}
	if !bytes.Equal(got.counts, want.counts) || !bytes.Equal(got.binding, want.binding) {
		t.Errorf("bytes through the lane host: counts %v, binding %v; in one process %v, %v", got.counts, got.binding, want.counts, want.binding)
	}
	for name, shapes := range map[string][2]receiptShape{"captured": {want.captured, got.captured}, "invoked": {want.invoked, got.invoked}, "patched": {want.patched, got.patched}} {
		if !equalShape(shapes[0], shapes[1]) {
			t.Errorf("the %s batch's receipt through the lane host:\n%+v\nin one process:\n%+v", name, shapes[1], shapes[0])
		}
	}
	theirs := got.sealed // the lane captured the other front's batch too
	theirs.Batches, theirs.Captured, theirs.Uploaded = theirs.Batches-1, theirs.Captured-1, theirs.Uploaded-1
	if theirs != want.sealed {
		t.Errorf("Seal through the lane host %+v (one batch the other front's), in one process %+v", got.sealed, want.sealed)
	}
	if !reflect.DeepEqual(got.catalog, want.catalog) {
		t.Errorf("the catalog through the lane host %+v, in one process %+v", got.catalog, want.catalog)
	}
	t.Logf("errors matched: %v", want.errs)
	for what, is := range want.errs {
		if len(is) == 1 && is[0] == "unmatched" {
			t.Errorf("%s in one process matches none of the sentinels: the case tests nothing", what)
		}
		if !reflect.DeepEqual(slices.Sorted(slices.Values(got.errs[what])), slices.Sorted(slices.Values(is))) {
			t.Errorf("%s: errors.Is finds %v through the lane host, %v in one process", what, got.errs[what], is)
		}
	}
	for _, text := range got.texts {
		if strings.Contains(text, "@") {
			t.Errorf("an error through the lane host names a tenant or program by the host's scoped name: %s", text)
		}
	}
	if _, err := f.Seal(ctx, "never-submitted"); !errors.Is(err, actors.ErrUnknownLane) {
		t.Errorf("Seal for a tenant that submitted nothing: got err %v, want actors.ErrUnknownLane", err)
	}
	long := programs.ID{Runtime: viaHost.runtime, Name: string(bytes.Repeat([]byte{'n'}, wire.MaxProgramName+1))}
	if _, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &programs.Invocation{Program: long}}}}); !errors.Is(err, remote.ErrWire) {
		t.Errorf("a program name past wire.MaxProgramName: got err %v, want remote.ErrWire", err)
	}
}

func init() { children["front-program"] = programFrontChild }

// programFrontChild is another front of the host at $LANES_HOST whose
// tenant "a" declares a program "step" of its own.
func programFrontChild() int {
	ctx := context.Background()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer f.Stop(ctx)
	var st remote.HostStatus
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && st.Health != remote.HostServing; time.Sleep(10 * time.Millisecond) {
		st = f.Hosts()[0]
	}
	b, err := f.Alloc(ctx, "a", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		fmt.Println(err)
		return 1
	}
	up, _ := cuda.Upload(b.Whole(), make([]byte, b.Size))
	if _, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up)}}); err != nil {
		fmt.Println(err)
		return 1
	}
	cmd, _ := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
	id := programs.ID{Runtime: st.Runtime, Name: "step"}
	if _, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("program", 0, cmd)}, Program: &programs.Capture{ID: id, Nodes: 1}}); err != nil {
		fmt.Println(err)
		return 1
	}
	fmt.Println("declared step")
	return 0
}
