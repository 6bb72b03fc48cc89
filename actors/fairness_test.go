package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// TestFloodLeavesOthersTheirShare: on one lane whose device clock stands
// still, a flooding tenant fills the lane's admission to its limit and no
// further; tenants with nothing in flight are admitted beside it up to
// their shares; and the lane's fair queue runs each of their first batches
// within one round, not behind the flood.
func TestFloodLeavesOthersTheirShare(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockVirtual}, 5)
	const limit, depth = 16, 2
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxInFlightPerLane: limit, StreamDepth: depth, HangTimeout: -1, CacheCapacity: -1})
	ctx := context.Background()
	var pending []lanes.Pending
	flooded := 0
	for {
		p, err := s.SubmitAsync(ctx, "flood", dev.batch(0, 16))
		if err != nil {
			if !errors.Is(err, actors.ErrOverloaded) || !cuda.Classify(err).NotSubmitted {
				t.Fatalf("the flood's refusal: got err %v (not submitted %v), want actors.ErrOverloaded, not submitted", err, cuda.Classify(err).NotSubmitted)
			}
			break
		}
		pending = append(pending, p)
		flooded++
	}
	if flooded != limit {
		t.Fatalf("the flood: got %d admissions, want %d (the lane's limit)", flooded, limit)
	}
	light := 0
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("light%d", i)
		for j := 0; ; j++ {
			p, err := s.SubmitAsync(ctx, name, dev.batch(i, 16))
			if err != nil {
				if j == 0 {
					t.Fatalf("%s, with nothing in flight, beside a flood: got err %v, want admitted", name, err)
				}
				break
			}
			pending = append(pending, p)
			light++
		}
	}
	if n := flooded + light; n > 3*limit {
		t.Fatalf("got %d admitted on a lane of %d, want at most %d (three times its limit)", n, limit, 3*limit)
	}
	if _, err := s.SubmitAsync(ctx, "flood", dev.batch(0, 16)); !errors.Is(err, actors.ErrOverloaded) {
		t.Fatalf("the flood, over its share: got err %v, want actors.ErrOverloaded", err)
	}
	// Every submission must reach the lane's fair queue before the clock
	// moves: a lane that took light4's late (a starved CI machine) would
	// run the others' second round first, as it should.
	received := time.Now().Add(10 * time.Second)
	for st := s.Lanes()[0]; st.Queued+depth+1 < len(pending); st = s.Lanes()[0] {
		if time.Now().After(received) {
			t.Fatalf("the lane after 10s: got %d queued of %d admitted, want all but the stream's %d", st.Queued, len(pending), depth+1)
		}
		time.Sleep(time.Millisecond)
	}
	deadline := time.Now().Add(20 * time.Second)
	for i, p := range pending {
		for {
			dev.Clock().Advance(time.Millisecond)
			select {
			case <-p.Done():
			case <-time.After(time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatalf("submission %d of %d after 20s of advancing the clock: got not ended, want ended", i, len(pending))
				}
				continue
			}
			break
		}
	}
	type ended struct {
		fence  uint64
		tenant string
	}
	var all []ended
	for i, p := range pending {
		r, err := p.Result()
		if err != nil {
			t.Fatalf("submission %d: got err %v, want nil", i, err)
		}
		all = append(all, ended{r.Fence, r.Tenant})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].fence < all[j].fence })
	first := map[string]int{}
	for i, e := range all {
		if _, ok := first[e.tenant]; !ok {
			first[e.tenant] = i
		}
	}
	for i := 1; i <= 4; i++ {
		// Behind the stream's depth and at most one batch of each other
		// tenant in the round.
		if at := first[fmt.Sprintf("light%d", i)]; at > depth+4 {
			t.Errorf("light%d's first batch: got position %d in the stream's order, want at most %d, not behind the flood (order %v)", i, at, depth+4, all)
		}
	}
	t.Logf("flood %d admitted, light tenants %d beside it; stream order %v", flooded, light, all)
}

// TestBatchBounds: a batch beyond the configured entries or bytes is
// refused, not submitted, with an error that says how to split it.
func TestBatchBounds(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxBatchEntries: 8, MaxBatchBytes: 32})
	ctx := context.Background()
	_, err := s.Submit(ctx, "t", dev.batch(0, 20))
	var big *actors.BatchTooLargeError
	if !errors.As(err, &big) {
		t.Fatalf("20 entries against 8: got err %v, want a *actors.BatchTooLargeError", err)
	}
	if c := cuda.Classify(err); !errors.Is(err, actors.ErrBatchTooLarge) || !c.NotSubmitted || c.Blame != cuda.BlameCaller {
		t.Fatalf("20 entries against 8: got err %v (wraps ErrBatchTooLarge %v, not submitted %v, blame %v), want actors.ErrBatchTooLarge, not submitted, the caller's blame",
			err, errors.Is(err, actors.ErrBatchTooLarge), c.NotSubmitted, c.Blame)
	}
	if big.Entries != 20 || big.MaxEntries != 8 || big.Pieces() != 3 {
		t.Fatalf("20 entries against 8: got Entries %d, MaxEntries %d, Pieces %d; want 20, 8, 3 (%+v)", big.Entries, big.MaxEntries, big.Pieces(), big)
	}
	up, err := cuda.Upload(dev.bufs[0].Whole(), make([]byte, dev.bufs[0].Size))
	if err != nil {
		t.Fatalf("cuda.Upload: got err %v, want nil", err)
	}
	b := dev.batch(0, 1)
	b.Entries[0].Command, b.Entries[0].Replay = up, nil
	_, err = s.Submit(ctx, "t", b)
	if !errors.As(err, &big) {
		t.Fatalf("%d upload bytes against 32: got err %v, want a *actors.BatchTooLargeError", dev.bufs[0].Size, err)
	}
	if big.Bytes != int64(dev.bufs[0].Size) {
		t.Fatalf("%d upload bytes against 32: got Bytes %d, want %d", dev.bufs[0].Size, big.Bytes, dev.bufs[0].Size)
	}
	if _, err := s.Submit(ctx, "t", dev.batch(0, 8)); err != nil {
		t.Fatalf("a batch at the bound: got err %v, want nil", err)
	}
}

// TestEverythingCountsAgainstTheBounds: patches count as entries and
// bytes, an invocation as its segment's commands, a staged replay's inputs
// as bytes and its call as an admission slot of its lane.
func TestEverythingCountsAgainstTheBounds(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockVirtual}, 2)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxBatchEntries: 8, MaxBatchBytes: 32, MaxInFlightPerLane: 2, HangTimeout: -1})
	ctx := context.Background()
	var big *actors.BatchTooLargeError
	b := dev.batch(0, 1)
	for range 8 {
		b.Patches = append(b.Patches, lanes.Patch{Dst: dev.bufs[1].Whole(), Bytes: make([]byte, 4)})
	}
	_, err := s.SubmitAsync(ctx, "t", b)
	if !errors.As(err, &big) {
		t.Fatalf("1 entry and 8 patches against 8: got err %v, want a *actors.BatchTooLargeError", err)
	}
	if big.Entries != 9 {
		t.Fatalf("1 entry and 8 patches against 8: got Entries %d, want 9", big.Entries)
	}
	b.Patches = []lanes.Patch{{Dst: dev.bufs[1].Whole(), Bytes: make([]byte, 64)}}
	_, err = s.SubmitAsync(ctx, "t", b)
	if !errors.As(err, &big) {
		t.Fatalf("a 64-byte patch against 32: got err %v, want a *actors.BatchTooLargeError", err)
	}
	if big.Largest != 64 || !strings.Contains(err.Error(), "split that upload") {
		t.Fatalf("a 64-byte patch against 32: got Largest %d, message %q; want 64 and a message saying to split that upload", big.Largest, err)
	}
	inv := dev.batch(0, 1)
	inv.Entries[0] = lanes.Entry{Phase: cache.PhaseCompute, Node: 0, Invoke: &programs.Invocation{
		Program: programs.ID{Runtime: "lanes/sim", Name: "p"}, Segment: programs.Segment{Start: 0, End: 9, Commands: 9}}}
	_, err = s.SubmitAsync(ctx, "t", inv)
	if !errors.As(err, &big) {
		t.Fatalf("an invocation of a 9-command segment against 8: got err %v, want a *actors.BatchTooLargeError", err)
	}
	if big.Entries != 9 {
		t.Fatalf("an invocation of a 9-command segment against 8: got Entries %d, want 9", big.Entries)
	}
}

// TestStagedReplayBounds: what a staged replay moves counts against the
// byte bound, it takes its turn in the lane's fair queue, and its
// admission slot comes back when it ends.
func TestStagedReplayBounds(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8, MaxBatchBytes: 24})
	st := prepareStagedInc(t, s, dev)
	ctx := context.Background()
	a, _ := dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.I32})
	var big *actors.BatchTooLargeError
	// Its slots move 16 bytes in and, collected, 16 out: whatever the
	// caller passes, that is what a replay costs.
	_, err := s.Replay(ctx, "t", st, [][]byte{{1}}, true)
	if !errors.As(err, &big) {
		t.Fatalf("a replay moving 32 bytes against 24: got err %v, want a *actors.BatchTooLargeError", err)
	}
	if big.Bytes != 32 || !big.Staged || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("a replay moving 32 bytes against 24: got Bytes %d, Staged %v, not submitted %v; want 32, staged, not submitted", big.Bytes, big.Staged, cuda.Classify(err).NotSubmitted)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Replay(ctx, "t", st, [][]byte{{1, 0, 0, 0}}, false); err != nil {
				t.Errorf("Replay: got err %v, want nil", err)
			}
		}()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.Submit(ctx, "u", dev.zeroBatch(a)); err != nil {
				t.Errorf("Submit(tenant u): got err %v, want nil", err)
			}
		}()
	}
	wg.Wait()
	// Queued is the lane's own count, published as its mailbox run ends:
	// a caller woken mid-run may look before then.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		l := s.Lanes()[0]
		if l.InFlight == 0 && l.Queued == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lane 0 5s after every replay ended: got %d in flight, %d queued; want 0 and 0", l.InFlight, l.Queued)
		}
	}

	// Callers that give up: a replay the lane had not taken never runs
	// (not submitted); one it had taken is waited for; every slot returns.
	before := s.Lanes()[0].Staged
	var ran, gaveUp atomic.Int64
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				cctx, cancel := context.WithTimeout(ctx, time.Duration(i%5)*20*time.Microsecond)
				_, err := s.Replay(cctx, "t", st, [][]byte{{byte(g), byte(i), 1, 0}}, false)
				cancel()
				switch {
				case err == nil:
					ran.Add(1)
				case errors.Is(err, context.DeadlineExceeded) && cuda.Classify(err).NotSubmitted:
					gaveUp.Add(1)
				case errors.Is(err, actors.ErrOverloaded):
					// Given-up replays hold their slots until the lane
					// comes to them.
					time.Sleep(50 * time.Microsecond)
				default:
					t.Errorf("Replay with a %v deadline: got err %v, want nil, a not-submitted context.DeadlineExceeded, or actors.ErrOverloaded", time.Duration(i%5)*20*time.Microsecond, err)
				}
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for s.Lanes()[0].InFlight != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	after := s.Lanes()[0]
	runs := after.Staged.Uploads + after.Staged.ResidentInputReplays - before.Uploads - before.ResidentInputReplays
	if after.InFlight != 0 {
		t.Fatalf("lane 0 5s after every caller returned: got %d in flight, want 0 (every slot back)", after.InFlight)
	}
	if int64(runs) != ran.Load() {
		t.Fatalf("got %d replays run by the lane, want the %d answered (%d given up never run)", runs, ran.Load(), gaveUp.Load())
	}
	t.Logf("%d replays ran, %d given up before the lane took them", ran.Load(), gaveUp.Load())
}

// TestRefusedNamesLeaveNothing: names whose every submission was refused
// are not kept.
func TestRefusedNamesLeaveNothing(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}})
	if err := s.Own("owner", dev.bufs[0]); err != nil {
		t.Fatalf("Own(owner): got err %v, want nil", err)
	}
	for i := range 1000 {
		if _, err := s.SubmitAsync(context.Background(), fmt.Sprintf("intruder-%d", i), dev.batch(0, 1)); !errors.Is(err, actors.ErrNotYours) {
			t.Fatalf("intruder-%d naming the owner's buffer: got err %v, want actors.ErrNotYours", i, err)
		}
	}
	if n := s.Tenants(); n != 0 {
		t.Fatalf("got %d tenants kept for names only ever refused, want 0", n)
	}
}

// TestProgramLimits: a tenant reserves at most MaxProgramsPerTenant
// program names.
func TestProgramLimits(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxProgramsPerTenant: 2})
	for i := range 3 {
		b := dev.batch(0, 2)
		b.Program = &programs.Capture{ID: programs.ID{Runtime: "lanes/sim", Name: fmt.Sprint("p", i)}, Nodes: 2}
		_, err := s.Submit(context.Background(), "t", b)
		if i < 2 && err != nil {
			t.Fatalf("program p%d: got err %v, want nil", i, err)
		}
		if i == 2 && (!errors.Is(err, actors.ErrProgramLimit) || !cuda.Classify(err).NotSubmitted) {
			t.Fatalf("a third program name beyond the limit of 2: got err %v (not submitted %v), want actors.ErrProgramLimit, not submitted", err, cuda.Classify(err).NotSubmitted)
		}
	}
	// Forgetting the tenant releases its names, for anyone.
	if err := s.Forget("t"); err != nil {
		t.Fatalf("Forget(t): got err %v, want nil", err)
	}
	for _, tenant := range []string{"u", "t"} {
		b := dev.batch(0, 2)
		b.Program = &programs.Capture{ID: programs.ID{Runtime: "lanes/sim", Name: "p0"}, Nodes: 2}
		_, err := s.Submit(context.Background(), tenant, b)
		if tenant == "u" && err != nil {
			t.Fatalf("a forgotten tenant's program name, registered by tenant u: got err %v, want nil", err)
		}
		if tenant == "t" && !errors.Is(err, actors.ErrNotYours) {
			t.Fatalf("tenant t again, naming p0 that u now holds: got err %v, want actors.ErrNotYours", err)
		}
	}
}

// zeroBatch is one eager zero of buf.
func (d *device) zeroBatch(buf cuda.Buffer) lanes.Batch {
	z, _ := cuda.Zero(buf.Whole())
	return lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: z}}}
}
