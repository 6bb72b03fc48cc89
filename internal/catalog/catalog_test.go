package catalog_test

import (
	"errors"
	"math/rand"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/cachetest"
	discovery "github.com/lanesched/lanes/internal/discovery"

	catalog "github.com/lanesched/lanes/internal/catalog"
	"github.com/lanesched/lanes/programs"
)

const runtime = "lanes-test-runtime"

func id(name string) programs.ID { return programs.ID{Runtime: runtime, Name: name} }

type rig struct {
	*cachetest.Rig
	cat *catalog.Catalog
}

func newRig(t *testing.T, counters int, faults ...sim.Fault) rig {
	r := cachetest.New(t, counters, faults...)
	return rig{r, catalog.New(runtime, r.Cache)}
}

// register runs a batch and registers it as program name.
func (r rig) register(capture programs.Capture, cmds []discovery.Command, quiescent bool) error {
	r.T.Helper()
	d, rep := r.Run(cmds, quiescent, capture.EagerBoundaries...)
	for _, k := range rep.Evicted {
		if _, err := r.cat.Evict(k); err != nil {
			r.T.Fatalf("Catalog.Evict(%v): got err %v, want nil", k.Short(), err)
		}
	}
	_, err := r.cat.Register(capture, cmds, d, rep)
	if ierr := r.cat.CheckInvariants(); ierr != nil {
		r.T.Fatalf("after Register(%v), CheckInvariants: got %v, want nil", capture.ID, ierr)
	}
	return err
}

func (r rig) program(name string) programs.Descriptor {
	r.T.Helper()
	if _, err := r.Cache.Seal(); err != nil {
		r.T.Fatalf("Seal: got err %v, want nil", err)
	}
	all, err := r.cat.Programs()
	if err != nil {
		r.T.Fatalf("Programs: got err %v, want nil", err)
	}
	for _, p := range all {
		if p.ID == id(name) {
			return p
		}
	}
	r.T.Fatalf("catalog: got programs %v, want one named %s", all, name)
	return programs.Descriptor{}
}

func gapReasons(d programs.Descriptor) map[int]cache.Reason {
	out := map[int]cache.Reason{}
	for _, g := range d.Gaps {
		out[g.Node] = g.Reason
	}
	return out
}

func TestRegisterGapReasons(t *testing.T) {
	r := newRig(t, 4)
	_, _ = r.Cache.Configure(8)
	noKey := r.Inc(1, 2)
	noKey.HasKey = false
	noScope := r.Inc(1, 3)
	noScope.Scopes = nil
	lane1, lane2 := r.Inc(2, 4), r.Inc(3, 5)
	lane1.Scopes = []cache.Scope{cache.LaneScope(1)}
	lane2.Scopes = []cache.Scope{cache.LaneScope(2)}
	batch := []discovery.Command{
		r.Inc(0, 0), r.Inc(0, 1), // one resident segment over nodes 0..2
		noKey,        // node 2
		r.Barrier(0), // input phase, no node
		noScope,      // node 3
		lane1, lane2, // nodes 4, 5: a run over two lanes
		r.Inc(1, 7), // node 7: an eager boundary
		// node 6: no command at all
	}
	capture := programs.Capture{ID: id("decode"), Nodes: 8, EagerBoundaries: []int{7}, Bindings: []int{1}}
	if err := r.register(capture, batch, true); err != nil {
		t.Fatalf("register: got err %v, want nil", err)
	}
	p := r.program("decode")
	if want := (programs.Segment{Ordinal: 0, Start: 0, End: 2, Commands: 2}); len(p.Segments) != 1 || p.Segments[0] != want {
		t.Fatalf("got segments %+v, want [%+v]", p.Segments, want)
	}
	want := map[int]cache.Reason{2: cache.ReasonProviderKeyMissing, 3: cache.ReasonAddressScopeMissing,
		4: cache.ReasonAddressScopeConflict, 5: cache.ReasonAddressScopeConflict, 6: cache.ReasonMissingComputeCommand}
	if got := gapReasons(p); len(got) != len(want) {
		t.Fatalf("got gaps %v, want %v", got, want)
	} else {
		for n, reason := range want {
			if got[n] != reason {
				t.Fatalf("gap at node %d: got %v, want %v", n, got[n], reason)
			}
		}
	}
	if len(p.SegmentBindings) != 1 || p.SegmentBindings[0] != 1 {
		t.Fatalf("got segment bindings %v, want [1]", p.SegmentBindings)
	}
	if p.DeterminismReady() {
		t.Fatal("DeterminismReady: got true, want false (the program has gaps)")
	}
}

// TestPreparationGapReasons: the gap of a node in a candidate that is not
// resident carries the candidate's disposition.
func TestPreparationGapReasons(t *testing.T) {
	cases := []struct {
		name   string
		faults []sim.Fault
		setup  func(r rig)
		quiet  bool
		want   cache.Reason
	}{
		{"capture rejected", []sim.Fault{{Kind: sim.FaultCaptureReject, Nth: 1}}, func(rig) {}, true, cache.ReasonCaptureRejected},
		{"cached rejection", []sim.Fault{{Kind: sim.FaultCaptureReject, Nth: 1}}, func(r rig) { r.Run(r.Segment(0), true) }, true, cache.ReasonCachedRejection},
		{"quiescence deferred", nil, func(rig) {}, false, cache.ReasonQuiescenceDeferred},
		{"capacity deferred", nil, func(r rig) {}, true, cache.ReasonCapacityDeferred},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t, 2, c.faults...)
			capacity := 4
			batch := r.Segment(0)
			nodes := 1
			if c.want == cache.ReasonCapacityDeferred {
				capacity = 1
				batch = []discovery.Command{r.Inc(1, 0), r.Barrier(0), r.Inc(0, 1)}
				nodes = 2
			}
			_, _ = r.Cache.Configure(capacity)
			c.setup(r)
			if err := r.register(programs.Capture{ID: id("p"), Nodes: nodes}, batch, c.quiet); err != nil {
				t.Fatalf("register: got err %v, want nil", err)
			}
			if got := gapReasons(r.program("p"))[nodes-1]; got != c.want {
				t.Fatalf("gap at node %d: got %v, want %v", nodes-1, got, c.want)
			}
		})
	}
	t.Run("outside preparation", func(t *testing.T) {
		// Registration happens only while preparation is open, so this reason
		// reaches a program only from a report of a batch prepared before:
		// the mapping is checked on such a report directly.
		r := newRig(t, 1)
		batch := r.Segment(0)
		d, rep := r.Run(batch, true) // unconfigured: outside preparation
		_, _ = r.Cache.Configure(2)
		if _, err := r.cat.Register(programs.Capture{ID: id("p"), Nodes: 1}, batch, d, rep); err != nil {
			t.Fatalf("Register: got err %v, want nil", err)
		}
		if got := gapReasons(r.program("p"))[0]; got != cache.ReasonOutsidePreparation {
			t.Fatalf("gap at node 0: got %v, want %v", got, cache.ReasonOutsidePreparation)
		}
	})
}

func TestRegisterRejects(t *testing.T) {
	r := newRig(t, 2)
	batch := r.Segment(0, 1)
	if ok, err := r.cat.Register(programs.Capture{ID: id("p"), Nodes: 2}, batch, discovery.Discovery{}, discovery.PrepareReport{}); ok || err != nil {
		t.Fatalf("Register outside preparation: got (%v, %v), want (false, nil)", ok, err)
	}
	_, _ = r.Cache.Configure(4)
	cases := map[string]struct {
		capture programs.Capture
		want    error
	}{
		"foreign runtime":     {programs.Capture{ID: programs.ID{Runtime: "other", Name: "p"}, Nodes: 2}, programs.ErrForeignRuntime},
		"no nodes":            {programs.Capture{ID: id("p")}, programs.ErrTopology},
		"unsorted bounds":     {programs.Capture{ID: id("p"), Nodes: 3, EagerBoundaries: []int{2, 1}}, programs.ErrTopology},
		"binding is eager":    {programs.Capture{ID: id("p"), Nodes: 3, EagerBoundaries: []int{2}, Bindings: []int{2}}, programs.ErrTopology},
		"node beyond capture": {programs.Capture{ID: id("p"), Nodes: 1}, programs.ErrRegistration},
	}
	for name, c := range cases {
		d, rep := r.Run(batch, true)
		_, err := r.cat.Register(c.capture, batch, d, rep)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got err %v, want one wrapping %v", name, err, c.want)
		}
		t.Logf("%s: %v", name, err)
	}
	d, rep := r.Run(batch, true)
	rep.Dispositions = nil
	if _, err := r.cat.Register(programs.Capture{ID: id("p"), Nodes: 2}, batch, d, rep); !errors.Is(err, programs.ErrRegistration) {
		t.Fatalf("Register with mismatched attribution lengths: got err %v, want one wrapping programs.ErrRegistration", err)
	}
	split := []discovery.Command{r.Inc(0, 0), r.Inc(1, 2)} // one candidate over nodes 0 and 2
	if err := r.register(programs.Capture{ID: id("q"), Nodes: 3}, split, true); !errors.Is(err, programs.ErrRegistration) {
		t.Fatalf("register a non-contiguous resident segment: got err %v, want one wrapping programs.ErrRegistration", err)
	}
}

func TestMonotonicUpdates(t *testing.T) {
	r := newRig(t, 3)
	_, _ = r.Cache.Configure(8)
	capture := programs.Capture{ID: id("p"), Nodes: 3, Bindings: []int{0}}
	// Node 2 deferred at first, filled later: allowed.
	batch := []discovery.Command{r.Inc(0, 0), r.Inc(1, 1), r.Barrier(2), r.Inc(2, 2)}
	d, rep := r.Run(batch, true)
	rep.Dispositions[1] = discovery.DispositionQuiescenceDeferred // as if the stream had been busy
	if _, err := r.cat.Register(capture, batch, d, rep); err != nil {
		t.Fatalf("Register with node 1 deferred: got err %v, want nil", err)
	}
	if err := r.register(capture, batch, true); err != nil {
		t.Fatalf("register filling a gap: got err %v, want nil", err)
	}
	cases := map[string]struct {
		capture programs.Capture
		batch   []discovery.Command
	}{
		"topology changed":           {programs.Capture{ID: id("p"), Nodes: 4, Bindings: []int{0}}, batch},
		"segment changed executable": {capture, []discovery.Command{r.Inc(1, 0), r.Inc(0, 1), r.Barrier(2), r.Inc(2, 2)}},
		"segment disappeared":        {capture, []discovery.Command{r.Inc(0, 0), r.Barrier(1), r.Inc(1, 1), r.Barrier(2), r.Inc(2, 2)}},
		"bindings changed":           {programs.Capture{ID: id("p"), Nodes: 3, Bindings: []int{1}}, batch},
	}
	for name, c := range cases {
		err := r.register(c.capture, c.batch, true)
		if !errors.Is(err, programs.ErrMonotonic) {
			t.Errorf("%s: got err %v, want one wrapping programs.ErrMonotonic", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
}

func TestEvictionRewritesPrograms(t *testing.T) {
	r := newRig(t, 3)
	_, _ = r.Cache.Configure(8)
	batch := []discovery.Command{r.Inc(0, 0), r.Barrier(2), r.Inc(1, 1), r.Barrier(2), r.Inc(2, 2)}
	if err := r.register(programs.Capture{ID: id("p"), Nodes: 3, Bindings: []int{0, 2}}, batch, true); err != nil {
		t.Fatalf("register: got err %v, want nil", err)
	}
	d, _ := discovery.Discover(batch, nil)
	victim := d.Candidates[0].Key
	if !r.Cache.Evict(victim, true) {
		t.Fatalf("Cache.Evict(%v): got false, want true (the segment is resident)", victim.Short())
	}
	if n, err := r.cat.Evict(victim); n != 1 || err != nil {
		t.Fatalf("Catalog.Evict: got (%d programs rewritten, err %v), want (1, nil)", n, err)
	}
	p := r.program("p")
	if len(p.Segments) != 2 || p.Segments[0].Ordinal != 0 || p.Segments[0].Start != 1 || p.Segments[1].Ordinal != 1 {
		t.Fatalf("after eviction: got segments %+v, want two, ordinals 0 and 1, the first starting at node 1", p.Segments)
	}
	if got := gapReasons(p)[0]; got != cache.ReasonEvicted {
		t.Fatalf("gap at node 0: got %v, want %v (gaps %v)", got, cache.ReasonEvicted, p.Gaps)
	}
	if len(p.SegmentBindings) != 1 || p.SegmentBindings[0] != 2 {
		t.Fatalf("got segment bindings %v, want [2]", p.SegmentBindings)
	}
	// A program left with no segment is forgotten: the catalog holds no
	// more programs than the cache holds executables.
	for _, c := range d.Candidates[1:] {
		r.Cache.Evict(c.Key, true)
		if _, err := r.cat.Evict(c.Key); err != nil {
			t.Fatalf("Catalog.Evict(%v): got err %v, want nil", c.Key.Short(), err)
		}
	}
	if all, err := r.cat.Programs(); err != nil || len(all) != 0 {
		t.Fatalf("after every segment was evicted: got %d programs (err %v), want 0 (nil)", len(all), err)
	}
	if err := (programs.Capture{ID: programs.ID{Runtime: runtime, Name: strings.Repeat("n", programs.MaxIDBytes+1)}, Nodes: 1}).Validate(); !errors.Is(err, programs.ErrTopology) {
		t.Fatalf("Validate of a %d-byte program name: got err %v, want one wrapping programs.ErrTopology", programs.MaxIDBytes+1, err)
	}
}

func TestCatalogAndInvocations(t *testing.T) {
	r := newRig(t, 2)
	_, _ = r.Cache.Configure(8)
	for _, name := range []string{"b", "a"} {
		if err := r.register(programs.Capture{ID: id(name), Nodes: 2}, r.Segment(0, 1), true); err != nil {
			t.Fatalf("register %s: got err %v, want nil", name, err)
		}
	}
	if _, err := r.cat.Programs(); !errors.Is(err, programs.ErrNotSealed) {
		t.Fatalf("Programs before Seal: got err %v, want one wrapping programs.ErrNotSealed", err)
	}
	inv := programs.Invocation{Program: id("a"), Segment: programs.Segment{Ordinal: 0, Start: 0, End: 2, Commands: 2}}
	if _, err := r.cat.Resolve(inv, false); !errors.Is(err, programs.ErrNotSealed) {
		t.Fatalf("Resolve before Seal: got err %v, want one wrapping programs.ErrNotSealed", err)
	}
	r.program("a") // seals
	all, _ := r.cat.Programs()
	if len(all) != 2 || all[0].ID.Name != "a" || all[1].ID.Name != "b" {
		t.Fatalf("got catalog %v, want programs a and b, in that order", all)
	}
	res, err := r.cat.Resolve(inv, true)
	if err != nil {
		t.Fatalf("Resolve: got err %v, want nil", err)
	}
	if want := (programs.LogicalCommand{Ordinal: 1, Node: 1, GraphNodes: 1}); len(res.Logical) != 2 || res.Logical[1] != want {
		t.Fatalf("Resolve: got logical commands %+v, want two, the second %+v", res.Logical, want)
	}
	if _, err := r.Cache.Launch(r.Stream, res.Key); err != nil {
		t.Fatalf("Launch of the resolved key: got err %v, want nil", err)
	}
	bad := map[string]struct {
		inv  programs.Invocation
		want error
	}{
		"foreign runtime": {programs.Invocation{Program: programs.ID{Runtime: "x", Name: "a"}, Segment: inv.Segment}, programs.ErrForeignRuntime},
		"unknown program": {programs.Invocation{Program: id("zz"), Segment: inv.Segment}, programs.ErrUnknownProgram},
		"ordinal outside": {programs.Invocation{Program: id("a"), Segment: programs.Segment{Ordinal: 3}}, programs.ErrSegmentMismatch},
		"descriptor":      {programs.Invocation{Program: id("a"), Segment: programs.Segment{Ordinal: 0, Start: 0, End: 2, Commands: 3}}, programs.ErrSegmentMismatch},
	}
	for name, c := range bad {
		_, err := r.cat.Resolve(c.inv, false)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got err %v, want one wrapping %v", name, err, c.want)
		}
		t.Logf("%s: %v", name, err)
	}
	catalog.DropAttribution(r.cat, id("a"))
	if _, err := r.cat.Resolve(inv, true); !errors.Is(err, programs.ErrNoAttribution) {
		t.Fatalf("Resolve without attribution: got err %v, want one wrapping programs.ErrNoAttribution", err)
	}
	r.Cache.Evict(res.Key, true) // evicted from the cache, catalog not yet rewritten
	if _, err := r.cat.Resolve(inv, false); !errors.Is(err, programs.ErrNotResident) {
		t.Fatalf("Resolve of an evicted segment: got err %v, want one wrapping programs.ErrNotResident", err)
	}
	if _, err := r.cat.Programs(); !errors.Is(err, programs.ErrNotResident) {
		t.Fatalf("Programs over a non-resident executable: got err %v, want one wrapping programs.ErrNotResident", err)
	}
}

// TestCatalogInvariantsUnderRandomOperations: after any sequence of
// register, evict and trim, every segment is resident and every node is in
// exactly one of a segment, a boundary or a gap.
func TestCatalogInvariantsUnderRandomOperations(t *testing.T) {
	r := newRig(t, 5)
	_, _ = r.Cache.Configure(3)
	rng := rand.New(rand.NewSource(9))
	for step := range 300 {
		switch op := rng.Intn(10); {
		case op < 7:
			nodes := 1 + rng.Intn(4)
			var batch []discovery.Command
			var bounds []int
			for n := range nodes {
				if rng.Intn(5) == 0 {
					bounds = append(bounds, n)
				}
				if rng.Intn(3) == 0 && len(batch) > 0 {
					batch = append(batch, r.Barrier(rng.Intn(5)))
				}
				if rng.Intn(8) != 0 {
					batch = append(batch, r.Inc(rng.Intn(5), n))
				}
			}
			capture := programs.Capture{ID: id(string(rune('a' + rng.Intn(3)))), Nodes: nodes, EagerBoundaries: bounds}
			d, rep := r.Run(batch, rng.Intn(4) != 0, bounds...)
			for _, k := range rep.Evicted {
				if _, err := r.cat.Evict(k); err != nil {
					t.Fatalf("step %d: Catalog.Evict(%v): got err %v, want nil", step, k.Short(), err)
				}
			}
			if _, err := r.cat.Register(capture, batch, d, rep); err != nil && !errors.Is(err, programs.ErrMonotonic) && !errors.Is(err, programs.ErrRegistration) {
				t.Fatalf("step %d: Register: got err %v, want nil or one wrapping programs.ErrMonotonic or programs.ErrRegistration", step, err)
			}
		case op < 9:
			d, _ := discovery.Discover(r.Segment(rng.Intn(5)), nil)
			if r.Cache.Evict(d.Candidates[0].Key, true) {
				if _, err := r.cat.Evict(d.Candidates[0].Key); err != nil {
					t.Fatalf("step %d: Catalog.Evict(%v): got err %v, want nil", step, d.Candidates[0].Key.Short(), err)
				}
			}
		default:
			if _, err := r.Cache.Trim(true); err != nil {
				t.Fatalf("step %d: Trim: got err %v, want nil", step, err)
			}
			r.cat.Trim()
		}
		if err := r.cat.CheckInvariants(); err != nil {
			t.Fatalf("step %d: CheckInvariants: got %v, want nil", step, err)
		}
	}
}
