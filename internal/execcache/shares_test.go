package execcache_test

import (
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/cachetest"
	discovery "github.com/lanesched/lanes/internal/discovery"
)

// upload is a replayable plan-scoped upload of n bytes into counter buf,
// keyed by its bytes' first value.
func upload(t *testing.T, r *cachetest.Rig, buf, n int, tag byte) discovery.Command {
	t.Helper()
	data := make([]byte, n)
	data[0] = tag
	dst, err := r.Bufs[buf].Region(0, uint64(n))
	if err != nil {
		t.Fatalf("Region(0, %d) of counter %d: got err %v, want nil", n, buf, err)
	}
	c, err := cuda.Upload(dst, data)
	if err != nil {
		t.Fatalf("cuda.Upload of %d bytes: got err %v, want nil", n, err)
	}
	return discovery.Command{Cmd: c, Phase: cache.PhaseCompute, Node: 0, Key: cache.NewKey("shares", "upload").Bytes(data).Finish(), HasKey: true, Scopes: []cache.Scope{cache.PlanScope()}}
}

func resident(r *cachetest.Rig, cmds []discovery.Command) bool {
	d, _ := discovery.Discover(cmds, nil)
	for _, c := range d.Candidates {
		if _, ok := r.Cache.Lookup(c.Key); !ok {
			return false
		}
	}
	return len(d.Candidates) > 0
}

// TestChurnEvictsOnlyTheChurner: a tenant that keeps capturing new keys
// evicts its own executables, never a neighbour's within its share.
func TestChurnEvictsOnlyTheChurner(t *testing.T) {
	r := cachetest.New(t, 8)
	if _, err := r.Cache.Configure(4); err != nil {
		t.Fatalf("Configure(4): got err %v, want nil", err)
	}
	r.Owner = "steady"
	mine := [][]discovery.Command{r.Segment(0, 1), r.Segment(1, 0)}
	for _, seg := range mine {
		r.Run(seg, true)
	}
	r.Owner = "churn"
	for i := range 8 {
		for j := range 8 {
			r.Run(r.Segment(i, j, 2), true)
		}
	}
	for i, seg := range mine {
		if !resident(r, seg) {
			t.Fatalf("the steady tenant's executable %d: got evicted by a churning neighbour, want resident", i)
		}
	}
	if n := r.Cache.Len(); n != 4 {
		t.Fatalf("got %d resident, want the capacity 4 (two each)", n)
	}
	// Over its share, a tenant yields: a third tenant's first capture
	// evicts the steady tenant's least recently used one only once the
	// share shrinks to 4/3 (one each, the rest beyond it).
	r.Owner = "third"
	if _, rep := r.Run(r.Segment(3, 4), true); rep.Captured+rep.Updated != 1 || len(rep.Evicted) != 1 {
		t.Fatalf("a newcomer under its share: got Captured+Updated %d, %d evicted; want 1 and 1 (report %+v)", rep.Captured+rep.Updated, len(rep.Evicted), rep)
	}
}

// TestCacheBytesBound: the residents retain at most the byte bound, and
// a tenant within its byte share keeps its executables.
func TestCacheBytesBound(t *testing.T) {
	r := cachetest.New(t, 8)
	if _, err := r.Cache.Configure(64); err != nil {
		t.Fatalf("Configure(64): got err %v, want nil", err)
	}
	r.Cache.LimitBytes(128)
	r.Owner = "steady"
	keep := []discovery.Command{upload(t, r, 0, 32, 1)}
	r.Run(keep, true)
	r.Owner = "big"
	for i := range 20 {
		r.Run([]discovery.Command{upload(t, r, 1+i%7, 48, byte(i+10))}, true)
		if b := r.Cache.Bytes(); b > 128 {
			t.Fatalf("after %d uploads: got %d bytes retained, want at most the bound 128", i+1, b)
		}
	}
	if !resident(r, keep) {
		t.Fatal("the steady tenant's 32-byte executable, within its 64-byte share: got evicted, want resident")
	}
	// A segment larger than the whole bound never becomes resident.
	_, rep := r.Run([]discovery.Command{upload(t, r, 0, 64, 99), upload(t, r, 1, 64, 98)}, true)
	if rep.Captured != 0 || rep.CapacityDeferred == 0 {
		t.Fatalf("a 128-byte segment beside 32 resident bytes: got Captured %d, CapacityDeferred %d; want 0 and at least 1 (report %+v)", rep.Captured, rep.CapacityDeferred, rep)
	}
}

// TestNoSquatting: when owners outnumber the capacity, a newcomer still
// replays: by rebinding an over-share owner's least recently used resident
// at once when the commands are known, else by capturing once the others
// go idle; and an owner over its share yields its excess before a steady
// owner within its share loses its own.
func TestNoSquatting(t *testing.T) {
	for _, captureOnly := range []bool{true, false} {
		r := cachetest.New(t, 8)
		r.CaptureOnly = captureOnly
		if _, err := r.Cache.Configure(3); err != nil {
			t.Fatalf("Configure(3): got err %v, want nil", err)
		}
		for i, owner := range []string{"a", "b", "c"} {
			r.Owner = owner
			r.Run(r.Segment(i, i), true)
		}
		// Capture only: while the three are in use, a fourth owner runs
		// eagerly rather than trade executables round robin by capture;
		// once they go idle, it captures. With the commands, it rebinds
		// the least recently used resident (a's) at once, no capture.
		r.Owner = "late"
		for i := range 5 { // owner a's resident was last used 4 batches before
			_, rep := r.Run(r.Segment(5, 6), true)
			want, got := 0, rep.Captured+rep.Updated
			if captureOnly && i == 4 || !captureOnly && i == 0 { // then hits
				want = 1
			}
			if got != want || rep.Captured != 0 && !captureOnly {
				t.Fatalf("capture only %v, batch %d of a newcomer beside three owners' residents (in use for 6 batches): got Captured+Updated %d, want %d (report %+v)", captureOnly, i, got, want, rep)
			}
			if !captureOnly && i == 0 && (len(rep.Updates) != 1 || rep.Updates[0].InPlace != discovery.UpdateByParameters) {
				t.Fatalf("the newcomer's first batch: got updates %+v, want one by parameters", rep.Updates)
			}
		}
	}

	r := cachetest.New(t, 8)
	if _, err := r.Cache.Configure(4); err != nil {
		t.Fatalf("Configure(4): got err %v, want nil", err)
	}
	r.Owner = "steady"
	a, b := r.Segment(0, 1), r.Segment(1, 0)
	r.Run(a, true)
	r.Owner = "churn"
	for i := range 3 {
		r.Run(r.Segment(2+i, 5, 6), true) // three residents: one beyond its share of two
	}
	for step := range 20 {
		r.Owner = "steady"
		r.Run(b, true)
		r.Run(a, true)
		r.Owner = "churn"
		r.Run(r.Segment(2+step%3, 5, 6), true)
		if ra, rb := resident(r, a), resident(r, b); !ra || !rb {
			t.Fatalf("step %d: the steady tenant's executables: got resident a=%v b=%v, want both: within its share it must not lose them to a tenant beyond its own", step, ra, rb)
		}
	}
}

// TestNoRoundRobinThrash: owners that all need more than their share do
// not trade executables by capture (which would leave every batch
// capturing and none replaying): capture only, they keep what they use;
// with the commands known, they trade them by rebinding, and every batch
// replays without a capture.
func TestNoRoundRobinThrash(t *testing.T) {
	for _, captureOnly := range []bool{true, false} {
		r := cachetest.New(t, 8)
		r.CaptureOnly = captureOnly
		if _, err := r.Cache.Configure(4); err != nil {
			t.Fatalf("Configure(4): got err %v, want nil", err)
		}
		owners := []string{"a", "b", "c"}
		hits, captures, rebound, replayed := 0, 0, 0, 0
		for step := range 30 {
			i := step % 3
			r.Owner = owners[i]
			// two segments per batch, split by an eager barrier
			cmds := append(append(r.Segment(i, i+3), r.Barrier(7)), r.Segment(i+3, i)...)
			_, rep := r.Run(cmds, true)
			hits += rep.Hits
			captures += rep.Captured
			for _, u := range rep.Updates {
				if u.InPlace == discovery.UpdateByParameters {
					rebound++
				} else {
					captures++
				}
			}
			for _, d := range rep.Dispositions {
				if d.Resident() {
					replayed++
				}
			}
		}
		t.Logf("capture only %v: 3 owners needing 2 executables each in a cache of 4: %d hits, %d captures, %d rebinds, %d of 60 segments replayed", captureOnly, hits, captures, rebound, replayed)
		if captureOnly && (hits < 30 || captures > 8) {
			t.Fatalf("got %d hits and %d captures, want at least 30 hits and at most 8 captures: the owners traded executables round robin", hits, captures)
		}
		if !captureOnly && (replayed != 60 || captures > 4) {
			t.Fatalf("with the commands: got %d of 60 segments replayed and %d captures, want all replayed and at most 4 captures (the rest rebound)", replayed, captures)
		}
	}
}
