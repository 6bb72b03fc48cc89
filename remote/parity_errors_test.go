package remote_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// paritySentinels are the sentinels a caller tests its errors against.
var paritySentinels = map[string]error{
	"cuda.ErrOutOfMemory": cuda.ErrOutOfMemory, "cuda.ErrStaleHandle": cuda.ErrStaleHandle,
	"cuda.ErrOutOfBounds": cuda.ErrOutOfBounds, "cuda.ErrForeignHandle": cuda.ErrForeignHandle,
	"cuda.ErrEmptyRegion": cuda.ErrEmptyRegion, "actors.ErrNotYours": actors.ErrNotYours,
	"lanes.ErrInvalidBatch": lanes.ErrInvalidBatch, "actors.ErrIndeterminate": actors.ErrIndeterminate,
	"cuda.ErrInvalidCommand": cuda.ErrInvalidCommand,
}

// matching is which of paritySentinels err matches.
func matching(err error) map[string]bool {
	is := map[string]bool{}
	for name, s := range paritySentinels {
		if errors.Is(err, s) {
			is[name] = true
		}
	}
	return is
}

// paritySide is one way to the same device: one process, or a lane host
// through a front.
type paritySide struct {
	alloc  func(tenant string, spec cuda.BufferSpec) (cuda.Buffer, error)
	free   func(tenant string, b cuda.Buffer) error
	submit func(tenant string, b lanes.Batch) error
}

// mustAlloc allocates a buffer of 16 int32 for tenant on side p.
func mustAlloc(t *testing.T, p paritySide, tenant string) cuda.Buffer {
	t.Helper()
	b, err := p.alloc(tenant, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatalf("Alloc for %s: got err %v, want nil", tenant, err)
	}
	return b
}

// oneProcess starts a scheduler on a simulated device of its own (zero
// cost clock), stopped when the test ends: the one-process side of a
// parity test.
func oneProcess(t *testing.T, lanesPerDevice int) (sim.Device, *actors.Scheduler) {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: lanesPerDevice})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return dev, s
}

// zeroOnFront writes zeros over a tenant's buffer through the front, as
// a program does before its steps read it.
func zeroOnFront(t *testing.T, f *remote.Front, tenant string, b cuda.Buffer) {
	t.Helper()
	up, err := cuda.Upload(b.Whole(), make([]byte, b.Size))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Submit(context.Background(), tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up)}}); err != nil {
		t.Fatalf("zeroing buffer %d: got err %v, want nil", b.ID, err)
	}
}

// readLocal reads a region back from a device of this process, on a
// stream of its own: the one-process side of a parity test.
func readLocal(t *testing.T, dev backend.Device, r cuda.Region) []byte {
	t.Helper()
	st, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Destroy()
	b := make([]byte, r.Length)
	if err := st.Readback(r, b); err != nil {
		t.Fatal(err)
	}
	if err := st.Synchronize(); err != nil {
		t.Fatal(err)
	}
	return b
}

// startChildHost runs this test binary as the lane host children[name]
// serves (a host of one's own) and returns its address; it is killed
// when the test ends.
func startChildHost(t *testing.T, name string) string {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD="+name)
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	said, err := remote.ParseListening(line)
	if err != nil {
		t.Fatalf("the host's process: got %q (%v), want it serving", line, err)
	}
	return said.Address
}

// TestErrorsMatchAsInOneProcess: the same mistakes, made in one process
// and through a lane host, match the same sentinels with errors.Is: out
// of device memory, a freed buffer, another tenant's buffer, an empty
// batch (through the host they cross as a code, a message and the names
// of the sentinels wrapped).
func TestErrorsMatchAsInOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, s := oneProcess(t, 2)
	local := paritySide{
		alloc: func(tenant string, spec cuda.BufferSpec) (cuda.Buffer, error) {
			b, err := dev.Alloc(spec)
			if err == nil {
				err = s.Own(tenant, b)
			}
			return b, err
		},
		free:   func(_ string, b cuda.Buffer) error { return dev.Free(b) },
		submit: func(tenant string, b lanes.Batch) error { _, err := s.Submit(ctx, tenant, b); return err },
	}
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "2")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(ctx)
	viaHost := paritySide{
		alloc:  func(tenant string, spec cuda.BufferSpec) (cuda.Buffer, error) { return f.Alloc(ctx, tenant, spec) },
		free:   func(tenant string, b cuda.Buffer) error { return f.Free(ctx, tenant, b) },
		submit: func(tenant string, b lanes.Batch) error { _, err := f.Submit(ctx, tenant, b); return err },
	}
	inc := func(t *testing.T, b cuda.Buffer) lanes.Entry {
		cmd, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		if err != nil {
			t.Fatal(err)
		}
		return lanes.Replayed("parity", 0, cmd)
	}
	mistakes := []struct {
		name string
		make func(t *testing.T, p paritySide) error
	}{
		{"an allocation past the device's memory", func(t *testing.T, p paritySide) error {
			_, err := p.alloc("a", cuda.BufferSpec{Size: 1 << 44, Elem: cuda.U8})
			return err
		}},
		{"a step naming a buffer freed just before", func(t *testing.T, p paritySide) error {
			own, gone := mustAlloc(t, p, "a"), mustAlloc(t, p, "a")
			if err := p.free("a", gone); err != nil {
				t.Fatal(err)
			}
			return p.submit("a", lanes.Batch{Entries: []lanes.Entry{inc(t, own), inc(t, own), inc(t, gone)}})
		}},
		{"a step naming another tenant's buffer", func(t *testing.T, p paritySide) error {
			own, theirs := mustAlloc(t, p, "a"), mustAlloc(t, p, "b")
			return p.submit("a", lanes.Batch{Entries: []lanes.Entry{inc(t, own), inc(t, theirs)}})
		}},
		{"an empty batch", func(t *testing.T, p paritySide) error { return p.submit("a", lanes.Batch{}) }},
		{"a zero entry", func(t *testing.T, p paritySide) error { return p.submit("a", lanes.Batch{Entries: []lanes.Entry{{}}}) }},
		{"a command of no kind there is", func(t *testing.T, p paritySide) error {
			return p.submit("a", lanes.Batch{Entries: []lanes.Entry{{Command: cuda.Command{Kind: 99}}}})
		}},
	}
	t.Run("a read or free of another tenant's buffer", func(t *testing.T) {
		theirs := mustAlloc(t, viaHost, "b")
		_, readErr := f.Read(ctx, "a", theirs.Whole())
		freeErr := f.Free(ctx, "a", theirs)
		for what, err := range map[string]error{"Read": readErr, "Free": freeErr} {
			if !errors.Is(err, actors.ErrNotYours) || errors.Is(err, cuda.ErrStaleHandle) {
				t.Errorf("%s of another tenant's buffer through a lane host: got %v, want actors.ErrNotYours as a submission naming it gets", what, err)
			}
		}
	})
	for _, m := range mistakes {
		t.Run(m.name, func(t *testing.T) {
			inOne, through := m.make(t, local), m.make(t, viaHost)
			want, got := matching(inOne), matching(through)
			if len(want) == 0 {
				t.Fatalf("in one process: %v matches none of the sentinels: the case tests nothing", inOne)
			}
			for name := range paritySentinels {
				if want[name] != got[name] {
					t.Errorf("errors.Is(err, %s): %v in one process (%v), %v through a lane host (%v)", name, want[name], inOne, got[name], through)
				}
			}
		})
	}
}

// TestAnEncodedStepIsCheckedAgainWhenOwnershipChanges: a host keeps the
// ownership verdict of an encoded step between its submissions
// (schedhook.OwnershipMemo); the verdict is the tenant's alone and lapses
// when ownership changes: another tenant submitting the same step is
// refused, and so is the tenant's own step once it freed the buffer.
func TestAnEncodedStepIsCheckedAgainWhenOwnershipChanges(t *testing.T) {
	ctx := context.Background()
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "2")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(ctx)
	buf, err := f.Alloc(ctx, "a", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatal(err)
	}
	zeroOnFront(t, f, "a", buf)
	cmd, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(buf.Whole()), cuda.I32Arg(16))
	if err != nil {
		t.Fatal(err)
	}
	enc, err := f.Encode(lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("memo", 0, cmd)}})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(tenant string) error {
		p, err := f.SubmitEncoded(ctx, tenant, enc)
		if err != nil {
			return err
		}
		_, err = p.Result()
		return err
	}
	for i := range 3 {
		if err := submit("a"); err != nil {
			t.Fatalf("tenant a's encoded step %d: got err %v, want nil", i, err)
		}
	}
	if err := submit("b"); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("tenant b submitting a's encoded step: got err %v, want actors.ErrNotYours", err)
	}
	if err := submit("a"); err != nil {
		t.Fatalf("tenant a's encoded step after b's: got err %v, want nil", err)
	}
	if err := f.Free(ctx, "a", buf); err != nil {
		t.Fatal(err)
	}
	if err := submit("a"); !errors.Is(err, cuda.ErrStaleHandle) || !errors.Is(err, lanes.ErrInvalidBatch) {
		t.Fatalf("tenant a's encoded step after it freed the buffer: got err %v, want cuda.ErrStaleHandle and lanes.ErrInvalidBatch", err)
	}
}
