package lanes_test

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/remote"
)

func newServer(t *testing.T, devices int) (*lanes.Server, []lanes.Device) {
	t.Helper()
	var devs []lanes.Device
	for i := range devices {
		d, err := sim.New(sim.Config{Clock: sim.ClockZeroCost, Ordinal: i})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		devs = append(devs, d)
	}
	srv, err := lanes.Start(context.Background(), lanes.Config{Devices: devs, Scheduler: actors.Config{LanesPerDevice: 2}})
	if err != nil {
		t.Fatalf("lanes.Start: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv, devs
}

// TestStartRefusesABadConfig: each bad configuration is refused as an
// invalid argument that says what to do.
func TestStartRefusesABadConfig(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	for name, cfg := range map[string]lanes.Config{
		"nothing":           {},
		"both":              {Devices: []lanes.Device{dev}, Hosts: &remote.FrontConfig{}},
		"a nil device":      {Devices: []lanes.Device{nil}},
		"scheduler devices": {Devices: []lanes.Device{dev}, Scheduler: actors.Config{Devices: []cuda.Device{dev}}},
		"12000 lanes":       {Devices: []lanes.Device{dev}, Scheduler: actors.Config{LanesPerDevice: 12000}}, // each an OS thread: it killed the process
		"65 lanes":          {Devices: []lanes.Device{dev}, Scheduler: actors.Config{LanesPerDevice: actors.MaxLanesPerDevice + 1}},
	} {
		srv, err := lanes.Start(context.Background(), cfg)
		if c := lanes.Classify(err); err == nil || c.Code != codes.InvalidArgument || c.Blame != cuda.BlameCaller {
			t.Errorf("%s: got %v (%+v), want invalid_argument, the caller's", name, err, c)
		}
		if srv != nil {
			t.Errorf("%s: got a server, want nil", name)
		}
	}
	//lint:ignore SA1012 a nil context is what this checks
	if _, err := lanes.Start(nil, lanes.Config{Devices: []lanes.Device{dev}}); lanes.Classify(err).Code != codes.InvalidArgument {
		t.Errorf("a nil context: got %v, want invalid_argument", err)
	}
}

// TestATenantsBuffersAreItsOwn: a tenant's buffers go on one device, only
// it may free or read them, and Forget frees them all.
func TestATenantsBuffersAreItsOwn(t *testing.T) {
	srv, devs := newServer(t, 2)
	ctx := context.Background()
	a1, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	a2, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	b1, err := srv.Alloc(ctx, "b", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	if a1.Device != a2.Device {
		t.Errorf("tenant a's buffers: on devices %d and %d, want one device", a1.Device, a2.Device)
	}
	if a1.Device == b1.Device {
		t.Errorf("tenants a and b on device %d, want them spread over the two devices", a1.Device)
	}
	if err := srv.Free(ctx, "b", a1); !errors.Is(err, actors.ErrNotYours) || lanes.Classify(err).Blame != cuda.BlameCaller {
		t.Errorf("b frees a's buffer: got %v, want ErrNotYours, the caller's", err)
	}
	if _, err := srv.Read(ctx, "b", a1.Whole()); !errors.Is(err, actors.ErrNotYours) {
		t.Errorf("b reads a's buffer: got %v, want ErrNotYours", err)
	}
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data, 7)
	if err := srv.Upload(ctx, "a", a1.Whole(), data); err != nil {
		t.Fatalf("Upload: got err %v, want nil", err)
	}
	if err := srv.Upload(ctx, "a", a1.Whole(), data[:8]); lanes.Classify(err).Code != codes.RuntimeContract || !errors.Is(err, cuda.ErrOutOfBounds) {
		t.Errorf("Upload of 8 bytes into 64: got %v, want cuda_runtime_contract, ErrOutOfBounds (as an upload command of the same mistake)", err)
	}
	got, err := srv.Read(ctx, "a", lanes.Region{Buffer: a1, Length: 4})
	if err != nil || binary.LittleEndian.Uint32(got) != 7 {
		t.Fatalf("Read back: got %v, %v; want 7, nil", got, err)
	}
	if err := srv.Upload(ctx, "a", a2.Whole(), data); err != nil { // Free reads one element of it first
		t.Fatalf("Upload: got err %v, want nil", err)
	}
	if err := srv.Free(ctx, "a", a2); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	if err := srv.Free(ctx, "a", a2); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Errorf("Free again: got %v, want ErrStaleHandle", err)
	}
	inUse := func() (n uint64) {
		for _, d := range devs {
			n += d.Memory().InUse
		}
		return n
	}
	before := inUse()
	if err := srv.Forget(ctx, "a"); err != nil {
		t.Fatalf("Forget: got err %v, want nil", err)
	}
	if after := inUse(); after >= before {
		t.Errorf("memory in use after Forget: %d, before %d; want a's buffer freed", after, before)
	}
	if _, err := srv.Read(ctx, "a", a1.Whole()); err == nil {
		t.Error("Read of a forgotten tenant's freed buffer: got nil, want an error")
	}
	st := srv.Status()
	if !st.InProcess || st.Total != 4 || st.Serving != 4 || len(st.Lanes) != 4 || st.Hosts != nil {
		t.Errorf("Status: got %+v, want in process, 4 lanes serving", st)
	}
	if schedulerOf(srv) == nil || frontOf(srv) != nil {
		t.Error("an in-process server: want its Scheduler, no Front")
	}
}

// TestAStoppedServerRefuses: after Stop, every call is refused with the
// one ErrStopped, not submitted.
func TestAStoppedServerRefuses(t *testing.T) {
	srv, _ := newServer(t, 1)
	ctx := context.Background()
	b, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatalf("Stop: got err %v, want nil", err)
	}
	if _, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32}); !errors.Is(err, actors.ErrStopped) {
		t.Errorf("Alloc after Stop: got %v, want ErrStopped", err)
	}
	if _, err := srv.Submit(ctx, "a", lanes.Batch{}); !errors.Is(err, actors.ErrStopped) || !lanes.Classify(err).NotSubmitted {
		t.Errorf("Submit after Stop: got %v, want ErrStopped, not submitted", err)
	}
	if err := srv.Free(ctx, "a", b); !errors.Is(err, actors.ErrStopped) {
		t.Errorf("Free after Stop: got %v, want ErrStopped", err)
	}
}

// TestTheDoorRefusesWhatCannotWork: what no call could ever serve is the
// caller's error, not submitted, not retryable, and says why, in process
// (lane hosts answer the same, and their tests show it).
func TestTheDoorRefusesWhatCannotWork(t *testing.T) {
	srv, devs := newServer(t, 1)
	ctx := context.Background()
	_, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 1 << 62, Elem: lanes.U8})
	if c := lanes.Classify(err); c.Code != codes.InvalidArgument || c.Blame != cuda.BlameCaller || c.Retryable || !c.NotSubmitted || !errors.Is(err, cuda.ErrOutOfMemory) {
		t.Errorf("Alloc larger than the device: got %v (%+v), want invalid_argument, the caller's, not retryable, not submitted", err, c)
	}
	long := strings.Repeat("t", lanes.MaxTenantName+1)
	if _, err := srv.Alloc(ctx, long, lanes.BufferSpec{Size: 64, Elem: lanes.U8}); !errors.Is(err, actors.ErrInvalidTenant) {
		t.Errorf("a %d-byte tenant name: got %v, want ErrInvalidTenant (the same limit as a front's)", len(long), err)
	}
	b, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Read(ctx, "a", lanes.Region{Buffer: b}); lanes.Classify(err).Code != codes.InvalidArgument {
		t.Errorf("Read of 0 bytes: got %v, want invalid_argument", err)
	}
	if _, err := srv.Read(ctx, "a", lanes.Region{Buffer: b, Offset: 60, Length: 8}); !errors.Is(err, cuda.ErrOutOfBounds) {
		t.Errorf("Read past the end: got %v, want ErrOutOfBounds", err)
	}
	if err := srv.Free(ctx, "a", lanes.Buffer{}); lanes.Classify(err).Code != codes.RuntimeContract || errors.Is(err, actors.ErrNotYours) {
		t.Errorf("Free of a zero Buffer: got %v, want a contract error (no such buffer), not another tenant's", err)
	}
	forged := b
	forged.ID += 100
	if _, err := srv.Read(ctx, "a", forged.Whole()); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Errorf("Read of a forged buffer: got %v, want ErrStaleHandle", err)
	}
	if _, err := srv.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{{}}}); err == nil || !strings.Contains(err.Error(), "empty command") {
		t.Errorf("a zero Entry: got %v, want it called an empty command, with how to build one", err)
	}

	for name, cfg := range map[string]lanes.Config{
		"the same device twice": {Devices: []lanes.Device{devs[0], devs[0]}},
		"Scheduler with Hosts":  {Hosts: &remote.FrontConfig{}, Scheduler: actors.Config{LanesPerDevice: 2}},
	} {
		if _, err := lanes.Start(ctx, cfg); lanes.Classify(err).Code != codes.InvalidArgument {
			t.Errorf("%s: got %v, want invalid_argument", name, err)
		}
	}
	closed, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	if srv, err := lanes.Start(ctx, lanes.Config{Devices: []lanes.Device{closed}}); lanes.Classify(err).Code != codes.InvalidArgument || srv != nil {
		t.Errorf("a closed device: got %v, want invalid_argument and no server", err)
	}
}

// TestFreeWaitsForTheTenantsWork: Free is ordered after the tenant's
// submissions accepted before it: every one of them ends as it would have.
func TestFreeWaitsForTheTenantsWork(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockRealTime})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	srv, err := lanes.Start(context.Background(), lanes.Config{Devices: []lanes.Device{dev}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	ctx := context.Background()
	b, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 4 << 10, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Upload(ctx, "a", b.Whole(), make([]byte, 4<<10)); err != nil {
		t.Fatal(err)
	}
	inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(1<<10, 256), lanes.BufferArg(b.Whole()), lanes.I32Arg(1<<10))
	if err != nil {
		t.Fatal(err)
	}
	var ps []lanes.Pending
	for range 50 {
		p, err := srv.SubmitAsync(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("free/v1", 0, inc)}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if err := srv.Free(ctx, "a", b); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	for i, p := range ps {
		select {
		case <-p.Done():
		default:
			t.Fatalf("submission %d had not ended when Free returned", i)
		}
		if _, err := p.Result(); err != nil {
			t.Errorf("submission %d, accepted before Free: got err %v, want nil", i, err)
		}
	}
}

// TestATenantOnAPoisonedDeviceStartsOverOnAnother: in process, with two
// devices, a sticky fault on the first takes out that device alone: a new
// tenant is placed on the device that serves, and the tenant that poisoned
// the first starts over there after Forget (as through a front a tenant
// starts over on a serving host).
func TestATenantOnAPoisonedDeviceStartsOverOnAnother(t *testing.T) {
	ctx := context.Background()
	var devs []lanes.Device
	for i := range 2 {
		cfg := sim.Config{Clock: sim.ClockZeroCost, Ordinal: i}
		if i == 0 {
			cfg.Faults = []sim.Fault{{Kind: sim.FaultSticky, Kernel: "inc_i32", Nth: 1}}
		}
		d, err := sim.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		devs = append(devs, d)
	}
	srv, err := lanes.Start(ctx, lanes.Config{Devices: devs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(ctx) })
	step := func(tenant string) (lanes.Buffer, error) {
		b, err := srv.Alloc(ctx, tenant, lanes.BufferSpec{Size: 64, Elem: lanes.I32})
		if err != nil {
			return b, err
		}
		if err := srv.Upload(ctx, tenant, b.Whole(), make([]byte, 64)); err != nil {
			return b, err
		}
		inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(16, 16), lanes.BufferArg(b.Whole()), lanes.I32Arg(16))
		if err != nil {
			return b, err
		}
		_, err = srv.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("poison", 0, inc)}})
		return b, err
	}
	b, err := step("culprit")
	if b.Device != devs[0].Info().Instance || !errors.Is(err, cuda.ErrIllegalAddress) {
		t.Fatalf("the culprit's step on device 0: got device %d, err %v; want device %d, an illegal address", b.Device, err, devs[0].Info().Instance)
	}
	if _, err := srv.Read(ctx, "culprit", b.Whole()); !errors.Is(err, cuda.ErrIllegalAddress) || lanes.Classify(err).Retryable {
		t.Errorf("the culprit's Read on the poisoned device: got %v, want the device's error, not retryable", err)
	}
	inc, _ := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(16, 16), lanes.BufferArg(b.Whole()), lanes.I32Arg(16))
	if _, err := srv.Submit(ctx, "culprit", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("poison", 0, inc)}}); !errors.Is(err, cuda.ErrIllegalAddress) || lanes.Classify(err).Retryable || !lanes.Classify(err).NotSubmitted {
		t.Errorf("the culprit's Submit on the poisoned device: got %v (%+v), want the device's error, not retryable, not submitted (no retry helps until Forget)", err, lanes.Classify(err))
	}
	nb, err := step("newcomer")
	if err != nil || nb.Device != devs[1].Info().Instance {
		t.Fatalf("a new tenant: got device %d, err %v; want device %d (the one that serves), nil", nb.Device, err, devs[1].Info().Instance)
	}
	if err := srv.Forget(ctx, "culprit"); err != nil {
		t.Fatalf("Forget of the tenant on the poisoned device: got %v, want nil (its memory went with the device)", err)
	}
	again, err := step("culprit")
	if err != nil || again.Device != devs[1].Info().Instance {
		t.Fatalf("the culprit starting over: got device %d, err %v; want device %d, nil", again.Device, err, devs[1].Info().Instance)
	}
	out, err := srv.Read(ctx, "culprit", again.Whole())
	if err != nil || binary.LittleEndian.Uint32(out) != 1 {
		t.Errorf("the culprit's step on the serving device: got %v, err %v; want 1s", out[:4], err)
	}
}

// TestAStoppedDoorAnswersStoppedFirst: after Stop, every call answers
// ErrStopped, not submitted, whatever else is wrong with it (a nil
// context, the zero Buffer, another tenant's buffer, an empty tenant), in
// process and through a launched lane host alike.
func TestAStoppedDoorAnswersStoppedFirst(t *testing.T) {
	for _, side := range paritySides[:2] {
		t.Run(side.name, func(t *testing.T) {
			srv := side.start(t)
			ctx := context.Background()
			theirs, err := srv.Alloc(ctx, "theirs", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Stop(ctx); err != nil {
				t.Fatalf("Stop: got err %v, want nil", err)
			}
			var nilCtx context.Context
			_, allocErr := srv.Alloc(nilCtx, "", lanes.BufferSpec{})
			_, readErr := srv.Read(ctx, "mine", lanes.Buffer{}.Whole())
			_, submitErr := srv.Submit(nilCtx, "mine", lanes.Batch{})
			_, asyncErr := srv.SubmitAsync(ctx, "", lanes.Batch{})
			for call, err := range map[string]error{
				"Alloc (nil context, no tenant)":      allocErr,
				"Upload (another's buffer)":           srv.Upload(ctx, "mine", theirs.Whole(), []byte{1}),
				"Read (the zero Buffer)":              readErr,
				"Free (another's buffer)":             srv.Free(ctx, "mine", theirs),
				"Forget (no tenant)":                  srv.Forget(ctx, ""),
				"Submit (nil context)":                submitErr,
				"SubmitAsync (no tenant)":             asyncErr,
				"Free (the owner's, once stopped)":    srv.Free(ctx, "theirs", theirs),
				"Upload (nil context, zero Buffer)":   srv.Upload(nilCtx, "mine", lanes.Buffer{}.Whole(), nil),
				"Forget (the owner, once stopped)":    srv.Forget(ctx, "theirs"),
				"Submit (another's buffer's command)": submitOf(ctx, srv, theirs),
			} {
				if !errors.Is(err, actors.ErrStopped) || !lanes.Classify(err).NotSubmitted {
					t.Errorf("%s after Stop: got %v, want ErrStopped, not submitted", call, err)
				}
			}
		})
	}
}

// submitOf submits, as "mine", a batch that writes b.
func submitOf(ctx context.Context, srv *lanes.Server, b lanes.Buffer) error {
	up, err := lanes.Upload(b.Whole(), make([]byte, b.Size))
	if err != nil {
		return err
	}
	_, err = srv.Submit(ctx, "mine", lanes.Batch{Entries: []lanes.Entry{lanes.Input(up)}})
	return err
}
