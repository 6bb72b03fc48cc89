package cache_test

import (
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	discovery "github.com/lanesched/lanes/internal/discovery"
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
		{discovery.DispositionHit.String(), "hit"},
		{discovery.DispositionOutsidePreparation.String(), "outside_preparation"},
		{discovery.Disposition(0).String(), "none"},
		{discovery.UpdateByGraph.String(), "graph"},
		{discovery.UpdateByParameters.String(), "parameters"},
		{discovery.UpdateKind(0).String(), "none"},
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
