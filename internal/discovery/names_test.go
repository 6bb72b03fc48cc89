package discovery_test

import (
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"
)

// A disposition says whether its candidate stays resident and, when it
// does not, which reason the receipt gives.
func TestDispositionsMapToReasons(t *testing.T) {
	resident := map[discovery.Disposition]bool{discovery.DispositionHit: true, discovery.DispositionCaptured: true, discovery.DispositionUpdated: true}
	reasons := map[discovery.Disposition]cache.Reason{
		discovery.DispositionCaptureRejected:    cache.ReasonCaptureRejected,
		discovery.DispositionCachedRejection:    cache.ReasonCachedRejection,
		discovery.DispositionQuiescenceDeferred: cache.ReasonQuiescenceDeferred,
		discovery.DispositionCapacityDeferred:   cache.ReasonCapacityDeferred,
		discovery.DispositionOutsidePreparation: cache.ReasonOutsidePreparation,
	}
	for d := discovery.DispositionHit; d <= discovery.DispositionOutsidePreparation; d++ {
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
	k := discovery.Bind(pk, c)
	if len(pk.String()) != 64 || len(k.String()) != 64 || pk.String() == k.String() {
		t.Fatalf("provider key %q, bound key %q: want two distinct 64-digit fingerprints", pk, k)
	}
	d, err := discovery.Discover([]discovery.Command{{Cmd: c, Key: pk, HasKey: true, Node: 0, Phase: cache.PhaseCompute, Scopes: []cache.Scope{cache.PlanScope()}}}, nil)
	if err != nil || len(d.Candidates) != 1 {
		t.Fatalf("discover one keyed compute command: %v, %d candidates; want one", err, len(d.Candidates))
	}
	seg := d.Candidates[0].Key
	if s := seg.String(); len(s) != 64 || seg.Short() != s[:12] {
		t.Fatalf("segment key %q, short %q", s, seg.Short())
	}
	bound := discovery.Command{Cmd: c, Key: pk, HasKey: true, Scopes: []cache.Scope{cache.PlanScope()}}.Bind()
	if bound.Key != k {
		t.Fatalf("Command.Bind gave key %s, Bind gave %s", bound.Key, k)
	}
	m := discovery.NewMemo(4)
	m.Release()
	(*discovery.Memo)(nil).Release()
}
