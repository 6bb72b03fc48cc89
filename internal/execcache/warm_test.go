package execcache_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/cachetest"
	discovery "github.com/lanesched/lanes/internal/discovery"

	execcache "github.com/lanesched/lanes/internal/execcache"
)

// Recipes lists what a cache kept, most replayed first, and Warm captures
// them into another cache on another stream of the device: their owners,
// keys and hits kept, a recipe beyond the room skipped as no_room, one
// past its deadline as out_of_time; the warmed cache replays them as
// hits, timed by its clock.
func TestWarmCarriesRecipesIntoAFreshCache(t *testing.T) {
	r := cachetest.New(t, 4)
	if _, err := r.Cache.Configure(8); err != nil {
		t.Fatal(err)
	}
	segs := [][]discovery.Command{r.Segment(0, 1), r.Segment(1, 2), r.Segment(2, 3)}
	for i, seg := range segs {
		r.Owner = []string{"a", "b", "c"}[i]
		for range 3 - i { // a's replayed most
			r.Run(seg, true)
		}
	}
	recipes := r.Cache.Recipes()
	if len(recipes) != 3 || recipes[0].Owner != "a" || recipes[2].Owner != "c" || recipes[0].Hits < recipes[1].Hits {
		t.Fatalf("Recipes: got %d (%+v), want 3, a's first", len(recipes), recipes)
	}
	s2, err := backend.Must(r.Dev).NewStream()
	if err != nil {
		t.Fatal(err)
	}
	warm := execcache.New()
	if _, err := warm.Configure(2); err != nil {
		t.Fatal(err)
	}
	var clock time.Duration
	warm.SetClock(func() time.Duration { clock += time.Microsecond; return clock })
	rep, err := warm.Warm(s2, recipes, s2.Enqueue, nil)
	if err != nil {
		t.Fatalf("Warm: got %v, want nil", err)
	}
	if rep.Captured != 2 || len(rep.Skipped) != 1 || rep.Skipped[0].Reason != execcache.WarmNoRoom || rep.Skipped[0].Owner != "c" || len(rep.Timings) == 0 {
		t.Fatalf("Warm into room for 2: got %+v, want a and b captured, c skipped no_room, timed", rep)
	}
	if e, ok := warm.Lookup(recipes[0].Key); !ok || e.Owner != "a" || e.Hits != recipes[0].Hits {
		t.Fatalf("the warmed executable of a: got %+v, %v; want a's, its hits kept", e, ok)
	}
	if err := warm.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if _, err := warm.Launch(s2, recipes[1].Key); err != nil {
		t.Fatalf("replaying a warmed recipe: got %v, want nil", err)
	}
	late, err := execcache.New().Warm(s2, recipes, s2.Enqueue, func() bool { return true })
	if err != nil || late.Captured != 0 || len(late.Skipped) != 3 || late.Skipped[0].Reason != execcache.WarmOutOfTime {
		t.Fatalf("Warm out of time: got %+v, %v; want all 3 skipped out_of_time", late, err)
	}
	if got := rep.String(); !strings.Contains(got, "warmed 2") || !strings.Contains(got, "no_room") {
		t.Errorf("WarmReport.String: got %q, want warmed 2 and no_room", got)
	}
}

// EvictOwner evicts one owner's executables and no other's; Disown, once
// sealed, leaves a forgotten owner's executables as no one's, still
// resident for its shape's other tenants.
func TestEvictOwnerAndDisown(t *testing.T) {
	r := cachetest.New(t, 4)
	if _, err := r.Cache.Configure(8); err != nil {
		t.Fatal(err)
	}
	r.Owner = "a"
	mine := r.Segment(0, 1)
	r.Run(mine, true)
	r.Owner = "b"
	theirs := r.Segment(2, 3)
	r.Run(theirs, true)
	if got := r.Cache.EvictOwner("nobody", true); got != nil {
		t.Errorf("EvictOwner of an unknown owner: got %v, want nothing", got)
	}
	if got := r.Cache.EvictOwner("a", true); len(got) != 1 || resident(r, mine) || !resident(r, theirs) {
		t.Fatalf("EvictOwner(a): got %d keys; a resident %v, b resident %v; want a's one gone, b's kept", len(got), resident(r, mine), resident(r, theirs))
	}
	if _, err := r.Cache.Seal(); err != nil {
		t.Fatal(err)
	}
	if n := r.Cache.Disown("b"); n != 1 || !resident(r, theirs) {
		t.Fatalf("Disown(b) once sealed: got %d, resident %v; want 1, still resident", n, resident(r, theirs))
	}
	if n := r.Cache.Disown("b"); n != 0 {
		t.Errorf("Disown(b) again: got %d, want 0", n)
	}
	if err := r.Cache.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// Every reason, disposition, stage and key names itself, and the names
// are the stable ones the docs and metrics use.
func TestNamesAreStable(t *testing.T) {
	seen := map[string]bool{}
	for _, reason := range cache.Reasons() {
		name := reason.String()
		if name == "" || name == "unknown" || seen[name] || strings.ToLower(name) != name {
			t.Errorf("reason %d: got name %q, want a new lower-case name", reason, name)
		}
		seen[name] = true
	}
	if len(seen) < 10 || cache.ReasonNone.String() == "" || cache.Reason(200).String() != "unknown" {
		t.Errorf("Reasons: got %d names, none %q, out of range %q", len(seen), cache.ReasonNone, cache.Reason(200))
	}
	for _, d := range []discovery.Disposition{discovery.DispositionHit, discovery.DispositionCaptured, discovery.DispositionUpdated, discovery.DispositionCaptureRejected, discovery.DispositionQuiescenceDeferred, discovery.DispositionOutsidePreparation} {
		if d.String() == "" {
			t.Errorf("disposition %d has no name", d)
		}
	}
	for _, s := range cache.Stages() {
		if s.String() == "" || s.String() == "unknown" {
			t.Errorf("stage %d has no name", s)
		}
	}
	seg := r0SegmentKey(t)
	if len(seg.String()) != 64 || !strings.HasPrefix(seg.String(), seg.Short()) || len(cache.NewKey("names", "op").U64(7).Finish().String()) != 64 {
		t.Errorf("keys: segment %q, short %q; want 64 hex digits and a 12-digit prefix", seg.String(), seg.Short())
	}
}

// r0SegmentKey is the key of a segment a rig captured.
func r0SegmentKey(t *testing.T) discovery.SegmentKey {
	r := cachetest.New(t, 2)
	if _, err := r.Cache.Configure(8); err != nil {
		t.Fatal(err)
	}
	d, _ := r.Run(r.Segment(0, 1), true)
	return d.Candidates[0].Key
}
