package lanecore_test

import (
	"encoding/binary"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	discovery "github.com/lanesched/lanes/internal/discovery"
	"github.com/lanesched/lanes/lanes"
)

// TestLibraryCallCapturedAndReplayed: a library call entry (lanes.Replayed
// keys it by name, parameters and accesses) is captured with its batch and
// replayed like a launch, attributed as "call:<name>"; a call of other
// parameters is another key.
func TestLibraryCallCapturedAndReplayed(t *testing.T) {
	r := newRig(t, sim.ClockZeroCost, 1)
	if _, err := r.lane.Configure(4); err != nil {
		t.Fatalf("Configure: got err %v, want nil", err)
	}
	call := func(add uint32) lanes.Entry {
		lc := &cuda.LibraryCall{Name: "add", Params: binary.LittleEndian.AppendUint32(nil, add),
			Regions: []cuda.Touch{{Region: r.bufs[0].Whole(), Access: cuda.AccessReadWrite}},
			Reference: func(mem [][]byte) error {
				for i := 0; i+4 <= len(mem[0]); i += 4 {
					binary.LittleEndian.PutUint32(mem[0][i:], binary.LittleEndian.Uint32(mem[0][i:])+add)
				}
				return nil
			}}
		c, err := cuda.Call(lc)
		if err != nil {
			t.Fatalf("cuda.Call: got err %v, want nil", err)
		}
		return lanes.Replayed("lanes-test", 0, c)
	}
	for i, add := range []uint32{1, 1, 2} {
		sub := r.submit(lanes.Batch{Entries: []lanes.Entry{call(add), r.inc(0, 1)}})
		row := sub.Attribution.Rows[0]
		if row.Op != "call:add" || !row.Replayed {
			t.Fatalf("submission %d, row 0: got op %q replayed %v (%v), want call:add replayed", i, row.Op, row.Replayed, row.Reason)
		}
		want := discovery.DispositionCaptured
		if i == 1 {
			want = discovery.DispositionHit
		}
		if got := sub.Preparation.Dispositions[0]; got != want {
			t.Fatalf("submission %d: got disposition %v, want %v (a call of other parameters is another key)", i, got, want)
		}
		if _, _, err := r.lane.Synchronize(); err != nil {
			t.Fatalf("Synchronize: got err %v, want nil", err)
		}
	}
	if got := r.count(0); got != 1+1+1+1+2+1 {
		t.Fatalf("counter 0 after three replayed steps: got %d, want 7", got)
	}
}
