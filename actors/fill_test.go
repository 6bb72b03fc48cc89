package actors_test

import (
	"context"
	"errors"
	"strings"
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
	small := []cuda.Buffer{alloc(256), alloc(256), alloc(256), alloc(512)}
	fills := []actors.SharedBytes{{Buffer: weights, Bytes: host}}
	for _, b := range small {
		fills = append(fills, actors.SharedBytes{Buffer: b, Bytes: host[:b.Size]})
	}
	fill, err := s.FillShared(ctx, fills...)
	if err != nil {
		t.Fatalf("FillShared: got err %v, want nil", err)
	}
	// 4000 bytes in pieces of 1024, then 256 x 3 + 512 packed: 6 batches.
	if fill.Bytes != 4000+1280 || fill.Batches != 6 || fill.Lane < 0 || fill.DeviceTime <= 0 || fill.Took <= 0 {
		t.Fatalf("FillShared: got %+v, want 5280 bytes in 6 batches of at most 1024 on a lane, timed", fill)
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
	if _, err := s.FillShared(ctx, actors.SharedBytes{Buffer: weights, Bytes: host}); !errors.Is(err, actors.ErrNotYours) || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("filling a shared buffer again: got err %v, want a not-submitted actors.ErrNotYours", err)
	}
	other := alloc(64)
	fresh := actors.SharedBytes{Buffer: other, Bytes: make([]byte, 64)}
	if _, err := s.FillShared(ctx, fresh, actors.SharedBytes{Buffer: mine, Bytes: make([]byte, mine.Size)}); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("filling a tenant's buffer beside a fresh one: got err %v, want actors.ErrNotYours", err)
	}
	for what, fills := range map[string][]actors.SharedBytes{
		"nothing":             nil,
		"64 bytes with 60":    {{Buffer: other, Bytes: make([]byte, 60)}},
		"one buffer twice":    {fresh, fresh},
		"a fresh and a short": {fresh, {Buffer: alloc(64), Bytes: nil}},
	} {
		if _, err := s.FillShared(ctx, fills...); !errors.Is(err, actors.ErrInvalidArgument) || !cuda.Classify(err).NotSubmitted {
			t.Fatalf("filling %s: got err %v, want a not-submitted actors.ErrInvalidArgument", what, err)
		}
	}
	// None of the refused fills reserved the fresh buffer: a tenant owns it.
	if err := s.Own("reader", other); err != nil {
		t.Fatalf("Own of a buffer whose fills were refused: got err %v, want nil (a refused fill leaves it no one's)", err)
	}
	gone := alloc(64)
	if err := dev.Free(gone); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	if _, err := s.FillShared(ctx, actors.SharedBytes{Buffer: gone, Bytes: make([]byte, 64)}); !errors.Is(err, cuda.ErrStaleHandle) {
		t.Fatalf("filling a freed buffer: got err %v, want cuda.ErrStaleHandle", err)
	}
	if _, err := s.Submit(ctx, "lanes:fill-shared#9", lanes.Batch{}); !errors.Is(err, actors.ErrInvalidTenant) {
		t.Fatalf("a tenant named like the scheduler's own work: got err %v, want actors.ErrInvalidTenant", err)
	}
	if n := s.Tenants(); n != 1 {
		t.Fatalf("tenants after the fills: got %d, want 1 (the reader; a fill leaves none behind)", n)
	}
}

// TestFillSharedAcrossDevicesAndRefusals: buffers of two devices fill in
// one call (each device's on a lane of it); elements larger than a batch
// may carry, and a context already done, are refused before anything is
// uploaded, not submitted, on no lane.
func TestFillSharedAcrossDevicesAndRefusals(t *testing.T) {
	d1 := newDevice(t, sim.Config{Clock: sim.ClockRealTime}, 0)
	d2 := newDevice(t, sim.Config{Clock: sim.ClockRealTime}, 0)
	s := start(t, actors.Config{Devices: []cuda.Device{d1, d2}, MaxBatchBytes: 4})
	ctx := context.Background()
	var fills []actors.SharedBytes
	for _, d := range []*device{d1, d2, d1} {
		b, err := d.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.F32})
		if err != nil {
			t.Fatalf("Alloc: got err %v, want nil", err)
		}
		fills = append(fills, actors.SharedBytes{Buffer: b, Bytes: []byte("0123456789abcdef")})
	}
	fill, err := s.FillShared(ctx, fills...)
	if err != nil || fill.Bytes != 48 || fill.Batches != 12 {
		t.Fatalf("FillShared over two devices: got %+v, err %v; want 48 bytes in 12 batches", fill, err)
	}
	wide, err := d1.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.F64})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	fill, err = s.FillShared(ctx, actors.SharedBytes{Buffer: wide, Bytes: make([]byte, 16)})
	if !errors.Is(err, actors.ErrInvalidArgument) || !cuda.Classify(err).NotSubmitted || fill.Lane != -1 {
		t.Fatalf("f64 elements with MaxBatchBytes 4: got %+v, err %v; want a not-submitted actors.ErrInvalidArgument on no lane", fill, err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	narrow, err := d1.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.F32})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	fill, err = s.FillShared(done, actors.SharedBytes{Buffer: narrow, Bytes: make([]byte, 16)})
	if !errors.Is(err, context.Canceled) || !cuda.Classify(err).NotSubmitted || fill.Lane != -1 || strings.Contains(err.Error(), "undefined") {
		t.Fatalf("a canceled fill: got %+v, err %v; want a not-submitted context.Canceled on no lane, nothing undefined", fill, err)
	}
}
