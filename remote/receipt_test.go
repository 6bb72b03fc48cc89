package remote_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/codes"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/remote/internal/wire"
	"google.golang.org/protobuf/proto"
)

// TestReceiptRoundTrip: a success comes back with every field one process
// gives it: its rows, replayed segments with their logical commands, cache
// events with their reasons, preparation timings, device time, launches
// and read-back bytes; an indeterminate end comes back with an error that
// keeps its code, so errors.Is and cuda.Classify work across the wire;
// epoch and call are the front's to check.
func TestReceiptRoundTrip(t *testing.T) {
	ok := lanes.Receipt{Fence: 7, Outcome: lanes.OutcomeSucceeded, Lane: 2, Tenant: "t", DeviceTime: 12 * time.Microsecond,
		Attribution: lanes.Attribution{Launches: 1, Rows: []lanes.Row{
			{Index: 0, Node: cache.NoNode, Op: "stage_in", Transfers: 1, GraphNodes: 1, Phase: cache.PhaseDynamicBinding, Replayed: true},
			{Index: 1, Node: 0, Op: "launch:add_f32", Dispatches: 1, Phase: cache.PhaseCompute, Reason: cache.ReasonProviderKeyMissing,
				Work: lanes.Work{Form: lanes.FormSingle, ParticipantCount: 1, Tokens: 3}},
		},
			Segments: []lanes.SegmentRecord{{Start: 0, End: 2, Fingerprint: "seg", Ordinal: -1, Commands: 2, GraphNodes: 3,
				Logical: []programs.LogicalCommand{{Ordinal: 0, Node: cache.NoNode, GraphNodes: 1}, {Ordinal: 1, Node: 7, GraphNodes: 2}}}},
			Events:      []lanes.CacheEvent{{Kind: "updated", Key: "seg", Reason: "parameters"}, {Kind: "rebind_refused", Key: "seg", Detail: "no", Reason: "topology"}},
			Preparation: []cache.Timing{{Stage: cache.StageCapture, Nodes: 3, Took: 40 * time.Microsecond}, {Stage: cache.StageRebind, Nodes: 3}},
		}}
	bad := lanes.Receipt{Fence: 8, Outcome: lanes.OutcomeIndeterminate, Lane: 2, Tenant: "t",
		Err: laneerr.Wrap("fence", false, actors.ErrIndeterminate)}
	for _, tc := range []struct {
		r        lanes.Receipt
		readback []byte
	}{{ok, []byte{1, 2, 3}}, {bad, nil}} {
		raw, err := proto.Marshal(remote.ReceiptToWire(5, 99, tc.r, tc.readback))
		if err != nil {
			t.Fatalf("proto.Marshal: got err %v, want nil", err)
		}
		var w wirepb.Receipt
		if err := proto.Unmarshal(raw, &w); err != nil {
			t.Fatalf("proto.Unmarshal: got err %v, want nil", err)
		}
		epoch, call, got, readback, err := remote.ReceiptFromWire(&w)
		if err != nil || epoch != 5 || call != 99 || !reflect.DeepEqual(readback, tc.readback) {
			t.Fatalf("ReceiptFromWire: got epoch %d, call %d, read-back %v, err %v; want 5, 99, %v, nil", epoch, call, readback, err, tc.readback)
		}
		want := tc.r
		if want.Err != nil {
			if !errors.Is(got.Err, actors.ErrIndeterminate) || cuda.Classify(got.Err).Code != codes.Indeterminate || got.Err.Error() != want.Err.Error() {
				t.Fatalf("the error after the wire: got %v (code %v), want errors.Is actors.ErrIndeterminate, code indeterminate, message %q", got.Err, cuda.Classify(got.Err).Code, want.Err.Error())
			}
			var pe *remote.PeerError
			if !errors.As(got.Err, &pe) {
				t.Fatalf("the error after the wire: got %T, want *remote.PeerError", got.Err)
			}
			got.Err, want.Err = nil, nil
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("after the wire:\n got %+v\nwant %+v", got, want)
		}
	}
}

// TestMalformedReceiptsRefused: a receipt a host may send malformed is
// refused with ErrWire.
func TestMalformedReceiptsRefused(t *testing.T) {
	for name, w := range map[string]*wirepb.Receipt{
		"nil":                                      nil,
		"no outcome":                               {},
		"an outcome out of range":                  {Outcome: 1 << 9},
		"a success with an error":                  {Outcome: uint32(lanes.OutcomeSucceeded), ErrorCode: int32(codes.Indeterminate)},
		"negative device time":                     {Outcome: uint32(lanes.OutcomeSucceeded), DeviceTimeNs: -1},
		"a nil row":                                {Outcome: uint32(lanes.OutcomeSucceeded), Rows: []*wirepb.Row{nil}},
		"a row node past int32":                    {Outcome: uint32(lanes.OutcomeSucceeded), Rows: []*wirepb.Row{{Node: 1 << 40}}},
		"too many read-back bytes":                 {Outcome: uint32(lanes.OutcomeSucceeded), Readback: make([]byte, wire.MaxHostBytes+1)},
		"logical commands not in threes":           {Outcome: uint32(lanes.OutcomeSucceeded), Segments: []*wirepb.Segment{{Start: 0, End: 1, Ordinal: -1, Logical: []int64{0, 1}}}},
		"a logical command's negative graph nodes": {Outcome: uint32(lanes.OutcomeSucceeded), Segments: []*wirepb.Segment{{Start: 0, End: 1, Ordinal: -1, Logical: []int64{0, 1, -1}}}},
		"a timing of no stage":                     {Outcome: uint32(lanes.OutcomeSucceeded), Preparation: &wirepb.StageTimings{Timings: []*wirepb.StageTiming{{Nodes: 1}}}},
		"a timing that took negative time":         {Outcome: uint32(lanes.OutcomeSucceeded), Preparation: &wirepb.StageTimings{Timings: []*wirepb.StageTiming{{Stage: 1, TookNs: -1}}}},
		"a nil timing":                             {Outcome: uint32(lanes.OutcomeSucceeded), Preparation: &wirepb.StageTimings{Timings: []*wirepb.StageTiming{nil}}},
	} {
		if _, _, _, _, err := remote.ReceiptFromWire(w); !errors.Is(err, remote.ErrWire) {
			t.Errorf("%s: got err %v, want remote.ErrWire", name, err)
		}
	}
}

// FuzzReceiptFromWire decodes arbitrary bytes as a wire receipt: never a
// panic, and an error of a failed receipt always classifies.
func FuzzReceiptFromWire(f *testing.F) {
	seed, _ := proto.Marshal(remote.ReceiptToWire(1, 2, lanes.Receipt{Fence: 3, Outcome: lanes.OutcomeIndeterminate, Err: actors.ErrIndeterminate}, nil))
	f.Add(seed)
	whole, _ := proto.Marshal(remote.ReceiptToWire(1, 2, lanes.Receipt{Fence: 3, Outcome: lanes.OutcomeSucceeded, Attribution: lanes.Attribution{
		Segments:    []lanes.SegmentRecord{{End: 1, Ordinal: -1, Logical: []programs.LogicalCommand{{Node: 4, GraphNodes: 1}}}},
		Preparation: []cache.Timing{{Stage: cache.StageCapture, Nodes: 1, Took: time.Millisecond}}}}, nil))
	f.Add(whole)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var w wirepb.Receipt
		if proto.Unmarshal(raw, &w) != nil {
			return
		}
		_, _, r, _, err := remote.ReceiptFromWire(&w)
		if err == nil && (r.Outcome == lanes.OutcomeSucceeded) != (r.Err == nil) {
			t.Fatalf("outcome %v with err %v: want no error for a success and one for every other outcome", r.Outcome, r.Err)
		}
	})
}

// TestPeerErrorsMatchWhatTheHostWrapped: a receipt's error matches the
// sentinels the host's error wrapped, by name, not every sentinel of its
// code; a driver code's sentinel by code; names a host sends out of
// bounds are dropped, and the error matches by code alone.
func TestPeerErrorsMatchWhatTheHostWrapped(t *testing.T) {
	stale := cuda.Contractf("check", cuda.ErrStaleHandle, "buffer 3 was freed")
	w := remote.ReceiptToWire(1, 2, lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: stale, Lane: -1}, nil)
	_, _, r, _, err := remote.ReceiptFromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Err, cuda.ErrStaleHandle) || errors.Is(r.Err, cuda.ErrOutOfBounds) || errors.Is(r.Err, cuda.ErrOutOfMemory) {
		t.Fatalf("a stale handle's error through the wire: Is(ErrStaleHandle) %v, Is(ErrOutOfBounds) %v, Is(ErrOutOfMemory) %v; want true, false, false",
			errors.Is(r.Err, cuda.ErrStaleHandle), errors.Is(r.Err, cuda.ErrOutOfBounds), errors.Is(r.Err, cuda.ErrOutOfMemory))
	}
	oom := &cuda.Error{Op: "alloc", Code: codes.OutOfMemory, Detail: "no room"}
	w = remote.ReceiptToWire(1, 2, lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: oom, Lane: 0}, nil)
	if _, _, r, _, _ = remote.ReceiptFromWire(w); !errors.Is(r.Err, cuda.ErrOutOfMemory) {
		t.Fatalf("out of memory through the wire: got %v, want errors.Is(cuda.ErrOutOfMemory)", r.Err)
	}
	for _, kinds := range [][]string{{""}, make([]string, 9), {string(make([]byte, 300))}} {
		w = remote.ReceiptToWire(1, 2, lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: stale, Lane: -1}, nil)
		w.ErrorKinds = kinds // named, but out of bounds
		if _, _, r, _, _ = remote.ReceiptFromWire(w); !errors.Is(r.Err, cuda.ErrStaleHandle) || !errors.Is(r.Err, cuda.ErrOutOfBounds) {
			t.Fatalf("names out of bounds (%d of them): got %v, want them dropped and the error matched by its code", len(kinds), r.Err)
		}
	}
}

// TestAnIndeterminateEndKeepsItsSentinels: a step lost to a sticky fault
// crosses as indeterminate and as the driver's code, not as every
// sentinel of that code; an older host's error (no names) matches by code.
func TestAnIndeterminateEndKeepsItsSentinels(t *testing.T) {
	lost := fmt.Errorf("%w: %w", actors.ErrIndeterminate, &cuda.Error{Op: "kernel", Code: codes.IllegalAddress, Sticky: true})
	w := remote.ReceiptToWire(1, 2, lanes.Receipt{Outcome: lanes.OutcomeIndeterminate, Err: lost, Lane: 0}, nil)
	_, _, r, _, err := remote.ReceiptFromWire(w)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(r.Err, actors.ErrIndeterminate) || !errors.Is(r.Err, cuda.ErrIllegalAddress) || errors.Is(r.Err, kernels.ErrIllegalAddress) {
		t.Fatalf("a step lost to a sticky fault: Is(ErrIndeterminate) %v, Is(cuda.ErrIllegalAddress) %v, Is(kernels.ErrIllegalAddress) %v; want true, true, false",
			errors.Is(r.Err, actors.ErrIndeterminate), errors.Is(r.Err, cuda.ErrIllegalAddress), errors.Is(r.Err, kernels.ErrIllegalAddress))
	}
	w = remote.ReceiptToWire(1, 2, lanes.Receipt{Outcome: lanes.OutcomeIndeterminate, Err: &cuda.Error{Op: "kernel", Code: codes.IllegalAddress}, Lane: 0}, nil)
	w.ErrorKinds, w.ErrorKindsNamed = nil, false // an older host
	if _, _, r, _, _ = remote.ReceiptFromWire(w); !errors.Is(r.Err, kernels.ErrIllegalAddress) || !errors.Is(r.Err, cuda.ErrIllegalAddress) {
		t.Fatalf("an older host's error: got %v, want it matched by its code", r.Err)
	}
}
