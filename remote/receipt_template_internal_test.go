package remote

import (
	"reflect"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	front "github.com/lanesched/lanes/remote/internal/front"

	host "github.com/lanesched/lanes/remote/internal/host"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// TestTemplatedReceiptsCarryLogicalCommands: a host leaves out a templated
// receipt's segments only when they say the same as the previous one's,
// logical commands included, and the front fills them back in: every
// receipt reads as the host's scheduler gave it.
func TestTemplatedReceiptsCarryLogicalCommands(t *testing.T) {
	seg := func(nodes ...int) []lanes.SegmentRecord {
		s := lanes.SegmentRecord{Start: 0, End: len(nodes), Fingerprint: "f", Ordinal: -1, Commands: len(nodes), GraphNodes: len(nodes)}
		for i, n := range nodes {
			s.Logical = append(s.Logical, programs.LogicalCommand{Ordinal: i, Node: n, GraphNodes: 1})
		}
		return []lanes.SegmentRecord{s}
	}
	rows := []lanes.Row{{Index: 0, Op: "launch:inc_i32", Replayed: true, Phase: cache.PhaseCompute}}
	lastRows, lastSegs := map[uint64][]lanes.Row{}, map[uint64][]lanes.SegmentRecord{}
	l, a := &front.Link{}, &front.FrontActor{}
	for i, step := range []struct {
		segs   []lanes.SegmentRecord
		before bool // left out as the same as the previous receipt's
	}{{seg(0, 1), false}, {seg(0, 1), true}, {seg(0, 2), false}, {seg(0, 2), true}, {nil, false}} {
		o := host.Outgoing{Receipt: &wirepb.Receipt{Epoch: 1, Call: uint64(i + 1), Outcome: uint32(lanes.OutcomeSucceeded)}, Rows: rows, Segments: step.segs, Template: 9}
		host.EncodeAttribution(o, lastRows, lastSegs)
		if o.Receipt.SegmentsAsBefore != step.before {
			t.Fatalf("receipt %d: SegmentsAsBefore %v, want %v", i, o.Receipt.SegmentsAsBefore, step.before)
		}
		_, _, r, _, err := wire.ReceiptFromWire(o.Receipt)
		if err != nil {
			t.Fatalf("receipt %d: %v", i, err)
		}
		a.TemplateRows(l, o.Receipt, &r)
		if !reflect.DeepEqual(r.Attribution.Segments, step.segs) || !reflect.DeepEqual(r.Attribution.Rows, rows) {
			t.Fatalf("receipt %d at the front: segments %+v, rows %+v; want %+v, %+v", i, r.Attribution.Segments, r.Attribution.Rows, step.segs, rows)
		}
	}
}
