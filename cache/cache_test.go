package cache_test

import (
	"encoding/binary"
	"errors"
	"math/rand"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
)

type rig struct {
	t    *testing.T
	dev  *sim.Device
	s    cuda.Stream
	c    *cache.Cache
	bufs []cuda.Buffer
}

func newRig(t *testing.T, buffers int, faults ...sim.Fault) *rig {
	dev, err := sim.New(sim.Config{Clock: sim.ZeroCost, Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	s, err := dev.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, dev: dev, s: s, c: cache.New()}
	for range buffers {
		b, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatal(err)
		}
		z, _ := cuda.Zero(b.Whole())
		if err := s.Enqueue(z); err != nil {
			t.Fatal(err)
		}
		r.bufs = append(r.bufs, b)
	}
	return r
}

// inc is a replayable increment of buffer i.
func (r *rig) inc(i, node int) cache.Command {
	c, err := cuda.Launch(r.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(r.bufs[i].Whole()), cuda.I32Arg(16))
	if err != nil {
		r.t.Fatal(err)
	}
	return cache.Command{Cmd: c, Phase: cache.PhaseCompute, Node: node, Key: cache.LaunchKey("test", c), HasKey: true, Scopes: []cache.Scope{cache.PlanScope()}}
}

// segment is a batch of one candidate: increments of the given buffers.
func (r *rig) segment(bufs ...int) []cache.Command {
	var cmds []cache.Command
	for n, b := range bufs {
		cmds = append(cmds, r.inc(b, n))
	}
	return cmds
}

// barrier is a non-replayable command between segments.
func (r *rig) barrier(b int) cache.Command {
	z, _ := cuda.Zero(r.bufs[b].Whole())
	return cache.Command{Cmd: z, Phase: cache.PhaseInput, Node: cache.NoNode}
}

// run discovers, prepares and executes a batch as a lane would: resident
// candidates replayed, everything else eager.
func (r *rig) run(cmds []cache.Command, quiescent bool) cache.Report {
	r.t.Helper()
	d, err := cache.Discover(cmds, nil)
	if err != nil {
		r.t.Fatal(err)
	}
	enqueue := func(i int) error { return r.s.Enqueue(cmds[i].Cmd) }
	rep, err := r.c.Prepare(r.s, d.Candidates, quiescent, enqueue)
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.c.CheckInvariants(); err != nil {
		r.t.Fatal(err)
	}
	if len(rep.Dispositions) != len(d.Candidates) {
		r.t.Fatalf("%d dispositions for %d candidates", len(rep.Dispositions), len(d.Candidates))
	}
	next := 0
	for ci, cand := range d.Candidates {
		for i := next; i < cand.Start; i++ {
			if err := enqueue(i); err != nil {
				r.t.Fatal(err)
			}
		}
		next = cand.End
		if rep.Dispositions[ci].Resident() {
			if _, err := r.c.Launch(r.s, cand.Key); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		for i := cand.Start; i < cand.End; i++ {
			if err := enqueue(i); err != nil {
				r.t.Fatal(err)
			}
		}
	}
	for i := next; i < len(cmds); i++ {
		if err := enqueue(i); err != nil {
			r.t.Fatal(err)
		}
	}
	return rep
}

func (r *rig) count(b int) int32 {
	out := make([]byte, 4)
	reg, _ := r.bufs[b].Region(0, 4)
	if err := r.s.Readback(reg, out); err != nil {
		r.t.Fatal(err)
	}
	return int32(binary.LittleEndian.Uint32(out))
}

func wantDispositions(t *testing.T, rep cache.Report, want ...cache.Disposition) {
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
		if _, err := r.c.Configure(4); err != nil {
			t.Fatal(err)
		}
		rep := r.run(r.segment(0, 0, 1), true)
		wantDispositions(t, rep, cache.Captured)
		if rep.Captured != 1 || rep.Uploaded != 1 {
			t.Fatalf("report %+v", rep)
		}
		for range 3 {
			wantDispositions(t, r.run(r.segment(0, 0, 1), true), cache.Hit)
		}
		if r.count(0) != 8 || r.count(1) != 4 {
			t.Fatalf("counts %d %d after 4 steps, want 8 4", r.count(0), r.count(1))
		}
	})
	t.Run("outside preparation: unconfigured and sealed", func(t *testing.T) {
		r := newRig(t, 2)
		wantDispositions(t, r.run(r.segment(0), true), cache.OutsidePreparation)
		_, _ = r.c.Configure(2)
		wantDispositions(t, r.run(r.segment(0), true), cache.Captured)
		if _, err := r.c.Seal(); err != nil {
			t.Fatal(err)
		}
		rep := r.run(append(r.segment(0), append([]cache.Command{r.barrier(1)}, r.segment(1)...)...), true)
		wantDispositions(t, rep, cache.Hit, cache.OutsidePreparation)
		if cache.OutsidePreparation.Reason() != cache.ReasonOutsidePreparation {
			t.Fatal("reason mapping")
		}
	})
	t.Run("quiescence deferred", func(t *testing.T) {
		r := newRig(t, 1)
		_, _ = r.c.Configure(2)
		rep := r.run(r.segment(0), false)
		wantDispositions(t, rep, cache.QuiescenceDeferred)
		if rep.QuiescenceDeferred != 1 || r.c.Len() != 0 {
			t.Fatalf("report %+v", rep)
		}
	})
	t.Run("capacity deferred keeps what the batch needs", func(t *testing.T) {
		r := newRig(t, 3)
		_, _ = r.c.Configure(1)
		batch := append(r.segment(0), append([]cache.Command{r.barrier(2)}, r.segment(1)...)...)
		rep := r.run(batch, true)
		wantDispositions(t, rep, cache.Captured, cache.CapacityDeferred)
		rep = r.run(batch, true)
		wantDispositions(t, rep, cache.Hit, cache.CapacityDeferred)
		if len(rep.Evicted) != 0 {
			t.Fatal("evicted an executable the batch needs")
		}
	})
	t.Run("evicted least recently used", func(t *testing.T) {
		r := newRig(t, 3)
		_, _ = r.c.Configure(2)
		a, b, c := r.segment(0), r.segment(1), r.segment(2)
		r.run(a, true)
		r.run(b, true)
		r.run(a, true) // a is now more recent than b
		rep := r.run(c, true)
		wantDispositions(t, rep, cache.Captured)
		da, _ := cache.Discover(a, nil)
		db, _ := cache.Discover(b, nil)
		if len(rep.Evicted) != 1 || rep.Evicted[0] != db.Candidates[0].Key {
			t.Fatalf("evicted %v, want b", rep.Evicted)
		}
		if _, ok := r.c.Lookup(da.Candidates[0].Key); !ok {
			t.Fatal("a was evicted instead")
		}
	})
	t.Run("capture rejected, then cached rejection", func(t *testing.T) {
		r := newRig(t, 1, sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1})
		_, _ = r.c.Configure(2)
		rep := r.run(r.segment(0), true)
		wantDispositions(t, rep, cache.CaptureRejected)
		var re *cache.ReplayError
		if len(rep.Rejections) != 1 || !errors.As(rep.Rejections[0], &re) || !re.EagerFallbackSafe || !errors.Is(re, cuda.ErrCaptureUnsupported) {
			t.Fatalf("rejection %v", rep.Rejections)
		}
		rep = r.run(r.segment(0), true)
		wantDispositions(t, rep, cache.CachedRejection)
		if r.count(0) != 2 {
			t.Fatalf("count %d: both steps must have run eagerly", r.count(0))
		}
		if p := r.c.Preparation(); p.Rejected != 1 || p.Resident != 0 {
			t.Fatalf("preparation %+v", p)
		}
	})
}

func TestPanickingCommandEndsCapture(t *testing.T) {
	r := newRig(t, 1)
	_, _ = r.c.Configure(2)
	cmds := r.segment(0, 0)
	d, _ := cache.Discover(cmds, nil)
	_, err := r.c.Prepare(r.s, d.Candidates, true, func(i int) error {
		if i == 1 {
			panic("provider bug")
		}
		return r.s.Enqueue(cmds[i].Cmd)
	})
	var re *cache.ReplayError
	if !errors.As(err, &re) || re.EagerFallbackSafe || re.Stage != "encode capture" {
		t.Fatalf("panic during capture: %v", err)
	}
	if r.s.Capture() != cuda.CaptureNone {
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
	if err != nil || p.State != cache.Open || p.Capacity != 3 {
		t.Fatalf("configure: %+v %v", p, err)
	}
	if _, err := c.Configure(3); !errors.Is(err, cache.ErrAlreadyOpen) {
		t.Fatalf("configure twice: %v", err)
	}
	if p, err := c.Seal(); err != nil || p.State != cache.Ready {
		t.Fatalf("seal: %+v %v", p, err)
	}
	if _, err := c.Configure(2); err != nil {
		t.Fatalf("reopen after seal: %v", err)
	}
}

func TestTrimAndRetire(t *testing.T) {
	r := newRig(t, 3)
	_, _ = r.c.Configure(1)
	r.run(r.segment(0), true)
	r.run(r.segment(1), false) // deferred: not quiescent
	if _, err := r.c.Trim(false); !errors.Is(err, cache.ErrNotQuiescent) {
		t.Fatalf("trim with work in flight: %v", err)
	}
	d, _ := cache.Discover(r.segment(0), nil)
	if !r.c.Evict(d.Candidates[0].Key, false) || r.c.Retired() != 1 {
		t.Fatal("an eviction with work in flight must retire, not destroy")
	}
	if r.c.ReleaseRetired(false) != 0 || r.c.ReleaseRetired(true) != 1 {
		t.Fatal("retired executables are destroyed only at a quiescent point")
	}
	r.run(r.segment(2), true)
	tr, err := r.c.Trim(true)
	if err != nil || tr.Executables != 1 || r.c.Len() != 0 {
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
	_, _ = r.c.Configure(capacity)
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
			if rep.Dispositions[i] == cache.Hit {
				if model[c.Key] == nil {
					t.Fatalf("step %d: hit on a key the model lacks", step)
				}
				clock++
				model[c.Key].used = clock
			}
		}
		for i, c := range d.Candidates {
			switch disp := rep.Dispositions[i]; disp {
			case cache.Hit:
			case cache.Captured:
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
			case cache.CapacityDeferred:
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
		if r.c.Len() != len(model) || r.c.Len() > capacity {
			t.Fatalf("step %d: %d residents, model %d", step, r.c.Len(), len(model))
		}
	}
}

// BenchmarkPrepareHit measures a cache lookup on the replay path: one
// batch of four resident candidates.
func BenchmarkPrepareHit(b *testing.B) {
	t := &testing.T{}
	r := newRig(t, 4)
	_, _ = r.c.Configure(8)
	var cmds []cache.Command
	for i := range 4 {
		if i > 0 {
			cmds = append(cmds, r.barrier(i))
		}
		cmds = append(cmds, r.segment(i)...)
	}
	d, _ := cache.Discover(cmds, nil)
	enqueue := func(i int) error { return r.s.Enqueue(cmds[i].Cmd) }
	if _, err := r.c.Prepare(r.s, d.Candidates, true, enqueue); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := r.c.Prepare(r.s, d.Candidates, true, enqueue); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(4*b.N), "ns/candidate")
}
