package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/callhost/axpy"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/hostcmd"
)

// TestMain runs this test binary as the host itself (what main runs) when
// asked: the README's recipe, without a build step.
func TestMain(m *testing.M) {
	if os.Getenv("CALLHOST_SERVE") == "1" {
		os.Exit(hostcmd.Main(options()))
	}
	if child, ok := children[os.Getenv("CALLHOST_CHILD")]; ok {
		os.Exit(child())
	}
	dir, err := os.MkdirTemp("", "callhost")
	if err != nil {
		os.Exit(1)
	}
	_ = os.Setenv(remote.TokenFileEnv, filepath.Join(dir, "token")) // this test's own, not the user's
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startHost runs this test binary as the host (what main runs) on
// hostDevice, and returns its address; it exits when the test ends.
func startHost(t *testing.T) string {
	t.Helper()
	host := exec.Command(os.Args[0], append(hostDevice, "--exit-with-stdin")...)
	host.Env = append(os.Environ(), "CALLHOST_SERVE=1")
	stdin, _ := host.StdinPipe()
	out, _ := host.StdoutPipe()
	host.Stderr = os.Stderr
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = host.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	said, err := remote.ParseListening(line)
	if err != nil {
		t.Fatalf("the host's first line %q: %v", line, err)
	}
	return said.Address
}

// children are what this test binary runs as another process of the
// test (one front per process), by $CALLHOST_CHILD.
var children = map[string]func() int{}

func f32s(vs ...float32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// TestAFrontRunsTheCallOnThisHost: a front's batch with axpy runs on the
// host built around it (its Go reference on the simulated device; built
// with the cuda tag, cuBLAS on the GPU), replayed (captured at its first
// step), and a call the host does not serve is refused before any of its
// batch runs.
func TestAFrontRunsTheCallOnThisHost(t *testing.T) {
	ctx := context.Background()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{startHost(t)}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop(ctx)
	spec := cuda.BufferSpec{Size: 16, Elem: cuda.F32}
	x, err := f.Alloc(ctx, "t", spec)
	if err != nil {
		t.Fatal(err)
	}
	y, err := f.Alloc(ctx, "t", spec)
	if err != nil {
		t.Fatal(err)
	}
	upX, _ := cuda.Upload(x.Whole(), f32s(1, 2, 3, 4))
	upY, _ := cuda.Upload(y.Whole(), f32s(10, 20, 30, 40))
	call, err := axpy.Command(x.Whole(), y.Whole(), 2)
	if err != nil {
		t.Fatal(err)
	}
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, upX), lanes.Eager(0, upY), lanes.Replayed(axpy.Name, 0, call)}}
	for i := range 2 {
		r, err := f.Submit(ctx, "t", step)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if row := r.Attribution.Rows[2]; row.Op != "call:axpy" || !row.Replayed {
			t.Errorf("step %d: the call's row %+v, want call:axpy, replayed (captured at its first step)", i, row)
		}
	}
	got, err := f.Read(ctx, "t", y.Whole())
	if err != nil {
		t.Fatal(err)
	}
	if want := f32s(12, 24, 36, 48); !reflect.DeepEqual(got, want) {
		t.Fatalf("y after y = 2x + y: got %v, want %v", got, want)
	}
	other := call
	lc := *call.LibraryCall
	lc.Name = "saxpy"
	other.LibraryCall = &lc
	zero, _ := cuda.Upload(y.Whole(), make([]byte, 16))
	_, err = f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, zero), lanes.Eager(0, other)}})
	if !errors.Is(err, remote.ErrUnknownCall) || !errors.Is(err, lanes.ErrInvalidBatch) {
		t.Fatalf("a call the host does not serve: got err %v, want remote.ErrUnknownCall and lanes.ErrInvalidBatch", err)
	}
	if again, _ := f.Read(ctx, "t", y.Whole()); !reflect.DeepEqual(again, got) {
		t.Fatalf("y after the refused batch: got %v, want %v (none of it runs)", again, got)
	}
}
