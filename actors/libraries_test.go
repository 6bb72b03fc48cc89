package actors_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// laneLibrary is a library that records each lane's setup and teardown;
// its calls write their lane's id into the caller's buffer through the
// lane's workspace (which Setup's state names).
type laneLibrary struct {
	lib        *cuda.Library
	mu         sync.Mutex
	workspaces map[uint64]cuda.Buffer
	downs      int
}

func newLaneLibrary() *laneLibrary {
	ll := &laneLibrary{workspaces: map[uint64]cuda.Buffer{}}
	ll.lib = &cuda.Library{Name: "laneid", WorkspaceBytes: 8,
		Setup: func(l cuda.LibraryLane) (any, error) {
			ll.mu.Lock()
			defer ll.mu.Unlock()
			ll.workspaces[l.Lane] = l.Workspace.Buffer
			return l.Lane, nil
		},
		Teardown: func(cuda.LibraryLane) error {
			ll.mu.Lock()
			defer ll.mu.Unlock()
			ll.downs++
			return nil
		}}
	return ll
}

// call copies the lane's workspace (which holds its lane id, written by
// the first call) into out.
func (ll *laneLibrary) call(t *testing.T, out cuda.Buffer, lane uint64) lanes.Entry {
	c, err := cuda.Call(&cuda.LibraryCall{Name: "laneid", Library: ll.lib, Workspace: cuda.AccessReadWrite,
		Params:  binary.LittleEndian.AppendUint64(nil, lane),
		Regions: []cuda.Touch{{Region: out.Whole(), Access: cuda.AccessWrite}},
		Reference: func(mem [][]byte) error {
			ws := mem[1]
			binary.LittleEndian.PutUint32(ws, uint32(lane))
			copy(mem[0][:4], ws[:4])
			return nil
		}})
	if err != nil {
		t.Fatalf("cuda.Call: got err %v, want nil", err)
	}
	return lanes.Replayed("actors-test", 0, c)
}

// TestLibraryStateOnEveryLane: a library in Config.Libraries is set up on
// every lane as it starts, in a workspace of its own that no tenant can
// name, and torn down, its workspace freed, when the scheduler stops.
func TestLibraryStateOnEveryLane(t *testing.T) {
	const lanesN = 4
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, lanesN)
	ll := newLaneLibrary()
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: lanesN, CacheCapacity: 8,
		StrictOwnership: true, Libraries: []*cuda.Library{ll.lib}})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	ll.mu.Lock()
	got := len(ll.workspaces)
	ll.mu.Unlock()
	if got != lanesN {
		t.Fatalf("after Start: %d lanes set the library up, want %d", got, lanesN)
	}
	seen := map[cuda.Buffer]bool{}
	for _, b := range ll.workspaces {
		seen[b] = true
	}
	if len(seen) != lanesN {
		t.Fatalf("workspaces: got %d distinct of %d lanes, want one each", len(seen), lanesN)
	}
	var bytes int64
	for _, l := range s.Lanes() {
		bytes += l.Counters.LibraryWorkspaceBytes
	}
	if bytes != lanesN*8 {
		t.Fatalf("lanes' workspace bytes: got %d, want %d", bytes, lanesN*8)
	}
	for i := range lanesN {
		tenant := fmt.Sprintf("t%d", i)
		if err := s.Own(tenant, dev.bufs[i]); err != nil {
			t.Fatalf("Own: got err %v, want nil", err)
		}
		for step := range 3 {
			// Ask for the lane the tenant lands on: the call writes it.
			rc, err := s.Submit(context.Background(), tenant, lanes.Batch{Entries: []lanes.Entry{ll.call(t, dev.bufs[i], uint64(i))}})
			if err != nil || rc.Outcome != lanes.OutcomeSucceeded {
				t.Fatalf("tenant %s step %d: got %v, err %v; want succeeded", tenant, step, rc.Outcome, err)
			}
		}
	}
	// A tenant that names a lane's workspace is refused: no tenant owns it.
	ll.mu.Lock()
	ws := ll.workspaces[0]
	ll.mu.Unlock()
	c, _ := cuda.Call(&cuda.LibraryCall{Name: "peek", Regions: []cuda.Touch{{Region: ws.Whole(), Access: cuda.AccessRead}},
		Reference: func([][]byte) error { return nil }})
	if _, err := s.Submit(context.Background(), "t0", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("actors-test", 0, c)}}); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("a batch naming a lane's workspace: got err %v, want actors.ErrNotYours", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: got err %v, want nil", err)
	}
	ll.mu.Lock()
	defer ll.mu.Unlock()
	if ll.downs != lanesN {
		t.Fatalf("after Stop: %d teardowns, want %d", ll.downs, lanesN)
	}
	for lane, b := range ll.workspaces {
		if err := dev.CheckBuffer(b); !errors.Is(err, cuda.ErrStaleHandle) {
			t.Fatalf("lane %d's workspace after Stop: got CheckBuffer %v, want it freed", lane, err)
		}
	}
}
