package lanecore

import (
	"slices"
	"testing"

	lanes "github.com/lanesched/lanes/lanes"
)

// TestInternerSharesOnlyEqualSlices: equal slices get one shared copy; a
// slice that collides with another's key still gets an equal slice back;
// the caller's scratch stays its own; the interner forgets when full.
func TestInternerSharesOnlyEqualSlices(t *testing.T) {
	var in interner[lanes.Row]
	h := newAttributionHash()
	scratch := []lanes.Row{{Index: 0, Op: "launch:inc", Dispatches: 1}, {Index: 1, Op: "copy", Transfers: 1}}
	first := in.intern(h.rows(scratch), scratch)
	scratch[0].Op = "launch:other" // the caller reuses its scratch
	if first[0].Op != "launch:inc" {
		t.Fatalf("interned copy after the caller changed its scratch: got Op %q, want %q", first[0].Op, "launch:inc")
	}
	scratch[0].Op = "launch:inc"
	if again := in.intern(h.rows(scratch), scratch); &again[0] != &first[0] {
		t.Fatalf("interning an equal slice: got a second copy at %p, want the first at %p", &again[0], &first[0])
	}
	other := []lanes.Row{{Index: 0, Op: "zero", Transfers: 1}}
	if got := in.intern(h.rows(scratch), other); !slices.Equal(got, other) { // same key, different rows
		t.Fatalf("a colliding slice: got %+v, want %+v", got, other)
	}
	if got := in.intern(1, nil); got != nil {
		t.Fatalf("intern(nil): got %+v (non-nil), want nil", got)
	}
	for i := range internLimit + 1 {
		in.intern(uint64(i), []lanes.Row{{Index: i}})
	}
	if len(in.known) > internLimit {
		t.Fatalf("got %d slices held, want at most the limit %d", len(in.known), internLimit)
	}
	if h.rows(scratch) == h.rows(other) {
		t.Fatalf("hashes of %+v and %+v: got both %#x, want different", scratch, other, h.rows(other))
	}
}
