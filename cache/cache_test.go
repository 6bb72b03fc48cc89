package cache_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cache/cachetest"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

type rig struct{ *cachetest.Rig }

func newRig(t *testing.T, buffers int, faults ...sim.Fault) rig {
	r := cachetest.New(t, buffers, faults...)
	return rig{r}
}

func (r rig) segment(bufs ...int) []cache.Command { return r.Segment(bufs...) }
func (r rig) barrier(b int) cache.Command         { return r.Barrier(b) }
func (r rig) count(b int) int32                   { return r.Count(b) }
func (r rig) run(cmds []cache.Command, quiescent bool) cache.PrepareReport {
	r.T.Helper()
	_, rep := r.Run(cmds, quiescent)
	return rep
}

func wantDispositions(t *testing.T, rep cache.PrepareReport, want ...cache.Disposition) {
	t.Helper()
	if len(rep.Dispositions) != len(want) {
		t.Fatalf("dispositions %v, want %v", rep.Dispositions, want)
	}
	for i := range want {
		if rep.Dispositions[i] != want[i] {
			t.Fatalf("dispositions %v, want %v", rep.Dispositions, want)
		}
	}
}

func TestDispositions(t *testing.T) {
	t.Run("captured then hit, replay equals eager", func(t *testing.T) {
		r := newRig(t, 2)
		if _, err := r.Cache.Configure(4); err != nil {
			t.Fatal(err)
		}
		rep := r.run(r.segment(0, 0, 1), true)
		wantDispositions(t, rep, cache.DispositionCaptured)
		if rep.Captured != 1 || rep.Uploaded != 1 {
			t.Fatalf("report %+v", rep)
		}
		for range 3 {
			wantDispositions(t, r.run(r.segment(0, 0, 1), true), cache.DispositionHit)
		}
		if r.count(0) != 8 || r.count(1) != 4 {
			t.Fatalf("counts %d %d after 4 steps, want 8 4", r.count(0), r.count(1))
		}
	})
	t.Run("outside preparation: unconfigured and sealed", func(t *testing.T) {
		r := newRig(t, 2)
		wantDispositions(t, r.run(r.segment(0), true), cache.DispositionOutsidePreparation)
		_, _ = r.Cache.Configure(2)
		wantDispositions(t, r.run(r.segment(0), true), cache.DispositionCaptured)
		if _, err := r.Cache.Seal(); err != nil {
			t.Fatal(err)
		}
		rep := r.run(append(r.segment(0), append([]cache.Command{r.barrier(1)}, r.segment(1)...)...), true)
		wantDispositions(t, rep, cache.DispositionHit, cache.DispositionOutsidePreparation)
		if cache.DispositionOutsidePreparation.Reason() != cache.ReasonOutsidePreparation {
			t.Fatal("reason mapping")
		}
	})
	t.Run("quiescence deferred", func(t *testing.T) {
		r := newRig(t, 1)
		_, _ = r.Cache.Configure(2)
		rep := r.run(r.segment(0), false)
		wantDispositions(t, rep, cache.DispositionQuiescenceDeferred)
		if rep.QuiescenceDeferred != 1 || r.Cache.Len() != 0 {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("capacity deferred keeps what the batch needs", func(t *testing.T) {
		r := newRig(t, 3)
		_, _ = r.Cache.Configure(1)
		batch := append(r.segment(0), append([]cache.Command{r.barrier(2)}, r.segment(1)...)...)
		rep := r.run(batch, true)
		wantDispositions(t, rep, cache.DispositionCaptured, cache.DispositionCapacityDeferred)
		rep = r.run(batch, true)
		wantDispositions(t, rep, cache.DispositionHit, cache.DispositionCapacityDeferred)
		if len(rep.Evicted) != 0 {
			t.Fatal("evicted an executable the batch needs")
		}
	})
	t.Run("evicted least recently used", func(t *testing.T) {
		r := newRig(t, 3)
		_, _ = r.Cache.Configure(2)
		a, b := r.segment(0), r.segment(1)
		c := []cache.Command{r.Inc(2, 0), r.Barrier(2)} // another shape: no update possible
		c[1].Phase = cache.PhaseCompute
		c[1].Key, c[1].HasKey, c[1].Scopes = cache.NewKey("t", "zero").Finish(), true, []cache.Scope{cache.PlanScope()}
		r.run(a, true)
		r.run(b, true)
		r.run(a, true) // a is now more recent than b
		rep := r.run(c, true)
		wantDispositions(t, rep, cache.DispositionCaptured)
		da, _ := cache.Discover(a, nil)
		db, _ := cache.Discover(b, nil)
		if len(rep.Evicted) != 1 || rep.Evicted[0] != db.Candidates[0].Key {
			t.Fatalf("evicted %v, want b", rep.Evicted)
		}
		if _, ok := r.Cache.Lookup(da.Candidates[0].Key); !ok {
			t.Fatal("a was evicted instead")
		}
	})
	t.Run("capture rejected, then cached rejection", func(t *testing.T) {
		r := newRig(t, 1, sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1})
		_, _ = r.Cache.Configure(2)
		rep := r.run(r.segment(0), true)
		wantDispositions(t, rep, cache.DispositionCaptureRejected)
		var re *cache.ReplayError
		if len(rep.Rejections) != 1 || !errors.As(rep.Rejections[0], &re) || !re.EagerFallbackSafe || !errors.Is(re, cuda.ErrCaptureUnsupported) {
			t.Fatalf("rejection %v", rep.Rejections)
		}
		rep = r.run(r.segment(0), true)
		wantDispositions(t, rep, cache.DispositionCachedRejection)
		if r.count(0) != 2 {
			t.Fatalf("count %d: both steps must have run eagerly", r.count(0))
		}
		if p := r.Cache.Preparation(); p.Rejected != 1 || p.Resident != 0 {
			t.Fatalf("preparation %+v", p)
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
	wantDispositions(t, rep, cache.DispositionCaptured) // room left: no update
	r.run(a, true)
	rep = r.run(c, true)
	wantDispositions(t, rep, cache.DispositionUpdated)
	db, _ := cache.Discover(b, nil)
	dc, _ := cache.Discover(c, nil)
	if len(rep.Updates) != 1 || rep.Updates[0].From != db.Candidates[0].Key || rep.Updates[0].To != dc.Candidates[0].Key || rep.Evicted[0] != db.Candidates[0].Key {
		t.Fatalf("updates %v evicted %v", rep.Updates, rep.Evicted)
	}
	if r.Cache.Len() != 2 || rep.Captured != 0 || rep.Updated != 1 {
		t.Fatalf("report %+v, %d residents", rep, r.Cache.Len())
	}
	if _, ok := r.Cache.Lookup(db.Candidates[0].Key); ok {
		t.Fatal("the donor's old key still resolves: an updated executable must be re-keyed")
	}
	wantDispositions(t, r.run(c, true), cache.DispositionHit)
	if r.Count(2) != 4 || r.Count(1) != 2 {
		t.Fatalf("counts %d %d: the updated executable must touch buffer 2 only", r.Count(2), r.Count(1))
	}
}

func TestRefusedUpdateFallsBackToCapture(t *testing.T) {
	r := newRig(t, 3, sim.Fault{Kind: sim.FaultUpdateReject, Nth: 1})
	_, _ = r.Cache.Configure(1)
	r.run(r.segment(0), true)
	rep := r.run(r.segment(1), true)
	wantDispositions(t, rep, cache.DispositionCaptured)
	if len(rep.UpdateRefusals) != 1 || !errors.Is(rep.UpdateRefusals[0], cuda.ErrUpdateRefused) || len(rep.Evicted) != 1 || rep.Updated != 0 {
		t.Fatalf("report %+v", rep)
	}
	t.Log(rep.UpdateRefusals[0])
	if r.Count(1) != 1 {
		t.Fatal("the fallback capture did not run")
	}
}

func TestPanickingCommandEndsCapture(t *testing.T) {
	r := newRig(t, 1)
	_, _ = r.Cache.Configure(2)
	cmds := r.segment(0, 0)
	d, _ := cache.Discover(cmds, nil)
	_, err := r.Cache.Prepare(r.Stream, "", d.Candidates, true, func(i int) error {
		if i == 1 {
			panic("provider bug")
		}
		return r.Stream.Enqueue(cmds[i].Cmd)
	})
	var re *cache.ReplayError
	if !errors.As(err, &re) || re.EagerFallbackSafe || re.Stage != "encode capture" {
		t.Fatalf("panic during capture: %v", err)
	}
	if r.Stream.Capture() != cuda.CaptureNone {
		t.Fatal("the stream is still capturing after the panic")
	}
	t.Log(err)
}

func TestLifecycle(t *testing.T) {
	c := cache.New()
	if _, err := c.Seal(); !errors.Is(err, cache.ErrNotOpen) {
		t.Fatalf("seal before configure: %v", err)
	}
	if _, err := c.Configure(0); !errors.Is(err, cache.ErrCapacity) {
		t.Fatalf("capacity 0: %v", err)
	}
	p, err := c.Configure(3)
	if err != nil || p.State != cache.PrepOpen || p.Capacity != 3 {
		t.Fatalf("configure: %+v %v", p, err)
	}
	if _, err := c.Configure(3); !errors.Is(err, cache.ErrAlreadyOpen) {
		t.Fatalf("configure twice: %v", err)
	}
	if p, err := c.Seal(); err != nil || p.State != cache.PrepSealed {
		t.Fatalf("seal: %+v %v", p, err)
	}
	if _, err := c.Configure(2); err != nil {
		t.Fatalf("reopen after seal: %v", err)
	}
}

func TestTrimAndRetire(t *testing.T) {
	r := newRig(t, 3)
	_, _ = r.Cache.Configure(1)
	r.run(r.segment(0), true)
	r.run(r.segment(1), false) // deferred: not quiescent
	if _, err := r.Cache.Trim(false); !errors.Is(err, cache.ErrNotQuiescent) {
		t.Fatalf("trim with work in flight: %v", err)
	}
	d, _ := cache.Discover(r.segment(0), nil)
	if !r.Cache.Evict(d.Candidates[0].Key, false) || r.Cache.Retired() != 1 {
		t.Fatal("an eviction with work in flight must retire, not destroy")
	}
	if r.Cache.ReleaseRetired(false) != 0 || r.Cache.ReleaseRetired(true) != 1 {
		t.Fatal("retired executables are destroyed only at a quiescent point")
	}
	r.run(r.segment(2), true)
	tr, err := r.Cache.Trim(true)
	if err != nil || tr.Executables != 1 || r.Cache.Len() != 0 {
		t.Fatalf("trim: %+v %v", tr, err)
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
	model := map[cache.SegmentKey]*entry{}
	clock := 0
	for step := range 300 {
		var cmds []cache.Command
		for s := range 1 + rng.Intn(3) {
			if s > 0 {
				cmds = append(cmds, r.barrier(rng.Intn(nbuf)))
			}
			cmds = append(cmds, r.segment(rng.Intn(nbuf), rng.Intn(nbuf))...)
		}
		d, _ := cache.Discover(cmds, nil)
		needed := map[cache.SegmentKey]bool{}
		for _, c := range d.Candidates {
			needed[c.Key] = true
		}
		rep := r.run(cmds, true)
		// As the cache does: hits become most recent first, then the
		// captures in order, each evicting the least recently used
		// resident the batch does not need when the cache is full.
		evicted := 0
		for i, c := range d.Candidates {
			if rep.Dispositions[i] == cache.DispositionHit {
				if model[c.Key] == nil {
					t.Fatalf("step %d: hit on a key the model lacks", step)
				}
				clock++
				model[c.Key].used = clock
			}
		}
		for i, c := range d.Candidates {
			switch disp := rep.Dispositions[i]; disp {
			case cache.DispositionHit:
			case cache.DispositionCaptured, cache.DispositionUpdated: // an update is an eviction and a capture in one
				if model[c.Key] != nil {
					continue // a repeated candidate of this batch
				}
				if len(model) == capacity {
					var lru cache.SegmentKey
					best := -1
					for k, e := range model {
						if !needed[k] && (best < 0 || e.used < best) {
							lru, best = k, e.used
						}
					}
					if best < 0 || evicted >= len(rep.Evicted) || rep.Evicted[evicted] != lru {
						t.Fatalf("step %d: evicted %v, the model says %s next", step, rep.Evicted, lru.Short())
					}
					evicted++
					delete(model, lru)
				}
				clock++
				model[c.Key] = &entry{used: clock}
			case cache.DispositionCapacityDeferred:
				free := capacity - len(model)
				for k := range model {
					if !needed[k] {
						free++
					}
				}
				if free > 0 {
					t.Fatalf("step %d: deferred with room for %d", step, free)
				}
			default:
				t.Fatalf("step %d: unexpected disposition %v", step, disp)
			}
		}
		if evicted != len(rep.Evicted) {
			t.Fatalf("step %d: cache evicted %d, model %d", step, len(rep.Evicted), evicted)
		}
		for i, c := range d.Candidates { // the lane then launches the residents, in order
			if rep.Dispositions[i].Resident() {
				clock++
				model[c.Key].used = clock
			}
		}
		if r.Cache.Len() != len(model) || r.Cache.Len() > capacity {
			t.Fatalf("step %d: %d residents, model %d", step, r.Cache.Len(), len(model))
		}
	}
}

// BenchmarkPrepareHit measures a cache lookup on the replay path: one
// batch of four resident candidates.
func BenchmarkPrepareHit(b *testing.B) {
	t := &testing.T{}
	r := newRig(t, 4)
	_, _ = r.Cache.Configure(8)
	var cmds []cache.Command
	for i := range 4 {
		if i > 0 {
			cmds = append(cmds, r.barrier(i))
		}
		cmds = append(cmds, r.segment(i)...)
	}
	d, _ := cache.Discover(cmds, nil)
	enqueue := func(i int) error { return r.Stream.Enqueue(cmds[i].Cmd) }
	if _, err := r.Cache.Prepare(r.Stream, "", d.Candidates, true, enqueue); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := r.Cache.Prepare(r.Stream, "", d.Candidates, true, enqueue); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N), "ns/candidate")
}
