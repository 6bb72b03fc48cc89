package actors_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// TestFillShared: a buffer filled through the scheduler holds the bytes,
// in as many uploads as MaxBatchBytes asks, reported, and is then shared:
// tenants read it and none writes it; what cannot be filled is refused
// before anything runs.
func TestFillShared(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime}, 0)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2, MaxBatchBytes: 1024, StrictOwnership: true})
	ctx := context.Background()
	alloc := func(n uint64) cuda.Buffer {
		b, err := dev.Alloc(cuda.BufferSpec{Size: n, Elem: cuda.F32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		return b
	}
	weights := alloc(4000)
	host := make([]byte, weights.Size)
	for i := range host {
		host[i] = byte(i * 7)
	}
	fill, err := s.FillShared(ctx, weights, host)
	if err != nil {
		t.Fatalf("FillShared: got err %v, want nil", err)
	}
	if fill.Bytes != 4000 || fill.Batches != 4 || fill.Lane < 0 || fill.DeviceTime <= 0 || fill.Took <= 0 {
		t.Fatalf("FillShared: got %+v, want 4000 bytes in 4 batches of at most 1024 on a lane, timed", fill)
	}
	st, err := dev.NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	got := make([]byte, weights.Size)
	if err := st.Readback(weights.Whole(), got); err != nil || string(got) != string(host) {
		t.Fatalf("the filled buffer: got err %v, equal %v; want the bytes filled", err, string(got) == string(host))
	}

	// Shared: a tenant reads it, and writing it is refused.
	mine := alloc(4000)
	if err := s.Own("reader", mine); err != nil {
		t.Fatalf("Own: got err %v, want nil", err)
	}
	cp, _ := cuda.Copy(mine.Whole(), weights.Whole())
	if _, err := s.Submit(ctx, "reader", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, cp)}}); err != nil {
		t.Fatalf("a tenant reading the shared weights: got err %v, want nil", err)
	}
	zero, _ := cuda.Zero(weights.Whole())
	if _, err := s.Submit(ctx, "reader", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, zero)}}); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("a tenant writing the shared weights: got err %v, want actors.ErrNotYours", err)
	}

	// Refusals, none of which runs anything.
	if _, err := s.FillShared(ctx, weights, host); !errors.Is(err, actors.ErrNotYours) || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("filling a shared buffer again: got err %v, want a not-submitted actors.ErrNotYours", err)
	}
	if _, err := s.FillShared(ctx, mine, make([]byte, mine.Size)); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("filling a tenant's buffer: got err %v, want actors.ErrNotYours", err)
	}
	other := alloc(64)
	if _, err := s.FillShared(ctx, other, make([]byte, 60)); !errors.Is(err, actors.ErrInvalidArgument) || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("filling 64 bytes with 60: got err %v, want a not-submitted actors.ErrInvalidArgument", err)
	}
	if err := dev.Free(other); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	if _, err := s.FillShared(ctx, other, make([]byte, 64)); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Fatalf("filling a freed buffer: got err %v, want cuda.ErrStaleHandle", err)
	}
	if _, err := s.Submit(ctx, "lanes:fill-shared#9", lanes.Batch{}); !errors.Is(err, actors.ErrInvalidTenant) {
		t.Fatalf("a tenant named like the scheduler's own work: got err %v, want actors.ErrInvalidTenant", err)
	}
	if n := s.Tenants(); n != 1 {
		t.Fatalf("tenants after the fills: got %d, want 1 (the reader; a fill leaves none behind)", n)
	}
}
