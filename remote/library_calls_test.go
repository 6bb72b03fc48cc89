package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/examples/callhost/axpy"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// callsHostChild serves a lane host on a simulated device that serves the
// library call "axpy" (examples/callhost's).
func callsHostChild() int {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		return 1
	}
	calls := remote.LibraryCalls{axpy.Name: axpy.Build,
		"empty": func([]cuda.Touch, []byte) (*cuda.LibraryCall, error) { return &cuda.LibraryCall{}, nil }}
	h, err := remote.Serve(context.Background(), remote.HostConfig{Name: "calls", Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Calls: calls})
	if err != nil {
		fmt.Println("Serve:", err)
		return 1
	}
	clear(calls) // the host serves what it was given at Serve
	fmt.Println(h.Listening())
	select {}
}

func init() { children["calls-host"] = callsHostChild }

// f32Bytes is vs as little-endian float32 bytes.
func f32Bytes(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// TestLibraryCallsMatchOneProcess: a batch with a library call gives the
// same bytes and the same receipt rows in one process and through a lane
// host that serves the call by name, eagerly and replayed; a name the host
// does not serve, or a declaration its builder refuses, is refused before
// any of the batch ran.
func TestLibraryCallsMatchOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, s := oneProcess(t, 0)
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{startChildHost(t, "calls-host")}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)

	x, y := f32Bytes(1, 2, 3, 4), f32Bytes(10, 20, 30, 40)
	spec := cuda.BufferSpec{Size: 16, Elem: cuda.F32}
	step := func(t *testing.T, bx, by cuda.Buffer) lanes.Batch {
		upX, _ := cuda.Upload(bx.Whole(), x)
		upY, _ := cuda.Upload(by.Whole(), y)
		call, err := axpy.Command(bx.Whole(), by.Whole(), 2)
		if err != nil {
			t.Fatal(err)
		}
		return lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, upX), lanes.Eager(0, upY), lanes.Replayed("axpy", 0, call)}}
	}
	type side struct {
		rows [][]lanes.Row
		y    []byte
	}
	run := func(t *testing.T, alloc func() (cuda.Buffer, cuda.Buffer), submit func(lanes.Batch) (lanes.Receipt, error), read func(cuda.Region) []byte) side {
		bx, by := alloc()
		var got side
		for i := range 3 { // captured, then replayed
			r, err := submit(step(t, bx, by))
			if err != nil {
				t.Fatalf("step %d: got err %v, want nil", i, err)
			}
			got.rows = append(got.rows, r.Attribution.Rows)
		}
		got.y = read(by.Whole())
		return got
	}
	local := run(t, func() (cuda.Buffer, cuda.Buffer) {
		bx, _ := dev.Alloc(spec)
		by, _ := dev.Alloc(spec)
		return bx, by
	}, func(b lanes.Batch) (lanes.Receipt, error) { return s.Submit(ctx, "a", b) }, func(r cuda.Region) []byte { return readLocal(t, backend.Must(dev), r) })
	alloc := func() (cuda.Buffer, cuda.Buffer) {
		bx, err := f.Alloc(ctx, "a", spec)
		if err != nil {
			t.Fatal(err)
		}
		by, err := f.Alloc(ctx, "a", spec)
		if err != nil {
			t.Fatal(err)
		}
		return bx, by
	}
	read := func(r cuda.Region) []byte {
		b, err := f.Read(ctx, "a", r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	through := run(t, alloc, func(b lanes.Batch) (lanes.Receipt, error) { return f.Submit(ctx, "a", b) }, read)
	if want := f32Bytes(12, 24, 36, 48); !reflect.DeepEqual(local.y, want) {
		t.Fatalf("in one process: y = %v, want %v", local.y, want)
	}
	if !reflect.DeepEqual(through.y, local.y) {
		t.Errorf("y through the lane host %v, in one process %v: want the same", through.y, local.y)
	}
	if !reflect.DeepEqual(through.rows, local.rows) {
		t.Errorf("receipt rows through the lane host:\n%+v\nin one process:\n%+v\nwant the same", through.rows, local.rows)
	}
	t.Logf("rows of the third step: %+v", local.rows[2])

	bx, by := alloc()
	for name, call := range map[string]func() cuda.Command{
		"a call the host does not serve": func() cuda.Command {
			c, _ := axpy.Command(bx.Whole(), by.Whole(), 1)
			c.LibraryCall.Name = "axpy-v2"
			return c
		},
		"a declaration the host's builder refuses": func() cuda.Command {
			c, _ := axpy.Command(bx.Whole(), by.Whole(), 1)
			c.LibraryCall.Params = c.LibraryCall.Params[:2]
			return c
		},
		"a builder that makes a call with no code": func() cuda.Command {
			c, _ := axpy.Command(bx.Whole(), by.Whole(), 1)
			c.LibraryCall.Name = "empty"
			return c
		},
	} {
		upY, _ := cuda.Upload(by.Whole(), y)
		if _, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, upY)}}); err != nil {
			t.Fatal(err)
		}
		zero, _ := cuda.Upload(by.Whole(), make([]byte, 16))
		_, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, zero), lanes.Eager(0, call())}})
		if !errors.Is(err, lanes.ErrInvalidBatch) || name == "a call the host does not serve" && !errors.Is(err, remote.ErrUnknownCall) {
			t.Errorf("%s: got err %v, want lanes.ErrInvalidBatch (and remote.ErrUnknownCall for an unknown name)", name, err)
		}
		if got := read(by.Whole()); !reflect.DeepEqual(got, y) {
			t.Errorf("%s: y = %v after the refused batch, want %v: none of it may run", name, got, y)
		}
		t.Log(err)
	}
}

// TestServeRefusesCallsAndNamesThatCannotCross: HostConfig.Calls with a
// name no front could send, or a nil builder, a host name that is not
// UTF-8, MaxFronts or SilentFront below zero (found from outside: taken
// as the default), a SilentFront out of lanehost's range and a module that cannot load are refused before the host starts.
func TestServeRefusesCallsAndNamesThatCannotCross(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	build := remote.CallBuilder(func([]cuda.Touch, []byte) (*cuda.LibraryCall, error) { return nil, nil })
	for name, cfg := range map[string]remote.HostConfig{
		"an empty call name":       {Calls: remote.LibraryCalls{"": build}},
		"a call name with a space": {Calls: remote.LibraryCalls{"a b": build}},
		"a call name not UTF-8":    {Calls: remote.LibraryCalls{"ax\xffpy": build}},
		"a nil builder":            {Calls: remote.LibraryCalls{"axpy": nil}},
		"a host name not UTF-8":    {Name: "h\xffx"},
		"MaxFronts below zero":     {MaxFronts: -1},
		"SilentFront below zero":   {SilentFront: -time.Second},
		"SilentFront too short":    {SilentFront: time.Millisecond},
		"a module with no image":   {Modules: []kernels.Module{{Name: "m", Kernels: kernels.Registry{"k": {Spec: cuda.KernelSpec{Name: "k"}}}}}},
	} {
		cfg.Scheduler = actors.Config{Devices: []cuda.Device{dev}}
		if _, err := remote.Serve(context.Background(), cfg); !errors.Is(err, remote.ErrConfig) {
			t.Errorf("%s: Serve got err %v, want remote.ErrConfig", name, err)
		}
	}
}
