package cache_test

import (
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// The snake_case names of reasons, dispositions, stages, phases, scopes
// and states are a contract: spans, metrics and reports carry them, and
// dashboards match on them. Each is distinct, and out-of-range values
// read as "none" or "unknown" rather than panic.
func TestNamesAreStableAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range cache.Reasons() {
		s := r.String()
		if s == "" || s == "unknown" || seen[s] || strings.ContainsAny(s, " -") {
			t.Fatalf("reason %d: name %q (empty, unknown, repeated or not snake_case)", r, s)
		}
		seen[s] = true
	}
	if len(seen) != 13 || cache.ReasonNone.String() != "replayed" || cache.Reason(200).String() != "unknown" {
		t.Fatalf("reasons: %d names, none %q, out of range %q; want 13, replayed, unknown", len(seen), cache.ReasonNone, cache.Reason(200))
	}
	want := []string{"capture", "instantiate", "upload", "update", "rebind"}
	for i, s := range cache.Stages() {
		if s.String() != want[i] {
			t.Fatalf("stage %d is %q, want %q", i, s, want[i])
		}
	}
	for _, c := range []struct{ got, want string }{
		{cache.Stage(0).String(), "none"},
		{cache.Stage(99).String(), "none"},
		{cache.DispositionHit.String(), "hit"},
		{cache.DispositionOutsidePreparation.String(), "outside_preparation"},
		{cache.Disposition(0).String(), "none"},
		{cache.UpdateByGraph.String(), "graph"},
		{cache.UpdateByParameters.String(), "parameters"},
		{cache.UpdateKind(0).String(), "none"},
		{cache.PrepUnconfigured.String(), "unconfigured"},
		{cache.PrepOpen.String(), "open"},
		{cache.PrepSealed.String(), "sealed"},
		{cache.PhaseCompute.String(), "compute"},
		{cache.PhaseReadout.String(), "readout"},
		{cache.Phase(77).String(), "unknown"},
		{cache.PlanScope().String(), "plan"},
		{cache.LaneScope(3).String(), "lane:3"},
		{cache.Scope{}.String(), "none"},
	} {
		if c.got != c.want {
			t.Fatalf("name %q, want %q", c.got, c.want)
		}
	}
}

// A disposition says whether its candidate stays resident and, when it
// does not, which reason the receipt gives.
func TestDispositionsMapToReasons(t *testing.T) {
	resident := map[cache.Disposition]bool{cache.DispositionHit: true, cache.DispositionCaptured: true, cache.DispositionUpdated: true}
	reasons := map[cache.Disposition]cache.Reason{
		cache.DispositionCaptureRejected:    cache.ReasonCaptureRejected,
		cache.DispositionCachedRejection:    cache.ReasonCachedRejection,
		cache.DispositionQuiescenceDeferred: cache.ReasonQuiescenceDeferred,
		cache.DispositionCapacityDeferred:   cache.ReasonCapacityDeferred,
		cache.DispositionOutsidePreparation: cache.ReasonOutsidePreparation,
	}
	for d := cache.DispositionHit; d <= cache.DispositionOutsidePreparation; d++ {
		if d.Resident() != resident[d] {
			t.Fatalf("%s: resident %v, want %v", d, d.Resident(), resident[d])
		}
		if want, ok := reasons[d]; ok && d.Reason() != want {
			t.Fatalf("%s: reason %s, want %s", d, d.Reason(), want)
		}
		if resident[d] && d.Reason() != cache.ReasonNone {
			t.Fatalf("%s is resident but gives reason %s", d, d.Reason())
		}
	}
}

// Keys print as their hex fingerprints; a segment's short name is the
// first 12 digits of its full one.
func TestKeysPrintAsHex(t *testing.T) {
	b := cuda.Buffer{Device: 1, ID: 7, Size: 1 << 20, Align: 256, Elem: cuda.F32, Addr: 1 << 20}
	c, err := cuda.Zero(b.Whole())
	if err != nil {
		t.Fatal(err)
	}
	pk := cache.LaunchKey("test", c)
	k := cache.Bind(pk, c)
	if len(pk.String()) != 64 || len(k.String()) != 64 || pk.String() == k.String() {
		t.Fatalf("provider key %q, bound key %q: want two distinct 64-digit fingerprints", pk, k)
	}
	d, err := cache.Discover([]cache.Command{{Cmd: c, Key: pk, HasKey: true, Node: 0, Phase: cache.PhaseCompute, Scopes: []cache.Scope{cache.PlanScope()}}}, nil)
	if err != nil || len(d.Candidates) != 1 {
		t.Fatalf("discover one keyed compute command: %v, %d candidates; want one", err, len(d.Candidates))
	}
	seg := d.Candidates[0].Key
	if s := seg.String(); len(s) != 64 || seg.Short() != s[:12] {
		t.Fatalf("segment key %q, short %q", s, seg.Short())
	}
	bound := cache.Command{Cmd: c, Key: pk, HasKey: true, Scopes: []cache.Scope{cache.PlanScope()}}.Bind()
	if bound.Key != k {
		t.Fatalf("Command.Bind gave key %s, Bind gave %s", bound.Key, k)
	}
	m := cache.NewMemo(4)
	m.Release()
	(*cache.Memo)(nil).Release()
}
