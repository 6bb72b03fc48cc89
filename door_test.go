package lanes_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/examples/callhost/axpy"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/conformance"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/hostcmd"
)

// TestMain keeps the lane hosts' token of these tests off the user's, and
// runs this binary as a lane host (with the axpy library call and conformance's user module) when a
// front of these tests launches it.
func TestMain(m *testing.M) {
	if os.Getenv(hostEnv) != "" {
		os.Exit(hostcmd.Main(hostcmd.Options{Calls: remote.LibraryCalls{axpy.Name: axpy.Build}, Modules: []kernels.Module{conformance.UserModule()}}))
	}
	dir, err := os.MkdirTemp("", "lanes-door")
	if err != nil {
		os.Exit(1)
	}
	_ = os.Setenv(remote.TokenFileEnv, filepath.Join(dir, "token"))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// onALaneHost is a server whose lanes run on a lane host (served in this
// process, reached through the remote on loopback as any host is).
func onALaneHost(t *testing.T) *lanes.Server {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	h, err := remote.Serve(context.Background(), remote.HostConfig{Name: "gpu0", Scheduler: actors.Config{Devices: []cuda.Device{dev}}})
	if err != nil {
		t.Fatalf("remote.Serve: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()); _ = dev.Close() })
	srv, err := lanes.Start(context.Background(), lanes.Config{Hosts: &remote.FrontConfig{Hosts: []string{h.Address()}}})
	if err != nil {
		t.Fatalf("lanes.Start with Hosts: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv
}

// TestTheSameDoorEitherWay: the same calls get the same answers in process
// and through a front to a lane host: a tenant's data round trip, its
// buffers its own, the same refusals, Free after the tenant's work.
func TestTheSameDoorEitherWay(t *testing.T) {
	for _, side := range []struct {
		name  string
		start func(t *testing.T) *lanes.Server
	}{
		{"in process", func(t *testing.T) *lanes.Server { s, _ := newServer(t, 1); return s }},
		{"on a lane host", onALaneHost},
	} {
		t.Run(side.name, func(t *testing.T) {
			srv := side.start(t)
			ctx := context.Background()
			a, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 1024, Elem: lanes.I32})
			if err != nil {
				t.Fatalf("Alloc: got err %v, want nil", err)
			}
			if _, err := srv.Alloc(ctx, "b", lanes.BufferSpec{Size: 64, Elem: lanes.I32}); err != nil {
				t.Fatalf("Alloc: got err %v, want nil", err)
			}
			if err := srv.Upload(ctx, "a", a.Whole(), make([]byte, 1024)); err != nil {
				t.Fatalf("Upload: got err %v, want nil", err)
			}
			inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(256, 128), lanes.BufferArg(a.Whole()), lanes.I32Arg(256))
			if err != nil {
				t.Fatal(err)
			}
			var ps []lanes.Pending
			for range 20 {
				p, err := srv.SubmitAsync(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("door/v1", 0, inc)}})
				if err != nil {
					t.Fatalf("SubmitAsync: got err %v, want nil", err)
				}
				ps = append(ps, p)
			}
			out, err := srv.Read(ctx, "a", a.Whole())
			if err != nil || binary.LittleEndian.Uint32(out[1020:]) != 20 {
				t.Fatalf("Read after 20 steps: got %v, err %v; want 20 in every element", out[1020:], err)
			}
			for what, err := range map[string]error{
				"b uploads into a's buffer": srv.Upload(ctx, "b", a.Whole(), make([]byte, 1024)),
				"b reads a's buffer":        func() error { _, err := srv.Read(ctx, "b", a.Whole()); return err }(),
				"b frees a's buffer":        srv.Free(ctx, "b", a),
			} {
				if !errors.Is(err, actors.ErrNotYours) || lanes.Classify(err).Blame != cuda.BlameCaller {
					t.Errorf("%s: got %v, want ErrNotYours, the caller's", what, err)
				}
			}
			if _, err := srv.Read(ctx, "a", lanes.Region{Buffer: a}); lanes.Classify(err).Code != codes.InvalidArgument {
				t.Errorf("Read of 0 bytes: got %v, want invalid_argument", err)
			}
			if _, err := srv.Alloc(ctx, strings.Repeat("t", lanes.MaxTenantName+1), lanes.BufferSpec{Size: 64, Elem: lanes.U8}); !errors.Is(err, actors.ErrInvalidTenant) {
				t.Errorf("a tenant name of MaxTenantName+1 bytes: got %v, want ErrInvalidTenant", err)
			}
			if err := srv.Free(ctx, "a", lanes.Buffer{}); lanes.Classify(err).Code != codes.RuntimeContract || errors.Is(err, actors.ErrNotYours) {
				t.Errorf("Free of a zero Buffer: got %v, want a contract error, not another tenant's", err)
			}
			for range 20 {
				p, err := srv.SubmitAsync(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("door/v1", 0, inc)}})
				if err != nil {
					t.Fatalf("SubmitAsync: got err %v, want nil", err)
				}
				ps = append(ps, p)
			}
			if err := srv.Free(ctx, "a", a); err != nil {
				t.Fatalf("Free: got err %v, want nil", err)
			}
			for i, p := range ps {
				if _, err := p.Result(); err != nil {
					t.Errorf("submission %d, accepted before Free: got err %v, want nil", i, err)
				}
			}
			done, cancel := context.WithCancel(ctx)
			cancel()
			if err := srv.Forget(done, "b"); lanes.Classify(err).Code != codes.Canceled {
				t.Errorf("Forget with a canceled context: got %v, want canceled (nothing forgotten)", err)
			}
			if _, err := srv.Read(ctx, "\xff", a.Whole()); !errors.Is(err, actors.ErrInvalidTenant) {
				t.Errorf("Read as an invalid tenant name: got %v, want ErrInvalidTenant", err)
			}
			forged := a
			forged.ID += 1000
			if err := srv.Upload(ctx, "a", forged.Whole(), make([]byte, 1024)); !errors.Is(err, cuda.ErrStaleHandle) {
				t.Errorf("Upload into a forged buffer: got %v, want ErrStaleHandle", err)
			}
			if err := srv.Forget(ctx, "b"); err != nil {
				t.Errorf("Forget: got err %v, want nil", err)
			}
			if st := srv.Status(); st.Serving != st.Total || st.Total == 0 || st.InProcess != (schedulerOf(srv) != nil) || (frontOf(srv) == nil) == (schedulerOf(srv) == nil) {
				t.Errorf("Status: got %+v, want everything serving, and one of Scheduler and Front", st)
			}
		})
	}
}

// TestForgetAndFreeRace: a tenant's Free and Forget racing free each
// buffer once, and neither fails for the other.
func TestForgetAndFreeRace(t *testing.T) {
	srv, _ := newServer(t, 1)
	ctx := context.Background()
	for round := range 50 {
		b, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
		if err != nil {
			t.Fatal(err)
		}
		freed := make(chan error, 1)
		go func() { freed <- srv.Free(ctx, "a", b) }()
		forgot := srv.Forget(ctx, "a")
		for errors.Is(forgot, actors.ErrTenantBusy) { // Free's own wait for the tenant's work is work in flight
			forgot = srv.Forget(ctx, "a")
		}
		ferr := <-freed
		if forgot != nil {
			t.Fatalf("round %d: Forget racing Free: got %v, want nil", round, forgot)
		}
		if ferr != nil && !errors.Is(ferr, cuda.ErrStaleHandle) {
			t.Fatalf("round %d: Free racing Forget: got %v, want nil or ErrStaleHandle (Forget freed it first)", round, ferr)
		}
	}
}

// TestAnotherHostsTenantsBufferIsNotYours: through a front to two hosts,
// tenants placed on different hosts name each other's buffers: not_yours,
// as in one process, not a buffer the host never handed out.
func TestAnotherHostsTenantsBufferIsNotYours(t *testing.T) {
	ctx := context.Background()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &remote.FrontConfig{Logf: func(string, ...any) {}}
	for i := range 2 { // two processes: one lane host per process
		cfg.Processes = append(cfg.Processes, remote.HostProcess{Name: fmt.Sprintf("gpu%d", i), Path: exe, Args: []string{"--device", "sim", "--sim-clock", "zero", "--lanes", "1"}, Env: []string{hostEnv + "=1"}})
	}
	srv, err := lanes.Start(ctx, lanes.Config{Hosts: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(ctx) })
	a, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.Alloc(ctx, "b", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	ha, _ := frontOf(srv).Placement("a")
	hb, _ := frontOf(srv).Placement("b")
	if ha == hb {
		t.Fatalf("tenants a and b both on %s, want them on two hosts (the one with the most headroom takes a new tenant)", ha)
	}
	for _, c := range []struct{ tenant, theirs lanes.Buffer }{{a, b}, {b, a}} {
		tenant := map[lanes.Buffer]string{a: "a", b: "b"}[c.tenant]
		inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(16, 16), lanes.BufferArg(c.theirs.Whole()), lanes.I32Arg(16))
		if err != nil {
			t.Fatal(err)
		}
		step := lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("theirs", 0, inc)}}
		if _, err := srv.Submit(ctx, tenant, step); !errors.Is(err, actors.ErrNotYours) || lanes.Classify(err).Code != codes.NotYours {
			t.Errorf("%s's batch naming a buffer of a tenant on another host: got %v, want not_yours", tenant, err)
		}
		if _, err := srv.SubmitAsync(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Input(mustUpload(t, c.tenant.Whole(), make([]byte, 64)))}, Retain: []lanes.Buffer{c.theirs}}); !errors.Is(err, actors.ErrNotYours) {
			t.Errorf("%s's batch retaining a buffer of a tenant on another host: got %v, want not_yours", tenant, err)
		}
		if err := srv.Upload(ctx, tenant, c.theirs.Whole(), make([]byte, 64)); !errors.Is(err, actors.ErrNotYours) {
			t.Errorf("%s's Upload into a buffer of a tenant on another host: got %v, want not_yours", tenant, err)
		}
	}
}
