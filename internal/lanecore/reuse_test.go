package lanecore_test

import (
	"testing"
	"unsafe"

	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// TestReusedRecordsKeepReceiptsApart: the lane reuses a completed
// submission's record and its poll slice, yet every receipt keeps its own
// spans and its own attribution (identical rows are one shared, read-only
// copy). Timed two-command batches alternate with untimed one-command
// ones, so a reused record always held the other kind.
func TestReusedRecordsKeepReceiptsApart(t *testing.T) {
	r := newRig(t, sim.ClockVirtual, 1)
	want := map[uint64]int{} // fence -> commands (= spans when timed)
	var got []lanes.Receipt
	var polled []lanes.Receipt
	for i := range 40 {
		b := lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}}
		if i%2 == 0 {
			b = lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0), r.eagerInc(0, 1)}, Timing: lanes.TimingKernel}
		}
		want[r.submit(b).Fence] = len(b.Entries)
		if i%3 == 2 {
			r.settle()
			polled = r.lane.PollInto(polled[:0])
			got = append(got, polled...)
		}
	}
	r.settle()
	got = r.lane.PollInto(got)
	if len(got) != len(want) {
		t.Fatalf("got %d receipts, want one per submission (%d)", len(got), len(want))
	}
	for i, rc := range got {
		n, ok := want[rc.Fence]
		if !ok {
			t.Fatalf("receipt %d: got fence %d, want a submitted one", i, rc.Fence)
		}
		if i > 0 && rc.Fence <= got[i-1].Fence {
			t.Fatalf("receipt %d: got fence %d after fence %d, want ascending fences", i, rc.Fence, got[i-1].Fence)
		}
		spans := 0
		if n == 2 {
			spans = 2
		}
		if len(rc.Spans) != spans || len(rc.Attribution.Rows) != n || rc.Outcome != lanes.OutcomeSucceeded {
			t.Fatalf("fence %d: %d spans, %d rows, %v; want %d spans, %d rows, succeeded", rc.Fence, len(rc.Spans), len(rc.Attribution.Rows), rc.Outcome, spans, n)
		}
		for _, sp := range rc.Spans {
			if sp.Duration <= 0 {
				t.Fatalf("fence %d: got span %+v, want a duration > 0", rc.Fence, sp)
			}
		}
	}
	// Spans are each receipt's own; rows are shared between receipts that
	// attribute identically (read-only), and only between those.
	got[0].Spans[0].Index = 99
	for _, rc := range got[1:] {
		if len(rc.Spans) > 0 && rc.Spans[0].Index == 99 {
			t.Fatalf("fence %d: got span index 99 after fence %d's was set to 99, want its own spans, unshared", rc.Fence, got[0].Fence)
		}
		same := len(rc.Attribution.Rows) == len(got[0].Attribution.Rows)
		if shared := &rc.Attribution.Rows[0] == &got[0].Attribution.Rows[0]; shared != same {
			t.Fatalf("fence %d: got rows shared with fence %d %v, want %v (shared exactly when identical)", rc.Fence, got[0].Fence, shared, same)
		}
		if len(rc.Attribution.Rows) != cap(rc.Attribution.Rows) {
			t.Fatalf("fence %d: got rows of length %d, capacity %d; want no spare capacity: an append would write into shared rows", rc.Fence, len(rc.Attribution.Rows), cap(rc.Attribution.Rows))
		}
	}
}

// TestRowPacks: a submission allocates one Row per entry; the field order
// keeps it at 88 bytes on 64-bit hosts.
func TestRowPacks(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) == 8 && unsafe.Sizeof(lanes.Row{}) > 88 {
		t.Fatalf("lanes.Row: got %d bytes, want at most 88; order its fields so the small ones share a word", unsafe.Sizeof(lanes.Row{}))
	}
}
