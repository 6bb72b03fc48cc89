package execcache_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/cachetest"
	"github.com/lanesched/lanes/internal/testdev"

	discovery "github.com/lanesched/lanes/internal/discovery"
)

// oneNode and twoNodes are the simulated device's device bytes of an
// executable of one and of two nodes (its cost model, measured on the GPU).
var (
	oneNode  = int64(backend.ExecBytesBase + backend.ExecBytesPerNode)
	twoNodes = int64(backend.ExecBytesBase + 2*backend.ExecBytesPerNode)
)

// TestDeviceBytesCounted: every resident is charged what its device
// measured, the cache's total is their sum, and each owner's share of it
// is reported.
func TestDeviceBytesCounted(t *testing.T) {
	r := cachetest.New(t, 4)
	if _, err := r.Cache.Configure(8); err != nil {
		t.Fatalf("Configure(8): got err %v, want nil", err)
	}
	r.Owner = "a"
	r.Run(r.Segment(0), true)
	r.Owner = "b"
	r.Run(r.Segment(1, 2), true)
	if got, want := r.Cache.DeviceBytes(), oneNode+twoNodes; got != want {
		t.Fatalf("DeviceBytes: got %d, want %d (one executable of one node and one of two)", got, want)
	}
	by := r.Cache.DeviceBytesByOwner()
	if by["a"] != oneNode || by["b"] != twoNodes {
		t.Fatalf("DeviceBytesByOwner: got %v, want a=%d b=%d", by, oneNode, twoNodes)
	}
	if _, err := r.Cache.Trim(true); err != nil {
		t.Fatalf("Trim: got err %v, want nil", err)
	}
	if got := r.Cache.DeviceBytes(); got != 0 {
		t.Fatalf("DeviceBytes after Trim: got %d, want 0", got)
	}
}

// TestDeviceBytesBound: the residents hold at most the device-byte bound,
// a tenant within its device-byte share keeps its executables while a
// neighbour churns, and a segment larger than the bound stays eager.
func TestDeviceBytesBound(t *testing.T) {
	r := cachetest.New(t, 8)
	if _, err := r.Cache.Configure(64); err != nil {
		t.Fatalf("Configure(64): got err %v, want nil", err)
	}
	limit := oneNode + 3*twoNodes
	r.Cache.LimitDeviceBytes(limit)
	r.Owner = "steady"
	keep := r.Segment(0)
	r.Run(keep, true)
	r.Owner = "big"
	captured := 0
	for i := range 24 {
		_, rep := r.Run(r.Segment(1+i%7, 1+(i/7)%7), true)
		captured += rep.Captured + rep.Updated
		if b := r.Cache.DeviceBytes(); b > limit {
			t.Fatalf("after %d batches: got %d device bytes held, want at most the bound %d", i+1, b, limit)
		}
	}
	if captured == 0 {
		t.Fatal("the churning tenant captured nothing: want it to use its share")
	}
	if !resident(r, keep) {
		t.Fatal("the steady tenant's executable, within its device-byte share: got evicted, want resident")
	}
	if by := r.Cache.DeviceBytesByOwner(); by["big"] > limit-oneNode {
		t.Fatalf("the churning tenant holds %d device bytes, more than the bound less the steady tenant's share", by["big"])
	}
	// A segment larger than the whole bound never becomes resident (its
	// estimate is known once an executable was made).
	_, rep := r.Run(r.Segment(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
		0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
		0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
		0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
		0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7,
		0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7), true)
	if rep.Captured != 0 || rep.CapacityDeferred == 0 {
		t.Fatalf("a 192-node segment against a bound of %d device bytes: got Captured %d, CapacityDeferred %d; want 0 and 1 (report %+v)", limit, rep.Captured, rep.CapacityDeferred, rep)
	}
}

// TestDeviceBytesShed: a miss admitted before the cache knew what an
// executable costs is destroyed once instantiated if it does not fit, and
// counted (DeviceDeferred); the bound holds.
func TestDeviceBytesShed(t *testing.T) {
	r := cachetest.New(t, 4)
	if _, err := r.Cache.Configure(8); err != nil {
		t.Fatalf("Configure(8): got err %v, want nil", err)
	}
	r.Cache.LimitDeviceBytes(oneNode - 1)
	_, rep := r.Run(r.Segment(0), true)
	if rep.Captured != 0 || rep.DeviceDeferred != 1 || rep.CapacityDeferred != 1 {
		t.Fatalf("an executable over the bound: got Captured %d, DeviceDeferred %d, CapacityDeferred %d; want 0, 1, 1", rep.Captured, rep.DeviceDeferred, rep.CapacityDeferred)
	}
	if _, rep = r.Run(r.Segment(1), true); rep.DeviceDeferred != 0 || rep.CapacityDeferred != 1 {
		t.Fatalf("the next miss: got DeviceDeferred %d, CapacityDeferred %d; want it deferred on the estimate (0, 1)", rep.DeviceDeferred, rep.CapacityDeferred)
	}
	if got := r.Cache.DeviceBytes(); got != 0 {
		t.Fatalf("DeviceBytes: got %d, want 0", got)
	}
}

// TestRebindInPlace: a full cache meets a miss whose shape a resident has:
// the resident takes the miss's parameters in place without a capture,
// and its replays touch the new buffers only, as a fresh capture's would.
func TestRebindInPlace(t *testing.T) {
	r := cachetest.New(t, 6)
	if _, err := r.Cache.Configure(1); err != nil {
		t.Fatalf("Configure(1): got err %v, want nil", err)
	}
	r.Run(r.Segment(0, 1), true)
	_, rep := r.Run(r.Segment(2, 3), true)
	if rep.Updated != 1 || rep.Captured != 0 || len(rep.Updates) != 1 || rep.Updates[0].InPlace != discovery.UpdateByParameters {
		t.Fatalf("a miss of a resident's shape in a full cache: got %+v, want one update by parameters", rep)
	}
	var stages []cache.Stage
	for _, tm := range rep.Timings {
		stages = append(stages, tm.Stage)
	}
	if len(stages) != 0 {
		t.Fatalf("timings without a clock: got %v, want none", stages)
	}
	r.Run(r.Segment(2, 3), true) // a hit
	if a, b, c, d := r.Count(0), r.Count(1), r.Count(2), r.Count(3); a != 1 || b != 1 || c != 2 || d != 2 {
		t.Fatalf("counters 0..3: got %d %d %d %d, want 1 1 2 2: the rebound executable must touch buffers 2 and 3 only", a, b, c, d)
	}
	// The same through a fresh cache that captures them: same bytes.
	fresh := cachetest.New(t, 6)
	if _, err := fresh.Cache.Configure(1); err != nil {
		t.Fatalf("Configure(1): got err %v, want nil", err)
	}
	for range 2 {
		fresh.Run(fresh.Segment(2, 3), true)
	}
	if c, d := fresh.Count(2), fresh.Count(3); c != r.Count(2) || d != r.Count(3) {
		t.Fatalf("a fresh capture's replays wrote %d %d, the rebound executable's %d %d", c, d, r.Count(2), r.Count(3))
	}
}

// TestRebindRefusals: a miss whose commands a resident of its shape cannot
// take in place (an upload node) is captured and updated from the graph,
// the refusal reported with its reason once: the shape is not tried again.
func TestRebindRefusals(t *testing.T) {
	r := cachetest.New(t, 6)
	if _, err := r.Cache.Configure(1); err != nil {
		t.Fatalf("Configure(1): got err %v, want nil", err)
	}
	uploadAt := func(buf int) discovery.Command {
		data := make([]byte, 64)
		data[0] = byte(buf)
		up, _ := cuda.Upload(r.Bufs[buf].Whole(), data)
		return discovery.Command{Cmd: up, Phase: cache.PhaseCompute, Node: 1, Key: cache.NewKey("test", "upload").Bytes(data).Finish(), HasKey: true, Scopes: []cache.Scope{cache.PlanScope()}}
	}
	r.Run([]discovery.Command{r.Inc(0, 0), uploadAt(1)}, true)
	_, rep := r.Run([]discovery.Command{r.Inc(2, 0), uploadAt(3)}, true)
	var refused *backend.RebindRefusedError
	if len(rep.RebindRefusals) != 1 || !errors.As(rep.RebindRefusals[0], &refused) || refused.Refusal != backend.RebindNodeKind {
		t.Fatalf("got rebind refusals %v, want one %s", rep.RebindRefusals, backend.RebindNodeKind)
	}
	if len(rep.Updates) != 1 || rep.Updates[0].InPlace != discovery.UpdateByGraph {
		t.Fatalf("got updates %+v, want one by graph after the refusal", rep.Updates)
	}
	_, rep = r.Run([]discovery.Command{r.Inc(4, 0), uploadAt(5)}, true)
	if len(rep.RebindRefusals) != 0 || len(rep.Updates) != 1 || rep.Updates[0].InPlace != discovery.UpdateByGraph {
		t.Fatalf("the same shape again: got rebind refusals %v and updates %+v, want none and one by graph", rep.RebindRefusals, rep.Updates)
	}
}

// TestDeviceBoundFullUpdatesInPlace: a cache full by its device-byte bound
// (not its count) meeting a miss of a resident's shape updates it in place,
// as a cache full by count does; with the device's own figure (SetSizer) a
// segment that fits is admitted beside a smaller one (found from outside:
// bytes per node of a one-node executable made every larger one look too
// big, and the device bound never updated in place).
func TestDeviceBoundFullUpdatesInPlace(t *testing.T) {
	r := cachetest.New(t, 8)
	if _, err := r.Cache.Configure(64); err != nil {
		t.Fatalf("Configure(64): got err %v, want nil", err)
	}
	r.Cache.SetSizer(testdev.Sim(r.Dev).ExecBytes)
	r.Cache.LimitDeviceBytes(2 * twoNodes)
	r.Run(r.Segment(0, 1), true)
	r.Run(r.Segment(2, 3), true)
	_, rep := r.Run(r.Segment(4, 5), true)
	if rep.Updated != 1 || len(rep.Updates) != 1 || rep.Updates[0].InPlace != discovery.UpdateByParameters {
		t.Fatalf("a miss of a resident's shape in a cache full by device bytes: got %+v, want one update by parameters", rep)
	}
	r = cachetest.New(t, 8)
	if _, err := r.Cache.Configure(64); err != nil {
		t.Fatalf("Configure(64): got err %v, want nil", err)
	}
	r.Cache.SetSizer(testdev.Sim(r.Dev).ExecBytes)
	r.Cache.LimitDeviceBytes(1 << 20)
	r.Run(r.Segment(0), true)
	if _, rep := r.Run(r.Segment(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7), true); rep.Captured != 1 {
		t.Fatalf("a 16-node segment that fits beside a 1-node one: got %+v, want it captured", rep)
	}
}

// TestDeviceRefusalsPauseRebinds: on a sealed cache, a shape whose rebinds
// the device refuses every time is tried eight times in a row, then not
// again for a while (a driver that refuses a kind of node would otherwise
// cost a refused rebind at every step); the resident keeps replaying its
// own key throughout.
func TestDeviceRefusalsPauseRebinds(t *testing.T) {
	r := cachetest.New(t, 8, sim.Fault{Kind: sim.FaultUpdateReject, Rate: 1})
	if _, err := r.Cache.Configure(1); err != nil {
		t.Fatalf("Configure(1): got err %v, want nil", err)
	}
	r.Owner = "a"
	own := r.Segment(0, 1)
	r.Run(own, true)
	if _, err := r.Cache.Seal(); err != nil {
		t.Fatalf("Seal: got err %v, want nil", err)
	}
	refusals := 0
	for i := range 20 {
		r.Owner = fmt.Sprintf("t%d", i)
		_, rep := r.Run(r.Segment(2+i%6, 3), true)
		refusals += len(rep.RebindRefusals)
		if rep.Updated != 0 || rep.OutsidePreparation != 1 {
			t.Fatalf("batch %d: got %d updated, %d outside preparation; want the miss eager", i, rep.Updated, rep.OutsidePreparation)
		}
	}
	if refusals != 8 {
		t.Fatalf("got %d rebinds refused in 20 batches, want 8, then none tried", refusals)
	}
	r.Owner = "a"
	if _, rep := r.Run(own, true); rep.Hits != 1 {
		t.Fatalf("the resident's own batch after the refusals: got %d hits, want 1", rep.Hits)
	}
}
