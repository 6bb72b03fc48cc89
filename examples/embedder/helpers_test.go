package embedder_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/embedder"
	"github.com/lanesched/lanes/lanes"
)

// timed reports whether wall-clock latency figures are judged: only where
// scripts/test.sh's timing step asks (LANES_TIMING=1), without the race
// detector, on a machine quiet enough for a ratio of two latencies to
// mean something. Elsewhere they are measured and logged.
var timed = os.Getenv("LANES_TIMING") != "" && !raceOn

// start opens a device with open, starts a scheduler on it with cfg, and
// stops both when the test ends.
func start(t *testing.T, open func() (cuda.Device, error), cfg actors.Config) *embedder.Backend {
	t.Helper()
	dev, err := open()
	if err != nil {
		t.Fatalf("open the device: got err %v, want nil", err)
	}
	cfg.Devices = []cuda.Device{dev}
	s, err := actors.Start(context.Background(), cfg)
	if err != nil {
		_ = dev.Close()
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: got err %v, want nil", err)
		}
		_ = dev.Close()
	})
	return &embedder.Backend{Dev: dev, S: s}
}

// tenant makes a tenant with n elements of state and zeroes its state.
func tenant(t *testing.T, b *embedder.Backend, name string, n int) *embedder.Tenant {
	t.Helper()
	tn, err := b.NewTenant(name, n)
	if err != nil {
		t.Fatalf("NewTenant(%s): got err %v, want nil", name, err)
	}
	reset, err := b.Reset(tn)
	if err != nil {
		t.Fatalf("Reset(%s): got err %v, want nil", name, err)
	}
	if _, err := b.S.Submit(context.Background(), name, reset); err != nil {
		t.Fatalf("reset %s: got err %v, want nil", name, err)
	}
	return tn
}

// inputs is a tenant's deterministic input for step i.
func inputs(seed, i, n int) []float32 {
	in := make([]float32, n)
	for j := range in {
		in[j] = float32((seed*7919+i*104729+j*31)%1000)/997 - 0.5
	}
	return in
}

// serve runs steps of a healthy tenant (until ctx ends) and checks every
// result bit for bit against the Go reference; it returns the number of
// steps served.
func serve(ctx context.Context, t *testing.T, b *embedder.Backend, tn *embedder.Tenant, seed, steps, k int) int {
	t.Helper()
	state := make([]float32, tn.N)
	for i := 0; i < steps; i++ {
		if ctx.Err() != nil {
			return i
		}
		in := inputs(seed, i, tn.N)
		batch, err := b.Step(tn, in, k)
		if err != nil {
			t.Errorf("healthy tenant %s, step %d: Step got err %v, want nil", tn.Name, i, err)
			return i
		}
		r, err := b.S.Submit(context.Background(), tn.Name, batch)
		if err != nil {
			t.Errorf("healthy tenant %s, step %d: got err %v (%+v), want nil", tn.Name, i, err, cuda.Classify(err))
			return i
		}
		if r.Outcome != lanes.OutcomeSucceeded || r.Tenant != tn.Name || r.Lane < 0 {
			t.Errorf("healthy tenant %s, step %d: got receipt %+v, want succeeded, for %s, on a lane", tn.Name, i, r, tn.Name)
			return i
		}
		got, err := b.Result(tn)
		if err != nil {
			t.Errorf("healthy tenant %s, step %d: Result got err %v, want nil", tn.Name, i, err)
			return i
		}
		want := embedder.Reference(state, in, k)
		if !embedder.SameBits(got, want) {
			t.Errorf("healthy tenant %s, step %d: got a result that differs from the reference (first element: got %v, want %v)", tn.Name, i, got[0], want[0])
			return i
		}
		state = want
	}
	return steps
}

// wantRefused checks that err is the caller's error, refused before
// anything ran, and reaches the sentinel.
func wantRefused(t *testing.T, what string, err error, sentinel error) {
	t.Helper()
	c := cuda.Classify(err)
	if err == nil || !c.NotSubmitted || !errors.Is(err, sentinel) {
		t.Errorf("%s: got %v (%+v), want a refusal (not submitted) that is %v", what, err, c, sentinel)
		return
	}
	if c.Blame == cuda.BlameStream || c.Blame == cuda.BlameDevice {
		t.Errorf("%s: got it blamed on the %v (%v), want the caller's blame or none", what, c.Blame, err)
	}
}

// lanesUntouched checks that every lane is healthy and never failed.
func lanesUntouched(t *testing.T, b *embedder.Backend) {
	t.Helper()
	for _, l := range b.S.Lanes() {
		if l.Health != actors.HealthServing || l.Recoveries != 0 || l.Counters.Failures != 0 {
			t.Errorf("lane %d: got %v, %d recoveries, %d failures (cause %v); want untouched: %v, none, none", l.ID, l.Health, l.Recoveries, l.Counters.Failures, l.Cause, actors.HealthServing)
		}
	}
}

// waitAllHealthy waits (bounded) until every lane is healthy again.
func waitAllHealthy(t *testing.T, b *embedder.Backend, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		healthy := true
		for _, l := range b.S.Lanes() {
			healthy = healthy && l.Health == actors.HealthServing
		}
		if healthy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: got lanes %+v, want every lane %v", within, b.S.Lanes(), actors.HealthServing)
		}
		time.Sleep(time.Millisecond)
	}
}

// counter is an I32 counter and a history of its values, for order tests:
// batch i copies the counter into history slot i, then increments it, so
// history[i] == i exactly when the batches ran in order, each seeing the
// previous one's write.
type counter struct {
	tenant  string
	value   cuda.Buffer
	history cuda.Buffer
	host    cuda.HostBuffer
	slots   int
	inc     *cuda.KernelSpec
	backend *embedder.Backend
}

func newCounter(t *testing.T, b *embedder.Backend, name string, slots int) *counter {
	t.Helper()
	c := &counter{tenant: name, slots: slots, backend: b}
	err := b.Do(func() error {
		var err error
		if c.value, err = b.Dev.Alloc(cuda.BufferSpec{Size: 4, Elem: cuda.I32}); err != nil {
			return err
		}
		if c.history, err = b.Dev.Alloc(cuda.BufferSpec{Size: uint64(4 * slots), Elem: cuda.I32}); err != nil {
			return err
		}
		c.host, err = b.Dev.AllocHost(uint64(4 * slots))
		return err
	})
	if err != nil {
		t.Fatalf("counter %s: allocating its buffers got err %v, want nil", name, err)
	}
	if err := b.S.Own(name, c.value, c.history); err != nil {
		t.Fatalf("Own(%s, its counter): got err %v, want nil", name, err)
	}
	if err := b.S.OwnHost(name, c.host); err != nil {
		t.Fatalf("OwnHost(%s, its staging): got err %v, want nil", name, err)
	}
	if c.inc, err = b.Kernel("inc_i32"); err != nil {
		t.Fatalf("Kernel(inc_i32): got err %v, want nil", err)
	}
	zv, _ := cuda.Zero(c.value.Whole())
	zh, _ := cuda.Zero(c.history.Whole())
	if _, err := b.S.Submit(context.Background(), name, lanes.Batch{Entries: []lanes.Entry{
		{Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: zv}, {Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: zh}}}); err != nil {
		t.Fatalf("zeroing counter %s: got err %v, want nil", name, err)
	}
	return c
}

// batch is batch i of the order test.
func (c *counter) batch(t *testing.T, i int) lanes.Batch {
	slot, err := c.history.Region(uint64(4*i), 4)
	if err != nil {
		t.Fatalf("history slot %d: got err %v, want nil", i, err)
	}
	cp, err := cuda.Copy(slot, c.value.Whole())
	if err != nil {
		t.Fatalf("cuda.Copy: got err %v, want nil", err)
	}
	inc, err := cuda.Launch(c.inc, cuda.Linear(1, 32), cuda.BufferArg(c.value.Whole()), cuda.I32Arg(1))
	if err != nil {
		t.Fatalf("cuda.Launch(inc_i32): got err %v, want nil", err)
	}
	return lanes.Batch{Entries: []lanes.Entry{
		{Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Command: cp},
		{Phase: cache.PhaseCompute, Node: 0, Command: inc, Replay: lanes.Replayable(inc, cache.LaunchKey("embedder-order", inc), cache.PlanScope())},
	}}
}

// read stages the history out and returns it.
func (c *counter) read(t *testing.T) []int32 {
	t.Helper()
	out, err := cuda.StageOut(c.host.Whole(), c.history.Whole())
	if err != nil {
		t.Fatalf("cuda.StageOut: got err %v, want nil", err)
	}
	if _, err := c.backend.S.Submit(context.Background(), c.tenant, lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: out}}}); err != nil {
		t.Fatalf("staging the history out: got err %v, want nil", err)
	}
	buf := make([]byte, 4*c.slots)
	if err := c.backend.Do(func() error { return c.backend.Dev.ReadHost(c.host.Whole(), buf) }); err != nil {
		t.Fatalf("ReadHost: got err %v, want nil", err)
	}
	h := make([]int32, c.slots)
	for i := range h {
		h[i] = int32(uint32(buf[4*i]) | uint32(buf[4*i+1])<<8 | uint32(buf[4*i+2])<<16 | uint32(buf[4*i+3])<<24)
	}
	return h
}

// submitInOrder submits batches 0..n-1 of the counter asynchronously, as
// fast as admission allows (retrying on overload, as a client would), and
// waits for all; it returns how many were refused as overloaded on the way.
func (c *counter) submitInOrder(t *testing.T, n int) (overloaded int) {
	t.Helper()
	var pending []lanes.Pending
	for i := 0; i < n; {
		p, err := c.backend.S.SubmitAsync(context.Background(), c.tenant, c.batch(t, i))
		if errors.Is(err, actors.ErrOverloaded) {
			overloaded++
			time.Sleep(20 * time.Microsecond)
			continue
		}
		if err != nil {
			t.Fatalf("SubmitAsync(batch %d): got err %v, want nil or actors.ErrOverloaded", i, err)
		}
		pending = append(pending, p)
		i++
	}
	for i, p := range pending {
		if r, err := p.Result(); err != nil || r.Outcome != lanes.OutcomeSucceeded {
			t.Fatalf("batch %d: got receipt %+v, err %v; want succeeded, no error", i, r, err)
		}
	}
	return overloaded
}

// checkOrder checks history[i] == i for the first n slots.
func checkOrder(t *testing.T, h []int32, n int) {
	t.Helper()
	for i := range n {
		if h[i] != int32(i) {
			t.Fatalf("batch %d: got the counter at %d, want %d: the tenant's batches ran out of order (history %v)", i, h[i], i, h[:min(n, 32)])
		}
	}
}
