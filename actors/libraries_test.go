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
	workspaces map[int]cuda.Buffer
	downs      int
}

func newLaneLibrary() *laneLibrary {
	ll := &laneLibrary{workspaces: map[int]cuda.Buffer{}}
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
	if err := s.Own("t0", ws); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("Own of a lane's workspace: got err %v, want actors.ErrNotYours", err)
	}
	if err := s.Share(ws); !errors.Is(err, actors.ErrNotYours) {
		t.Fatalf("Share of a lane's workspace: got err %v, want actors.ErrNotYours", err)
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

// TestLibrariesAndHangs: a lane abandoned after a hang holds a library
// workspace its hung work may still use, and freeing (or a handle's
// teardown) would wait for that work: Stop still returns promptly, and
// the lanes' libraries are left to the device's close.
func TestLibrariesAndHangs(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime, Faults: []sim.Fault{{Kind: sim.FaultHang, Kernel: "inc_i32", Nth: 2}}}, 1)
	ll := newLaneLibrary()
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, HangTimeout: 300 * time.Millisecond,
		Libraries: []*cuda.Library{ll.lib}})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	ctx := context.Background()
	for i := range 3 {
		_, err := s.Submit(ctx, "t", dev.batch(0, 1))
		if i == 1 && !errors.Is(err, actors.ErrHung) {
			t.Fatalf("step 2 (its kernel hangs): got err %v, want actors.ErrHung", err)
		}
		if i != 1 && err != nil {
			// The lane may still be rebuilding after the hang: wait for it.
			for try := 0; err != nil && try < 100; try++ {
				time.Sleep(20 * time.Millisecond)
				_, err = s.Submit(ctx, "t", dev.batch(0, 1))
			}
			if err != nil {
				t.Fatalf("step %d: got err %v, want nil", i+1, err)
			}
		}
	}
	stopCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := s.Stop(stopCtx); err != nil {
		t.Fatalf("Stop after a hang, with a library on the lane: got err %v, want nil within the timeout", err)
	}
}

// TestStartRefusesLibrariesNoLaneHolds: Config.Libraries is checked when
// the scheduler starts, not by every lane failing to set it up.
func TestStartRefusesLibrariesNoLaneHolds(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)
	for what, libs := range map[string][]*cuda.Library{
		"a nil library":     {nil},
		"a name with space": {{Name: "my lib"}},
		"too big":           {{Name: "big", WorkspaceBytes: cuda.MaxWorkspaceBytes + 1}},
		"one name twice":    {{Name: "blas"}, {Name: "blas"}},
	} {
		s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, Libraries: libs})
		if !errors.Is(err, actors.ErrInvalidArgument) || !cuda.Classify(err).NotSubmitted {
			if s != nil {
				_ = s.Stop(context.Background())
			}
			t.Fatalf("Start with %s: got err %v, want a not-submitted actors.ErrInvalidArgument", what, err)
		}
	}
}

// TestLibrariesOfALaneRecoveringBesideAHang: while one lane's hung work
// still runs on the device, another lane that recovers from a stream
// failure skips its libraries' teardown (it would wait for the hung work)
// but sets them up again: its library calls still run afterwards.
func TestLibrariesOfALaneRecoveringBesideAHang(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime, Faults: []sim.Fault{{Kind: sim.FaultHang, Kernel: "inc_i32", Nth: 1}}}, 2)
	ll := newLaneLibrary()
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2, HangTimeout: 300 * time.Millisecond,
		Libraries: []*cuda.Library{ll.lib}})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: got err %v, want nil", err)
		}
	}()
	ctx := context.Background()
	// Each tenant on a lane of its own: "lib" first, then "hang".
	if _, err := s.Submit(ctx, "lib", lanes.Batch{Entries: []lanes.Entry{ll.call(t, dev.bufs[1], 1)}}); err != nil {
		t.Fatalf("first library call: got err %v, want nil", err)
	}
	if _, err := s.Submit(ctx, "hang", dev.batch(0, 1)); !errors.Is(err, actors.ErrHung) {
		t.Fatalf("the hanging step: got err %v, want actors.ErrHung", err)
	}
	libLane, _ := s.TenantLane("lib")
	hangLane, _ := s.TenantLane("hang")
	if libLane == hangLane {
		t.Skipf("both tenants were routed to lane %d; the test needs them apart", libLane)
	}
	// A launch failure on the library's lane: it recovers on a fresh stream.
	if err := dev.InjectFault(sim.Fault{Kind: sim.FaultLaunch, Nth: 1}); err != nil {
		t.Fatalf("InjectFault: got err %v, want nil", err)
	}
	if _, err := s.Submit(ctx, "lib", lanes.Batch{Entries: []lanes.Entry{ll.call(t, dev.bufs[1], 1)}}); err == nil {
		t.Fatal("the library call meeting a launch failure: got nil, want its error")
	}
	var err2 error
	for try := 0; try < 100; try++ { // wait for the lane's rebuild
		if _, err2 = s.Submit(ctx, "lib", lanes.Batch{Entries: []lanes.Entry{ll.call(t, dev.bufs[1], 1)}}); err2 == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err2 != nil {
		t.Fatalf("a library call after its lane recovered beside a hang: got err %v, want nil (the library set up again)", err2)
	}
}
