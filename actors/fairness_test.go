package actors_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
)

// TestFloodLeavesOthersTheirShare: on one lane whose device clock stands
// still, a flooding tenant fills the lane's admission to its limit and no
// further; tenants with nothing in flight are admitted beside it up to
// their shares; and the lane's fair queue runs each of their first batches
// within one round, not behind the flood.
func TestFloodLeavesOthersTheirShare(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.Virtual}, 5)
	const limit, depth = 16, 2
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxInFlightPerLane: limit, StreamDepth: depth, HangTimeout: -1, CacheCapacity: -1})
	ctx := context.Background()
	var pending []*actors.Pending
	flooded := 0
	for {
		p, err := s.SubmitAsync(ctx, "flood", dev.batch(0, 16))
		if err != nil {
			if !errors.Is(err, actors.ErrOverloaded) || !cuda.Classify(err).NotSubmitted {
				t.Fatalf("flood refused with %v", err)
			}
			break
		}
		pending = append(pending, p)
		flooded++
	}
	if flooded != limit {
		t.Fatalf("the flood got %d admissions on a lane of %d", flooded, limit)
	}
	light := 0
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("light%d", i)
		for j := 0; ; j++ {
			p, err := s.SubmitAsync(ctx, name, dev.batch(i, 16))
			if err != nil {
				if j == 0 {
					t.Fatalf("%s, with nothing in flight, was refused while another tenant floods: %v", name, err)
				}
				break
			}
			pending = append(pending, p)
			light++
		}
	}
	if n := flooded + light; n > 3*limit {
		t.Fatalf("%d admitted on a lane of %d", n, limit)
	}
	if _, err := s.SubmitAsync(ctx, "flood", dev.batch(0, 16)); !errors.Is(err, actors.ErrOverloaded) {
		t.Fatalf("the flood, over its share, was admitted again: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, p := range pending {
		for {
			dev.Clock().Advance(time.Millisecond)
			select {
			case <-p.Done():
			case <-time.After(time.Millisecond):
				if time.Now().After(deadline) {
					t.Fatal("submissions did not end")
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
	for _, p := range pending {
		r, err := p.Result()
		if err != nil {
			t.Fatal(err)
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
			t.Errorf("light%d's first batch ran %d-th, behind the flood (order %v)", i, at, all)
		}
	}
	t.Logf("flood %d admitted, light tenants %d beside it; stream order %v", flooded, light, all)
}

// TestBatchBounds: a batch beyond the configured entries or bytes is
// refused, not submitted, with an error that says how to split it.
func TestBatchBounds(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxBatchEntries: 8, MaxBatchBytes: 32})
	ctx := context.Background()
	_, err := s.Submit(ctx, "t", dev.batch(0, 20))
	var big *actors.BatchTooLargeError
	if !errors.As(err, &big) || !errors.Is(err, actors.ErrBatchTooLarge) || !cuda.Classify(err).NotSubmitted || cuda.Classify(err).Blame != cuda.BlameCaller {
		t.Fatalf("20 entries against 8: %v", err)
	}
	if big.Entries != 20 || big.MaxEntries != 8 || big.Pieces() != 3 {
		t.Fatalf("%+v, pieces %d", big, big.Pieces())
	}
	up, err := cuda.Upload(dev.bufs[0].Whole(), make([]byte, dev.bufs[0].Size))
	if err != nil {
		t.Fatal(err)
	}
	b := dev.batch(0, 1)
	b.Entries[0].Command, b.Entries[0].Replay = up, nil
	if _, err := s.Submit(ctx, "t", b); !errors.As(err, &big) || big.Bytes != int64(dev.bufs[0].Size) {
		t.Fatalf("%d upload bytes against 32: %v", dev.bufs[0].Size, err)
	}
	if _, err := s.Submit(ctx, "t", dev.batch(0, 8)); err != nil {
		t.Fatalf("a batch at the bound: %v", err)
	}
}
