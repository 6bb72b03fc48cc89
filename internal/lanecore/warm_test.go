package lanecore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	lanecore "github.com/lanesched/lanes/internal/lanecore"

	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/lanes"
)

// warmRig is a lane that replayed three segments (counters 0, 1 and 2),
// the first most, and a second lane on the same device, as a rebuild
// makes it, with a clock.
func warmRig(t *testing.T, capacity int) (*rig, *lanecore.Lane, []lanes.Batch) {
	t.Helper()
	r := newRig(t, sim.ClockZeroCost, 4)
	if _, err := r.lane.Configure(8); err != nil {
		t.Fatalf("Configure(8): got err %v, want nil", err)
	}
	batches := []lanes.Batch{
		{Entries: []lanes.Entry{r.inc(0, 0), r.inc(0, 1)}},
		{Entries: []lanes.Entry{r.inc(1, 0)}},
		{Entries: []lanes.Entry{r.inc(2, 0), r.inc(2, 1), r.inc(2, 2)}},
	}
	for i, times := range []int{5, 3, 2} {
		for range times {
			r.submit(batches[i])
			if _, _, err := r.lane.Synchronize(); err != nil { // quiescent: the next miss is captured
				t.Fatalf("Synchronize: got err %v, want nil", err)
			}
		}
	}
	st, err := backend.Must(r.dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	var clock time.Duration
	next, err := lanecore.New(lanecore.Config{ID: 2, Device: backend.Must(r.dev), Stream: st, Now: func() time.Duration { clock += time.Millisecond; return clock }})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	if _, err := next.Configure(capacity); err != nil {
		t.Fatalf("Configure(%d): got err %v, want nil", capacity, err)
	}
	return r, next, batches
}

// TestWarmCapturesWhatWasReplayed: a lane made in place of another
// captures its recipes, most replayed first, before any traffic: its first
// steps replay without a capture, and write what the predecessor's did.
func TestWarmCapturesWhatWasReplayed(t *testing.T) {
	r, next, batches := warmRig(t, 8)
	recipes := r.lane.Recipes()
	if len(recipes) != 3 || recipes[0].Hits < recipes[1].Hits || recipes[1].Hits < recipes[2].Hits {
		t.Fatalf("Recipes: got %d, hits %v; want 3, most replayed first", len(recipes), hitsOf(recipes))
	}
	rep, err := next.Warm(recipes, time.Second)
	if err != nil || rep.Captured != 3 || len(rep.Skipped) != 0 {
		t.Fatalf("Warm: got %v, %v; want all 3 captured", rep, err)
	}
	if len(rep.Timings) != 9 { // a capture, an instantiation and an upload each
		t.Fatalf("Warm timings: got %d, want 9", len(rep.Timings))
	}
	before := [3]int32{r.count(0), r.count(1), r.count(2)}
	for _, b := range batches {
		if _, err := next.Submit(b); err != nil {
			t.Fatalf("Submit on the warmed lane: got err %v, want nil", err)
		}
	}
	if _, _, err := next.Synchronize(); err != nil {
		t.Fatalf("Synchronize: got err %v, want nil", err)
	}
	c := next.Counters()
	if c.Captured != 0 || c.Hits != 3 || c.ReplayedSegments != 3 || c.Warmed != 3 {
		t.Fatalf("the warmed lane's counters: got %+v, want 3 hits and replays, no capture, 3 warmed", c)
	}
	for i, want := range []int32{2, 1, 3} {
		if got := r.count(i) - before[i]; got != want {
			t.Fatalf("counter %d moved by %d, want %d", i, got, want)
		}
	}
}

// TestWarmSkips: what Warm does not capture has its reason: out of time,
// no room, a freed buffer; a lane not ready is refused.
func TestWarmSkips(t *testing.T) {
	r, next, _ := warmRig(t, 2)
	recipes := r.lane.Recipes()
	rep, err := next.Warm(recipes, 0)
	if err != nil || rep.Captured != 0 || len(rep.Skipped) != 3 || rep.Skipped[0].Reason != execcache.WarmOutOfTime {
		t.Fatalf("Warm with no time: got %v, %v; want all 3 skipped out_of_time", rep, err)
	}
	rep, err = next.Warm(recipes, time.Second)
	if err != nil || rep.Captured != 2 || len(rep.Skipped) != 1 || rep.Skipped[0].Reason != execcache.WarmNoRoom || rep.Skipped[0].Key != recipes[2].Key {
		t.Fatalf("Warm into a cache of 2: got %v, %v; want the 2 most replayed captured, the last no_room", rep, err)
	}
	if rep, _ = next.Warm(recipes[:1], time.Second); len(rep.Skipped) != 1 || rep.Skipped[0].Reason != execcache.WarmResident {
		t.Fatalf("Warm of a resident recipe: got %v, want it skipped as resident", rep)
	}
	// A recipe naming a freed buffer.
	st, err := backend.Must(r.dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	third, err := lanecore.New(lanecore.Config{ID: 3, Device: backend.Must(r.dev), Stream: st})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	if _, err := third.Configure(8); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	if err := r.dev.Free(r.bufs[2]); err != nil {
		t.Fatalf("Free: got err %v, want nil", err)
	}
	rep, err = third.Warm(recipes, time.Second)
	if err != nil || rep.Captured != 2 || len(rep.Skipped) != 1 || rep.Skipped[0].Reason != execcache.WarmStaleBuffer ||
		!errors.Is(rep.Skipped[0].Err, cuda.ErrForeignHandle) && !errors.Is(rep.Skipped[0].Err, cuda.ErrStaleHandle) {
		t.Fatalf("Warm with a freed buffer: got %v, %v (%+v); want 2 captured, 1 stale_buffer", rep, err, rep.Skipped)
	}
}

func hitsOf(rs []execcache.Recipe) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.Hits)
	}
	return out
}
