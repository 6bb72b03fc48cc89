package lanecore_test

import (
	"errors"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// FuzzSubmit builds batches from arbitrary bytes: every batch either is
// accepted, and then ends in exactly one receipt, or is refused with a typed
// *lanes.Error; the lane never panics.
func FuzzSubmit(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{9, 200, 13, 77, 5, 250, 3, 3, 3, 1, 2})
	r := newRig(f, sim.ClockZeroCost, 3)
	_, _ = r.lane.Configure(4)
	f.Fuzz(func(t *testing.T, data []byte) {
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		b := lanes.Batch{Path: lanes.Path(next() % 6), Timing: lanes.TimingMode(next() % 7)}
		for n := int(next() % 8); n > 0; n-- {
			kind, node, x := next(), int(next()%7)-2, next()
			var e lanes.Entry
			switch kind % 6 {
			case 0:
				e = r.inc(int(x%3), node)
			case 1:
				e = r.eagerInc(int(x%3), node)
			case 2:
				reg := cuda.Region{Buffer: r.bufs[x%3], Offset: uint64(next() % 80), Length: uint64(next() % 80)}
				e = lanes.Entry{Node: node, Command: cuda.Command{Kind: cuda.KindZero, Dst: reg}}
				if x%2 == 0 {
					e.Replay = lanes.Replayable(e.Command, cache.NewKey("f", "zero").Finish(), cache.LaneScope(int(x%4)))
				}
			case 3:
				reg := r.bufs[x%3].Whole()
				e = lanes.Entry{Node: node, Command: cuda.Command{Kind: cuda.KindUpload, Dst: reg, Host: make([]byte, int(next())%70)}}
			case 4:
				e = lanes.Entry{Node: node, Invoke: &programs.Invocation{Program: programs.ID{Runtime: r.lane.Runtime(), Name: "p"}, Segment: programs.Segment{Ordinal: int(x % 3)}}}
			case 5:
				e = r.inc(int(x%3), node)
				e.Replay.Scopes = append(e.Replay.Scopes, cache.PlanScope())
			}
			e.Phase = cache.Phase(next() % 5)
			b.Entries = append(b.Entries, e)
		}
		for n := int(next() % 3); n > 0; n-- {
			b.EagerBoundaries = append(b.EagerBoundaries, int(next()%6)-1)
		}
		if next()%2 == 1 {
			b.Program = &programs.Capture{ID: programs.ID{Runtime: r.lane.Runtime(), Name: "p"}, Nodes: int(next() % 6)}
		}
		sub, err := r.lane.Submit(b)
		if err != nil {
			var le *lanes.Error
			if !errors.As(err, &le) || le.Code == codes.Unclassified || le.Blame != cuda.BlameCaller || !le.NotSubmitted {
				t.Fatalf("refused batch: got err %v (%+v), want a not-submitted *lanes.Error, blame %v, with a code other than %v", err, cuda.Classify(err), cuda.BlameCaller, codes.Unclassified)
			}
			if st := r.lane.State(); st == lanecore.StateFailed {
				t.Fatalf("after a refused batch (%v): got lane state %v, want not failed", err, st)
			}
			return
		}
		rcs, _, err := r.lane.Synchronize()
		if err != nil || len(rcs) != 1 || rcs[0].Fence != sub.Fence || rcs[0].Outcome != lanes.OutcomeSucceeded {
			t.Fatalf("accepted batch: got receipts %+v, err %v; want one for fence %d, %v, nil", rcs, err, sub.Fence, lanes.OutcomeSucceeded)
		}
	})
}
