package embedder_test

// The embedder suite, on whichever device the build opens (the simulated
// H200, or with -tags cuda the GPU): no test here injects a fault.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/embedder"
	"github.com/lanesched/lanes/lanes"
)

// TestBadCallersBesideHealthyTenants: careless and malicious tenants throw
// every kind of bad request while healthy tenants are served; each bad
// request is refused as the caller's error, nothing of it runs, every
// healthy result is right bit for bit, and no lane's health changes.
func TestBadCallersBesideHealthyTenants(t *testing.T) {
	b := start(t, embedder.OpenDevice, actors.Config{LanesPerDevice: 4})
	const n, k, steps = 256, 4, 40
	var healthy []*embedder.Tenant
	for i := range 4 {
		healthy = append(healthy, tenant(t, b, "healthy-"+string(rune('a'+i)), n))
	}
	bad := tenant(t, b, "careless", n)
	other, err := embedder.OpenDevice()
	if err != nil {
		t.Fatalf("open another device: got err %v, want nil", err)
	}
	defer other.Close()
	var foreign cuda.Buffer
	if err := (&embedder.Backend{Dev: other}).Do(func() error {
		foreign, err = other.Alloc(cuda.BufferSpec{Size: 4 * n, Elem: cuda.F32})
		return err
	}); err != nil {
		t.Fatalf("Alloc on the other device: got err %v, want nil", err)
	}

	var wg sync.WaitGroup
	served := make([]int, len(healthy))
	for i, tn := range healthy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			served[i] = serve(context.Background(), t, b, tn, i, steps, k)
		}()
	}

	ctx := context.Background()
	zero := func(r cuda.Region) lanes.Batch {
		// Built by hand, as a malicious caller would, past the checking
		// constructors.
		return lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: cuda.Command{Kind: cuda.KindZero, Dst: r}}}}
	}
	var freed cuda.Buffer
	if err := b.Do(func() error {
		if freed, err = b.Dev.Alloc(cuda.BufferSpec{Size: 4 * n, Elem: cuda.F32}); err != nil {
			return err
		}
		return b.Dev.Free(freed)
	}); err != nil {
		t.Fatalf("Alloc and Free: got err %v, want nil", err)
	}
	forged := bad.State
	forged.Size *= 64
	victim := healthy[0]
	step, err := b.Step(bad, inputs(9, 0, n), k)
	if err != nil {
		t.Fatalf("Step(careless): got err %v, want nil", err)
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	cases := []struct {
		what     string
		tenant   string
		batch    lanes.Batch
		ctx      context.Context
		sentinel error
	}{
		{"a freed buffer", "careless", zero(freed.Whole()), ctx, cuda.ErrStaleHandle},
		{"a buffer with an enlarged size", "careless", zero(forged.Whole()), ctx, cuda.ErrStaleHandle},
		{"a buffer of another device", "careless", zero(foreign.Whole()), ctx, cuda.ErrForeignHandle},
		{"a region past its buffer", "careless", zero(cuda.Region{Buffer: bad.State, Offset: 4 * n, Length: 4}), ctx, cuda.ErrOutOfBounds},
		{"another tenant's buffer", "careless", zero(victim.State.Whole()), ctx, actors.ErrNotYours},
		{"a patch into another tenant's buffer", "careless", withPatch(step, lanes.Patch{Dst: victim.State.Whole(), Bytes: make([]byte, 4*n)}), ctx, actors.ErrNotYours},
		{"another tenant's buffer retained", "careless", withRetain(step, victim.State), ctx, actors.ErrNotYours},
		{"another tenant's host staging", "careless", withStageOut(step, victim.Out, bad.State), ctx, actors.ErrNotYours},
		{"an unknown kernel", "careless", lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: cuda.Command{Kind: cuda.KindLaunch, Kernel: "no_such", Config: cuda.Linear(1, 1)}}}}, ctx, cuda.ErrUnknownKernel},
		{"an empty batch", "careless", lanes.Batch{}, ctx, lanes.ErrInvalidBatch},
		{"a canceled context", "careless", step, canceled, context.Canceled},
		{"an empty tenant name", "", step, ctx, actors.ErrInvalidTenant},
		{"a 1 MiB tenant name", strings.Repeat("x", 1<<20), step, ctx, actors.ErrInvalidTenant},
		{"a tenant name with a NUL", "care\x00less", step, ctx, actors.ErrInvalidTenant},
		{"a tenant name not UTF-8", "care\xffless", step, ctx, actors.ErrInvalidTenant},
	}
	before, err := b.Result(bad)
	if err != nil {
		t.Fatalf("Result(careless): got err %v, want nil", err)
	}
	for range 3 { // again and again, as a careless client retries
		for _, c := range cases {
			_, err := b.S.Submit(c.ctx, c.tenant, c.batch)
			wantRefused(t, c.what, err, c.sentinel)
		}
	}
	// The device calls a careless caller makes directly.
	if err := b.Do(func() error {
		for _, size := range []uint64{1<<64 - 4, 1 << 63, 1<<64 - 256} {
			if _, err := b.Dev.Alloc(cuda.BufferSpec{Size: size, Elem: cuda.I32}); !errors.Is(err, cuda.ErrOutOfMemory) {
				t.Errorf("Alloc(%d bytes): got err %v, want cuda.ErrOutOfMemory", size, err)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("Do: got err %v, want nil", err)
	}
	for i, own := range []error{b.S.Own("", bad.State), b.S.Own("intruder", victim.State), b.S.OwnHost("intruder", victim.Out)} {
		if !errors.Is(own, actors.ErrInvalidTenant) && !errors.Is(own, actors.ErrNotYours) {
			t.Errorf("taking what is not yours (call %d of 3): got err %v, want actors.ErrInvalidTenant or actors.ErrNotYours", i+1, own)
		}
	}
	wg.Wait()
	for i, got := range served {
		if got != steps {
			t.Fatalf("healthy tenant %d: got %d steps served, want %d", i, got, steps)
		}
	}
	after, err := b.Result(bad)
	if err != nil {
		t.Fatalf("Result(careless) after the refusals: got err %v, want nil", err)
	}
	if !embedder.SameBits(after, before) {
		t.Fatal("the careless tenant's results after its refused batches: got changed, want unchanged (nothing refused runs)")
	}
	lanesUntouched(t, b)
	t.Logf("%d bad requests refused as the caller's, %d healthy steps served bit for bit, %d lanes untouched", 3*len(cases)+6, len(healthy)*steps, len(b.S.Lanes()))
}

func withPatch(b lanes.Batch, p lanes.Patch) lanes.Batch {
	b.Patches = []lanes.Patch{p}
	return b
}

func withRetain(b lanes.Batch, bufs ...cuda.Buffer) lanes.Batch {
	b.Retain = bufs
	return b
}

func withStageOut(b lanes.Batch, host cuda.HostBuffer, src cuda.Buffer) lanes.Batch {
	out := cuda.Command{Kind: cuda.KindStageOut, Src: src.Whole(), Staging: host.Whole()}
	b.Entries = append(append([]lanes.Entry(nil), b.Entries...), lanes.Entry{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: out})
	return b
}

// TestOrderAtTheAdmissionLimit: a tenant submits as fast as admission
// allows while a noisy tenant keeps the lanes near their limit; its
// batches run in the order they were accepted, each seeing the previous
// one's write, over many trials.
func TestOrderAtTheAdmissionLimit(t *testing.T) {
	b := start(t, embedder.OpenDevice, actors.Config{LanesPerDevice: 2, MaxInFlightPerLane: 4})
	const trials, batches = 5, 200
	noise := tenant(t, b, "noisy", 4096)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		step, _ := b.Step(noise, inputs(1, 0, noise.N), 8)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if p, err := b.S.SubmitAsync(context.Background(), "noisy", step); err == nil {
				_, _ = p.Result()
			}
		}
	}()
	overloaded := 0
	for trial := range trials {
		c := newCounter(t, b, "ordered-"+string(rune('a'+trial)), batches)
		overloaded += c.submitInOrder(t, batches)
		checkOrder(t, c.read(t), batches)
	}
	close(stop)
	wg.Wait()
	if overloaded == 0 {
		t.Logf("note: admission never refused the ordered tenant (the device kept up)")
	}
	t.Logf("%d trials of %d batches in order; %d refusals as overloaded along the way", trials, batches, overloaded)
}

// TestCancellation: a context done before Submit is refused and the batch
// never runs; a context that ends while the submission is in flight
// detaches the caller, and the submission still ends exactly once.
func TestCancellation(t *testing.T) {
	b := start(t, embedder.OpenDevice, actors.Config{LanesPerDevice: 2})
	c := newCounter(t, b, "t", 64)
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for i := range 200 {
		_, err := b.S.Submit(canceled, "t", c.batch(t, 0))
		wantRefused(t, "submit with a canceled context", err, context.Canceled)
		if _, err := b.S.SubmitAsync(canceled, "t", c.batch(t, 0)); !errors.Is(err, context.Canceled) || !cuda.Classify(err).NotSubmitted {
			t.Fatalf("attempt %d: SubmitAsync with a canceled context: got err %v (not submitted %v), want context.Canceled, not submitted", i, err, cuda.Classify(err).NotSubmitted)
		}
	}
	if h := c.read(t); h[0] != 0 {
		t.Fatalf("history after 400 submissions with a canceled context: got slot 0 = %d (history %v), want 0: none ran", h[0], h[:4])
	}
	detached, ended := 0, 0
	for i := range 50 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(i)*time.Microsecond)
		r, err := b.S.Submit(ctx, "t", c.batch(t, 1+i))
		cancel()
		var de *actors.DetachedError
		switch {
		case errors.As(err, &de):
			detached++
			if !errors.Is(err, context.DeadlineExceeded) || cuda.Classify(err).NotSubmitted {
				t.Fatalf("submission %d, detached: got err %v (%+v), want context.DeadlineExceeded, not classified not submitted (its fate is open)", i, err, cuda.Classify(err))
			}
			<-de.Pending.Done()
			if _, err := de.Pending.Result(); err == nil || cuda.Classify(err).NotSubmitted || errors.Is(err, context.DeadlineExceeded) {
				ended++ // it ran, or was refused before it could: either way it ended once
			}
		case err == nil && r.Outcome == lanes.OutcomeSucceeded:
			ended++
		default:
			wantRefused(t, "an expiring context", err, context.DeadlineExceeded)
			ended++
		}
	}
	if ended != 50 {
		t.Fatalf("submissions with expiring contexts: got %d of 50 ended, want 50", ended)
	}
	t.Logf("200 canceled submissions never ran; 50 with expiring contexts each ended once (%d after their caller stopped waiting)", detached)
}

// TestStopAnswersEveryone: after Stop every call answers ErrStopped at
// once, a second Stop returns, and Done is closed.
func TestStopAnswersEveryone(t *testing.T) {
	b := start(t, embedder.OpenDevice, actors.Config{LanesPerDevice: 2})
	tn := tenant(t, b, "t", 64)
	serve(context.Background(), t, b, tn, 0, 5, 2)
	ctx := context.Background()
	if err := b.S.Stop(ctx); err != nil {
		t.Fatalf("Stop: got err %v, want nil", err)
	}
	select {
	case <-b.S.Done():
	default:
		t.Fatal("Done after Stop returned: got open, want closed")
	}
	step, _ := b.Step(tn, inputs(0, 0, 64), 2)
	t0 := time.Now()
	calls := map[string]error{}
	_, calls["submit"] = b.S.Submit(ctx, "t", step)
	_, calls["seal"] = b.S.Seal(ctx, 0)
	_, calls["configure"] = b.S.Configure(ctx, 0, 8)
	_, calls["trim"] = b.S.Trim(ctx, 1)
	_, calls["catalog"] = b.S.Catalog(ctx, 1)
	calls["synchronize"] = b.S.Synchronize(ctx, 0)
	calls["stop again"] = b.S.Stop(ctx)
	for name, err := range calls {
		if name == "stop again" {
			if err != nil {
				t.Errorf("second Stop: got err %v, want nil", err)
			}
			continue
		}
		if !errors.Is(err, actors.ErrStopped) {
			t.Errorf("%s after Stop: got err %v, want actors.ErrStopped", name, err)
		}
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("the calls after Stop: got %v, want at most 1s (answered at once)", d)
	}
}

// TestTenantLifecycle: receipts say where they ran; Forget refuses a busy
// tenant, then releases what the scheduler kept for it.
func TestTenantLifecycle(t *testing.T) {
	b := start(t, embedder.OpenDevice, actors.Config{LanesPerDevice: 2})
	tn := tenant(t, b, "short-lived", 64)
	step, _ := b.Step(tn, inputs(0, 0, 64), 2)
	r, err := b.S.Submit(context.Background(), tn.Name, step)
	if err != nil || r.Tenant != tn.Name || r.Lane < 0 || r.Lane >= len(b.S.Lanes()) {
		t.Fatalf("Submit(%s): got receipt %+v, err %v; want no error, a receipt naming %s and a lane in [0, %d)", tn.Name, r, err, tn.Name, len(b.S.Lanes()))
	}
	busy := false
	for i := range 100 {
		p, err := b.S.SubmitAsync(context.Background(), tn.Name, step)
		if err != nil {
			t.Fatalf("SubmitAsync %d: got err %v, want nil", i, err)
		}
		if err := b.S.Forget(tn.Name); err != nil {
			if !errors.Is(err, actors.ErrTenantBusy) || !cuda.Classify(err).Retryable {
				t.Fatalf("Forget(a busy tenant): got err %v (retryable %v), want actors.ErrTenantBusy, retryable", err, cuda.Classify(err).Retryable)
			}
			busy = true
		}
		_, _ = p.Result()
		if busy {
			break
		}
	}
	before := b.S.Tenants()
	if err := b.S.Forget(tn.Name); err != nil {
		t.Fatalf("Forget(an idle tenant): got err %v, want nil", err)
	}
	if b.S.Tenants() != before-1 && before > 0 {
		t.Fatalf("after forgetting one of %d tenants: got %d, want %d", before, b.S.Tenants(), before-1)
	}
	if err := b.S.Own("heir", tn.State); err != nil {
		t.Fatalf("Own(heir, the forgotten tenant's buffer): got err %v, want nil (no one owns it now)", err)
	}
	if err := b.S.Forget(""); !errors.Is(err, actors.ErrInvalidTenant) {
		t.Fatalf("Forget(the empty name): got err %v, want actors.ErrInvalidTenant", err)
	}
	if !busy {
		t.Log("note: Forget never caught the tenant busy (the device was faster)")
	}
}
