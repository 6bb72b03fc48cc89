package execcache_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/cachetest"
	discovery "github.com/lanesched/lanes/internal/discovery"

	execcache "github.com/lanesched/lanes/internal/execcache"
)

type rig struct{ *cachetest.Rig }

func newRig(t testing.TB, buffers int, faults ...sim.Fault) rig {
	r := cachetest.New(t, buffers, faults...)
	return rig{r}
}

func (r rig) segment(bufs ...int) []discovery.Command { return r.Segment(bufs...) }
func (r rig) barrier(b int) discovery.Command         { return r.Barrier(b) }
func (r rig) count(b int) int32                       { return r.Count(b) }
func (r rig) run(cmds []discovery.Command, quiescent bool) discovery.PrepareReport {
	r.T.Helper()
	_, rep := r.Run(cmds, quiescent)
	return rep
}

func wantDispositions(t *testing.T, rep discovery.PrepareReport, want ...discovery.Disposition) {
	t.Helper()
	if len(rep.Dispositions) != len(want) {
		t.Fatalf("got %d dispositions %v, want %d: %v", len(rep.Dispositions), rep.Dispositions, len(want), want)
	}
	for i := range want {
		if rep.Dispositions[i] != want[i] {
			t.Fatalf("disposition %d: got %v, want %v (got %v, want %v)", i, rep.Dispositions[i], want[i], rep.Dispositions, want)
		}
	}
}

func TestDispositions(t *testing.T) {
	t.Run("captured then hit, replay equals eager", func(t *testing.T) {
		r := newRig(t, 2)
		if _, err := r.Cache.Configure(4); err != nil {
			t.Fatalf("Configure(4): got err %v, want nil", err)
		}
		rep := r.run(r.segment(0, 0, 1), true)
		wantDispositions(t, rep, discovery.DispositionCaptured)
		if rep.Captured != 1 || rep.Uploaded != 1 {
			t.Fatalf("first run: got Captured %d, Uploaded %d, want 1 and 1 (report %+v)", rep.Captured, rep.Uploaded, rep)
		}
		for range 3 {
			wantDispositions(t, r.run(r.segment(0, 0, 1), true), discovery.DispositionHit)
		}
		if c0, c1 := r.count(0), r.count(1); c0 != 8 || c1 != 4 {
			t.Fatalf("after 4 steps: got counts %d %d, want 8 4", c0, c1)
		}
	})
	t.Run("outside preparation: unconfigured and sealed", func(t *testing.T) {
		r := newRig(t, 2)
		wantDispositions(t, r.run(r.segment(0), true), discovery.DispositionOutsidePreparation)
		_, _ = r.Cache.Configure(2)
		wantDispositions(t, r.run(r.segment(0), true), discovery.DispositionCaptured)
		if _, err := r.Cache.Seal(); err != nil {
			t.Fatalf("Seal: got err %v, want nil", err)
		}
		rep := r.run(append(r.segment(0), append([]discovery.Command{r.barrier(1)}, r.segment(1)...)...), true)
		wantDispositions(t, rep, discovery.DispositionHit, discovery.DispositionOutsidePreparation)
		if got := discovery.DispositionOutsidePreparation.Reason(); got != cache.ReasonOutsidePreparation {
			t.Fatalf("DispositionOutsidePreparation.Reason(): got %v, want %v", got, cache.ReasonOutsidePreparation)
		}
	})
	t.Run("quiescence deferred", func(t *testing.T) {
		r := newRig(t, 1)
		_, _ = r.Cache.Configure(2)
		rep := r.run(r.segment(0), false)
		wantDispositions(t, rep, discovery.DispositionQuiescenceDeferred)
		if n := r.Cache.Len(); rep.QuiescenceDeferred != 1 || n != 0 {
			t.Fatalf("not quiescent: got QuiescenceDeferred %d, %d residents, want 1 and 0 (report %+v)", rep.QuiescenceDeferred, n, rep)
		}
	})
	t.Run("capacity deferred keeps what the batch needs", func(t *testing.T) {
		r := newRig(t, 3)
		_, _ = r.Cache.Configure(1)
		batch := append(r.segment(0), append([]discovery.Command{r.barrier(2)}, r.segment(1)...)...)
		rep := r.run(batch, true)
		wantDispositions(t, rep, discovery.DispositionCaptured, discovery.DispositionCapacityDeferred)
		rep = r.run(batch, true)
		wantDispositions(t, rep, discovery.DispositionHit, discovery.DispositionCapacityDeferred)
		if len(rep.Evicted) != 0 {
			t.Fatalf("got evicted %v, want none: the batch needs every resident", rep.Evicted)
		}
	})
	t.Run("evicted least recently used", func(t *testing.T) {
		r := newRig(t, 3)
		_, _ = r.Cache.Configure(2)
		a, b := r.segment(0), r.segment(1)
		c := []discovery.Command{r.Inc(2, 0), r.Barrier(2)} // another shape: no update possible
		c[1].Phase = cache.PhaseCompute
		c[1].Key, c[1].HasKey, c[1].Scopes = cache.NewKey("t", "zero").Finish(), true, []cache.Scope{cache.PlanScope()}
		r.run(a, true)
		r.run(b, true)
		r.run(a, true) // a is now more recent than b
		rep := r.run(c, true)
		wantDispositions(t, rep, discovery.DispositionCaptured)
		da, _ := discovery.Discover(a, nil)
		db, _ := discovery.Discover(b, nil)
		if len(rep.Evicted) != 1 || rep.Evicted[0] != db.Candidates[0].Key {
			t.Fatalf("got evicted %v, want [%v] (b, the least recently used; a is %v)", rep.Evicted, db.Candidates[0].Key, da.Candidates[0].Key)
		}
		if _, ok := r.Cache.Lookup(da.Candidates[0].Key); !ok {
			t.Fatal("Lookup(a): got not resident, want resident (a was used more recently than b)")
		}
	})
	t.Run("capture rejected, then cached rejection", func(t *testing.T) {
		r := newRig(t, 1, sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1})
		_, _ = r.Cache.Configure(2)
		rep := r.run(r.segment(0), true)
		wantDispositions(t, rep, discovery.DispositionCaptureRejected)
		if len(rep.Rejections) != 1 {
			t.Fatalf("got %d rejections %v, want 1", len(rep.Rejections), rep.Rejections)
		}
		var re *execcache.ReplayError
		if !errors.As(rep.Rejections[0], &re) {
			t.Fatalf("rejection: got %T %v, want a *execcache.ReplayError", rep.Rejections[0], rep.Rejections[0])
		}
		if !re.EagerFallbackSafe || !errors.Is(re, cuda.ErrCaptureUnsupported) {
			t.Fatalf("rejection %v: got EagerFallbackSafe %v, wraps cuda.ErrCaptureUnsupported %v; want both true", re, re.EagerFallbackSafe, errors.Is(re, cuda.ErrCaptureUnsupported))
		}
		rep = r.run(r.segment(0), true)
		wantDispositions(t, rep, discovery.DispositionCachedRejection)
		if got := r.count(0); got != 2 {
			t.Fatalf("got count %d, want 2: both steps must have run eagerly", got)
		}
		if p := r.Cache.Preparation(); p.Rejected != 1 || p.Resident != 0 {
			t.Fatalf("preparation: got Rejected %d, Resident %d, want 1 and 0 (%+v)", p.Rejected, p.Resident, p)
		}
	})
}

// TestInPlaceUpdate: a full cache meets a miss of a resident's shape: the
// LRU resident the batch does not need is updated in place and re-keyed
// instead of evicted, and the replay touches the new buffer.
func TestInPlaceUpdate(t *testing.T) {
	r := newRig(t, 3)
	_, _ = r.Cache.Configure(2)
	a, b, c := r.segment(0, 0), r.segment(1, 1), r.segment(2, 2)
	r.run(a, true)
	rep := r.run(b, true)
	wantDispositions(t, rep, discovery.DispositionCaptured) // room left: no update
	r.run(a, true)
	rep = r.run(c, true)
	wantDispositions(t, rep, discovery.DispositionUpdated)
	db, _ := discovery.Discover(b, nil)
	dc, _ := discovery.Discover(c, nil)
	from, to := db.Candidates[0].Key, dc.Candidates[0].Key
	if len(rep.Updates) != 1 || rep.Updates[0].From != from || rep.Updates[0].To != to {
		t.Fatalf("got updates %v, want [{%v %v}] (b's executable re-keyed to c)", rep.Updates, from, to)
	}
	if len(rep.Evicted) == 0 || rep.Evicted[0] != from {
		t.Fatalf("got evicted %v, want b's key %v first", rep.Evicted, from)
	}
	if n := r.Cache.Len(); n != 2 || rep.Captured != 0 || rep.Updated != 1 {
		t.Fatalf("got %d residents, Captured %d, Updated %d; want 2, 0, 1 (report %+v)", n, rep.Captured, rep.Updated, rep)
	}
	if _, ok := r.Cache.Lookup(from); ok {
		t.Fatal("Lookup(b's old key): got resident, want not: an updated executable must be re-keyed")
	}
	wantDispositions(t, r.run(c, true), discovery.DispositionHit)
	if c2, c1 := r.Count(2), r.Count(1); c2 != 4 || c1 != 2 {
		t.Fatalf("got counts %d (buffer 2) and %d (buffer 1), want 4 and 2: the updated executable must touch buffer 2 only", c2, c1)
	}
}

// TestRefusedUpdateFallsBackToCapture: a device that refuses both the
// in-place parameter update and the update from a new capture leaves the
// miss to be instantiated, each refusal reported with its reason.
func TestRefusedUpdateFallsBackToCapture(t *testing.T) {
	r := newRig(t, 3, sim.Fault{Kind: sim.FaultUpdateReject, Nth: 1}, sim.Fault{Kind: sim.FaultUpdateReject, Nth: 2})
	_, _ = r.Cache.Configure(1)
	r.run(r.segment(0), true)
	rep := r.run(r.segment(1), true)
	wantDispositions(t, rep, discovery.DispositionCaptured)
	var refused *backend.RebindRefusedError
	if len(rep.RebindRefusals) != 1 || !errors.As(rep.RebindRefusals[0], &refused) || refused.Refusal != backend.RebindDeviceRefused {
		t.Fatalf("got rebind refusals %v, want one *backend.RebindRefusedError %s", rep.RebindRefusals, backend.RebindDeviceRefused)
	}
	if len(rep.UpdateRefusals) != 1 || !errors.Is(rep.UpdateRefusals[0], cuda.ErrUpdateRefused) {
		t.Fatalf("got update refusals %v, want one wrapping cuda.ErrUpdateRefused", rep.UpdateRefusals)
	}
	if len(rep.Evicted) != 1 || rep.Updated != 0 {
		t.Fatalf("got %d evicted, Updated %d; want 1 evicted, Updated 0 (report %+v)", len(rep.Evicted), rep.Updated, rep)
	}
	t.Log(rep.UpdateRefusals[0])
	if got := r.Count(1); got != 1 {
		t.Fatalf("got count %d, want 1: the fallback capture must run", got)
	}
}

func TestPanickingCommandEndsCapture(t *testing.T) {
	r := newRig(t, 1)
	_, _ = r.Cache.Configure(2)
	cmds := r.segment(0, 0)
	d, _ := discovery.Discover(cmds, nil)
	_, err := r.Cache.Prepare(r.Stream, "", d.Candidates, true, func(i int) error {
		if i == 1 {
			panic("provider bug")
		}
		return r.Stream.Enqueue(cmds[i].Cmd)
	})
	var re *execcache.ReplayError
	if !errors.As(err, &re) {
		t.Fatalf("panic during capture: got err %v, want a *execcache.ReplayError", err)
	}
	if re.EagerFallbackSafe || re.Stage != "encode capture" {
		t.Fatalf("panic during capture: got EagerFallbackSafe %v, Stage %q; want false, %q", re.EagerFallbackSafe, re.Stage, "encode capture")
	}
	if got := r.Stream.Capture(); got != backend.CaptureNone {
		t.Fatalf("after the panic: got capture state %v, want %v", got, backend.CaptureNone)
	}
	t.Log(err)
}

func TestLifecycle(t *testing.T) {
	c := execcache.New()
	if _, err := c.Seal(); !errors.Is(err, cache.ErrNotOpen) {
		t.Fatalf("Seal before Configure: got err %v, want one wrapping cache.ErrNotOpen", err)
	}
	if _, err := c.Configure(0); !errors.Is(err, cache.ErrCapacity) {
		t.Fatalf("Configure(0): got err %v, want one wrapping cache.ErrCapacity", err)
	}
	p, err := c.Configure(3)
	if err != nil {
		t.Fatalf("Configure(3): got err %v, want nil", err)
	}
	if p.State != cache.PrepOpen || p.Capacity != 3 {
		t.Fatalf("Configure(3): got state %v, capacity %d; want %v, 3", p.State, p.Capacity, cache.PrepOpen)
	}
	if _, err := c.Configure(3); !errors.Is(err, cache.ErrAlreadyOpen) {
		t.Fatalf("Configure twice: got err %v, want one wrapping cache.ErrAlreadyOpen", err)
	}
	if p, err := c.Seal(); err != nil || p.State != cache.PrepSealed {
		t.Fatalf("Seal: got state %v, err %v; want %v, nil", p.State, err, cache.PrepSealed)
	}
	if _, err := c.Configure(2); err != nil {
		t.Fatalf("Configure after Seal: got err %v, want nil", err)
	}
}

func TestTrimAndRetire(t *testing.T) {
	r := newRig(t, 3)
	_, _ = r.Cache.Configure(1)
	r.run(r.segment(0), true)
	r.run(r.segment(1), false) // deferred: not quiescent
	if _, err := r.Cache.Trim(false); !errors.Is(err, cache.ErrNotQuiescent) {
		t.Fatalf("Trim with work in flight: got err %v, want one wrapping cache.ErrNotQuiescent", err)
	}
	d, _ := discovery.Discover(r.segment(0), nil)
	if !r.Cache.Evict(d.Candidates[0].Key, false) {
		t.Fatal("Evict(resident, not quiescent): got false, want true")
	}
	if n := r.Cache.Retired(); n != 1 {
		t.Fatalf("after an eviction with work in flight: got %d retired, want 1 (retired, not destroyed)", n)
	}
	if n := r.Cache.ReleaseRetired(false); n != 0 {
		t.Fatalf("ReleaseRetired(false): got %d released, want 0: retired executables are destroyed only at a quiescent point", n)
	}
	if n := r.Cache.ReleaseRetired(true); n != 1 {
		t.Fatalf("ReleaseRetired(true): got %d released, want 1", n)
	}
	r.run(r.segment(2), true)
	tr, err := r.Cache.Trim(true)
	if err != nil {
		t.Fatalf("Trim(true): got err %v, want nil", err)
	}
	if n := r.Cache.Len(); tr.Executables != 1 || n != 0 {
		t.Fatalf("Trim(true): got %d executables destroyed, %d left resident; want 1 and 0 (report %+v)", tr.Executables, n, tr)
	}
}

// TestCacheAgainstModel drives random batches and checks the cache against
// a naive LRU model: capacity never exceeded, the evicted key is always the
// least recently used one the batch does not need, and every candidate has
// a disposition.
func TestCacheAgainstModel(t *testing.T) {
	const capacity, nbuf = 3, 6
	r := newRig(t, nbuf)
	_, _ = r.Cache.Configure(capacity)
	rng := rand.New(rand.NewSource(5))
	type entry struct{ used int }
	model := map[discovery.SegmentKey]*entry{}
	clock := 0
	for step := range 300 {
		var cmds []discovery.Command
		for s := range 1 + rng.Intn(3) {
			if s > 0 {
				cmds = append(cmds, r.barrier(rng.Intn(nbuf)))
			}
			cmds = append(cmds, r.segment(rng.Intn(nbuf), rng.Intn(nbuf))...)
		}
		d, _ := discovery.Discover(cmds, nil)
		needed := map[discovery.SegmentKey]bool{}
		for _, c := range d.Candidates {
			needed[c.Key] = true
		}
		rep := r.run(cmds, true)
		// As the cache does: hits become most recent first, then the
		// captures in order, each evicting the least recently used
		// resident the batch does not need when the cache is full.
		evicted := 0
		for i, c := range d.Candidates {
			if rep.Dispositions[i] == discovery.DispositionHit {
				if model[c.Key] == nil {
					t.Fatalf("step %d: got a hit on %s, want a miss: the model does not hold it", step, c.Key.Short())
				}
				clock++
				model[c.Key].used = clock
			}
		}
		for i, c := range d.Candidates {
			switch disp := rep.Dispositions[i]; disp {
			case discovery.DispositionHit:
			case discovery.DispositionCaptured, discovery.DispositionUpdated: // an update is an eviction and a capture in one
				if model[c.Key] != nil {
					continue // a repeated candidate of this batch
				}
				if len(model) == capacity {
					var lru discovery.SegmentKey
					best := -1
					for k, e := range model {
						if !needed[k] && (best < 0 || e.used < best) {
							lru, best = k, e.used
						}
					}
					if best < 0 || evicted >= len(rep.Evicted) || rep.Evicted[evicted] != lru {
						t.Fatalf("step %d: got evicted %v (eviction %d), want %s next, the model's least recently used key the batch does not need", step, rep.Evicted, evicted, lru.Short())
					}
					evicted++
					delete(model, lru)
				}
				clock++
				model[c.Key] = &entry{used: clock}
			case discovery.DispositionCapacityDeferred:
				free := capacity - len(model)
				for k := range model {
					if !needed[k] {
						free++
					}
				}
				if free > 0 {
					t.Fatalf("step %d: got capacity_deferred with room for %d, want room for 0", step, free)
				}
			default:
				t.Fatalf("step %d: got disposition %v, want hit, captured, updated or capacity_deferred", step, disp)
			}
		}
		if evicted != len(rep.Evicted) {
			t.Fatalf("step %d: got %d evicted %v, want %d as the model", step, len(rep.Evicted), rep.Evicted, evicted)
		}
		for i, c := range d.Candidates { // the lane then launches the residents, in order
			if rep.Dispositions[i].Resident() {
				clock++
				model[c.Key].used = clock
			}
		}
		if n := r.Cache.Len(); n != len(model) || n > capacity {
			t.Fatalf("step %d: got %d residents, want %d as the model, at most the capacity %d", step, n, len(model), capacity)
		}
	}
}

// BenchmarkPrepareHit measures a cache lookup on the replay path: one
// batch of four resident candidates.
func BenchmarkPrepareHit(b *testing.B) {
	r := newRig(b, 4)
	_, _ = r.Cache.Configure(8)
	var cmds []discovery.Command
	for i := range 4 {
		if i > 0 {
			cmds = append(cmds, r.barrier(i))
		}
		cmds = append(cmds, r.segment(i)...)
	}
	d, _ := discovery.Discover(cmds, nil)
	enqueue := func(i int) error { return r.Stream.Enqueue(cmds[i].Cmd) }
	if _, err := r.Cache.Prepare(r.Stream, "", d.Candidates, true, enqueue); err != nil {
		b.Fatalf("Prepare (capture): got err %v, want nil", err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := r.Cache.Prepare(r.Stream, "", d.Candidates, true, enqueue); err != nil {
			b.Fatalf("Prepare (hit): got err %v, want nil", err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N), "ns/candidate")
}
