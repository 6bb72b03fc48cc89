package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

func janitorRig(t *testing.T, idle time.Duration) (*Scheduler, *sim.Device) {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Start(context.Background(), Config{Devices: []cuda.Device{dev}, TenantIdle: idle})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = s.Stop(context.Background())
		_ = dev.Close()
	})
	return s, dev
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestJanitorForgetsIdleTenants: one-shot tenants leave nothing behind
// once idle; a tenant that owns a buffer, or was struck, is kept.
func TestJanitorForgetsIdleTenants(t *testing.T) {
	s, dev := janitorRig(t, 20*time.Millisecond)
	buf, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatal(err)
	}
	zero, _ := cuda.Zero(buf.Whole())
	batch := lanes.Batch{Entries: []lanes.Entry{{Command: zero, Node: -1}}}
	for i := range 500 {
		if _, err := s.Submit(context.Background(), fmt.Sprintf("one-shot-%d", i), batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Own("owner", buf); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Submit(context.Background(), "owner", batch); err != nil {
		t.Fatal(err)
	}
	if _, err := s.tenant("struck"); err != nil {
		t.Fatal(err)
	}
	s.strike("struck")
	eventually(t, "one-shot tenants forgotten", func() bool { return s.Tenants() == 2 })
	for _, name := range []string{"owner", "struck"} {
		if _, ok := s.tenants.Load(name); !ok {
			t.Fatalf("%s was forgotten", name)
		}
	}
}

// TestJanitorDropsFreedOwnership: ownership rows go with their buffers.
func TestJanitorDropsFreedOwnership(t *testing.T) {
	s, dev := janitorRig(t, -1)
	var bufs []cuda.Buffer
	for range 100 {
		b, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	if err := s.Own("t", bufs...); err != nil {
		t.Fatal(err)
	}
	for _, b := range bufs[:90] {
		if err := dev.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	s.sweepOwnership()
	s.ownMu.RLock()
	rows, owners := len(s.owned["t"]), len(s.owners)
	s.ownMu.RUnlock()
	if rows != 10 || owners != 10 {
		t.Fatalf("after freeing 90 of 100 owned buffers: %d rows, %d owners", rows, owners)
	}
	for _, b := range bufs[90:] {
		_ = dev.Free(b)
	}
	s.sweepOwnership()
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	if len(s.owned) != 0 || len(s.owners) != 0 {
		t.Fatalf("after freeing every owned buffer: %d tenants, %d owners", len(s.owned), len(s.owners))
	}
}
