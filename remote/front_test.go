package remote_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// lanehostBin is the lanehost binary TestMain builds for the tests that
// run hosts as processes.
var lanehostBin string

func TestMain(m *testing.M) {
	if os.Getenv("LANES_TLS_CHILD") == "1" {
		os.Exit(tlsFrontChild())
	}
	dir, err := os.MkdirTemp("", "lanehost")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lanehostBin = filepath.Join(dir, "lanehost")
	if out, err := exec.Command("go", "build", "-o", lanehostBin, "github.com/lanesched/lanes/cmd/lanehost").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build lanehost: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// counter is a tenant's buffer of 16 int32 on its host.
type counter struct {
	tenant string
	buf    cuda.Buffer
}

// setUp allocates the tenant's counter and zeroes it.
func setUp(t testing.TB, f *remote.Front, tenant string) counter {
	t.Helper()
	ctx := context.Background()
	b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatalf("Alloc for %s: got err %v, want nil", tenant, err)
	}
	up, err := cuda.Upload(b.Whole(), make([]byte, 64))
	if err != nil {
		t.Fatalf("Upload: got err %v, want nil", err)
	}
	if _, err := f.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
		t.Fatalf("zeroing %s's counter: got err %v, want nil", tenant, err)
	}
	return counter{tenant: tenant, buf: b}
}

// step is k launches adding 1 to every element of the counter, replayed.
func (c counter) step(t testing.TB, k int) lanes.Batch {
	t.Helper()
	spec := kernels.Builtin().MustSpec(kernels.Inc)
	var b lanes.Batch
	for i := range k {
		cmd, err := cuda.Launch(spec, cuda.Linear(16, 16), cuda.BufferArg(c.buf.Whole()), cuda.I32Arg(16))
		if err != nil {
			t.Fatalf("Launch: got err %v, want nil", err)
		}
		b.Entries = append(b.Entries, lanes.Replayed("remote-test", i, cmd))
	}
	return b
}

// value reads element 0 of the counter back.
func (c counter) value(t testing.TB, f *remote.Front) int32 {
	t.Helper()
	data, err := f.Read(context.Background(), c.tenant, c.buf.Whole())
	if err != nil {
		t.Fatalf("Read %s: got err %v, want nil", c.tenant, err)
	}
	if len(data) != 64 {
		t.Fatalf("Read %s: got %d bytes, want 64", c.tenant, len(data))
	}
	return int32(binary.LittleEndian.Uint32(data))
}

// TestFrontServesTenantsOnTwoHosts: tenants are placed across two hosts,
// allocate, upload, run steps and read back through the front; each
// tenant's counter holds exactly its own steps.
func TestFrontServesTenantsOnTwoHosts(t *testing.T) {
	_, a := startHostProcess(t, "--lanes", "2")
	_, b := startHostProcess(t, "--lanes", "2")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{a, b}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	var cs []counter
	for i := range 4 {
		cs = append(cs, setUp(t, f, fmt.Sprintf("tenant-%d", i)))
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 + i {
				if _, err := f.Submit(context.Background(), c.tenant, c.step(t, 4)); err != nil {
					t.Errorf("step of %s: got err %v, want nil", c.tenant, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, c := range cs {
		if got, want := c.value(t, f), int32(4*(5+i)); got != want {
			t.Errorf("%s's counter: got %d, want %d", c.tenant, got, want)
		}
	}
	hosts := f.Hosts()
	for _, h := range hosts {
		if h.State != remote.HostServing || h.Tenants != 2 {
			t.Errorf("host %s: got %v with %d tenants, want serving with 2", h.Name, h.State, h.Tenants)
		}
	}
}

// TestFrontRefusesWhatHasNoWireForm: bad calls come back as errors, and
// nothing reaches a host.
func TestFrontRefusesBadCalls(t *testing.T) {
	_, h := startHostProcess(t)
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{h}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	ctx := context.Background()
	if _, err := f.Submit(ctx, "", lanes.Batch{}); !errors.Is(err, remote.ErrConfig) {
		t.Errorf("Submit with no tenant: got err %v, want remote.ErrConfig", err)
	}
	c := setUp(t, f, "t")
	other := setUp(t, f, "u")
	// A buffer of another tenant: refused by the host as not owned.
	r, err := f.Submit(ctx, "t", other.step(t, 1))
	if err == nil || r.Outcome != lanes.OutcomeRefused {
		t.Errorf("a step on another tenant's buffer: got outcome %v err %v, want refused with an error", r.Outcome, err)
	}
	if _, err := f.Read(ctx, "t", other.buf.Whole()); err == nil {
		t.Errorf("Read of another tenant's buffer: got nil err, want a refusal")
	}
	if _, err := f.Alloc(ctx, "t", cuda.BufferSpec{Size: 3, Elem: cuda.I32}); err == nil {
		t.Errorf("Alloc of 3 bytes of int32: got nil err, want a refusal")
	}
	if err := f.Free(ctx, "t", c.buf); err != nil {
		t.Errorf("Free: got err %v, want nil", err)
	}
	if err := f.Free(ctx, "t", c.buf); err == nil {
		t.Errorf("second Free: got nil err, want a refusal")
	}
}

// TestStartFrontRefusesBadConfig: refused before anything starts.
func TestStartFrontRefusesBadConfig(t *testing.T) {
	for _, cfg := range []remote.FrontConfig{
		{},
		{Hosts: []string{"10.1.2.3:9000"}},
		{Hosts: []string{"nonsense"}},
		{Hosts: []string{"127.0.0.1:1"}, Address: "0.0.0.0:0"},
		{Hosts: []string{"127.0.0.1:1"}, LostAfter: time.Millisecond},
		{Launch: []remote.Launch{{Name: "x"}}},
	} {
		f, err := remote.StartFront(context.Background(), cfg)
		if err == nil {
			_ = f.Stop(context.Background())
		}
		if !errors.Is(err, remote.ErrConfig) {
			t.Errorf("StartFront(%+v): got err %v, want remote.ErrConfig", cfg, err)
		}
	}
}

func cudaSpec64() cuda.BufferSpec { return cuda.BufferSpec{Size: 64, Elem: cuda.I32} }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// TestEncodedBatches: encoded steps reach the host whole once, by id after
// that; a host that could not keep a template (it keeps one here) says so
// and gets it whole again; every step runs once, and the receipts' rows
// (left out when unchanged) are the full rows each time.
func TestEncodedBatches(t *testing.T) {
	_, addr := startHostProcess(t, "--max-templates", "1")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	c := setUp(t, f, "tenant")
	one, err := f.Encode(c.step(t, 1))
	if err != nil {
		t.Fatalf("Encode: got err %v, want nil", err)
	}
	three, err := f.Encode(c.step(t, 3))
	if err != nil {
		t.Fatalf("Encode: got err %v, want nil", err)
	}
	want := int32(0)
	for i := range 20 {
		e, n := one, 1
		if i%2 == 1 {
			e, n = three, 3
		}
		p, err := f.SubmitEncoded(context.Background(), "tenant", e)
		if err != nil {
			t.Fatalf("SubmitEncoded %d: got err %v, want nil", i, err)
		}
		r, err := p.Result()
		if err != nil {
			t.Fatalf("step %d: got err %v, want nil", i, err)
		}
		if len(r.Attribution.Rows) != n {
			t.Fatalf("step %d: got %d rows, want %d", i, len(r.Attribution.Rows), n)
		}
		want += int32(n)
	}
	if got := c.value(t, f); got != want {
		t.Fatalf("counter: got %d, want %d (every step once)", got, want)
	}
	if _, err := f.SubmitEncoded(context.Background(), "tenant", nil); !errors.Is(err, remote.ErrConfig) {
		t.Fatalf("SubmitEncoded(nil): got err %v, want remote.ErrConfig", err)
	}
}
