package remote_test

import (
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lanesched/lanes/remote"
)

// TestCallsEndExactlyOnce: calls to two hosts, settled by receipts (some
// duplicated, some of a stale epoch, some unknown) while one host is lost
// and comes back under a new epoch, from many goroutines at once: every
// call ends exactly once, by its receipt or by its host's loss, and
// nothing is left.
func TestCallsEndExactlyOnce(t *testing.T) {
	var c remote.Calls[int]
	const n = 20000
	ended := make([]atomic.Int32, n)
	ids := make([]uint64, n)
	hosts := []string{"gpu0", "gpu1"}
	epochs := [2]atomic.Uint64{}
	epochs[0].Store(1)
	epochs[1].Store(1)
	var mu sync.Mutex // orders Add with a host's loss, as a front's routing would
	for i := range n {
		h := i % 2
		mu.Lock()
		ids[i] = c.Add(hosts[h], epochs[h].Load(), i)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			for i := w; i < n; i += 8 {
				h := i % 2
				for range 1 + rng.Intn(2) { // a receipt, sometimes twice
					epoch := uint64(1)
					if rng.Intn(10) == 0 {
						epoch = 2 // a stale or future epoch's receipt: dropped
					}
					if v, ok := c.Settle(hosts[h], epoch, ids[i]); ok {
						ended[v].Add(1)
					}
				}
				if rng.Intn(1000) == 0 {
					_, _ = c.Settle(hosts[h], 1, 1<<60) // unknown: dropped
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // gpu1 is lost midway and comes back under epoch 2
		defer wg.Done()
		mu.Lock()
		lost := c.Lose("gpu1", 1)
		epochs[1].Store(2)
		mu.Unlock()
		for _, v := range lost {
			ended[v].Add(1)
		}
	}()
	wg.Wait()
	for _, h := range hosts { // whatever remains is lost at the end
		for _, e := range []uint64{1, 2} {
			for _, v := range c.Lose(h, e) {
				ended[v].Add(1)
			}
		}
	}
	for i := range ended {
		if got := ended[i].Load(); got != 1 {
			t.Fatalf("call %d: got it ended %d times, want exactly once", i, got)
		}
	}
	if c.Len() != 0 {
		t.Fatalf("after every call ended: got %d left in the table, want 0", c.Len())
	}
}

// TestCallsDropLateReceipts: after a host is lost, its calls' receipts
// (a stopped host that resumes) find nothing; a restarted host's new epoch
// settles only its own calls.
func TestCallsDropLateReceipts(t *testing.T) {
	var c remote.Calls[string]
	old := c.Add("gpu0", 1, "old")
	if got := c.InFlight("gpu0", 1); got != 1 {
		t.Fatalf("InFlight: got %d, want 1", got)
	}
	if lost := c.Lose("gpu0", 1); len(lost) != 1 || lost[0] != "old" {
		t.Fatalf("Lose: got %v, want [old]", lost)
	}
	if _, ok := c.Settle("gpu0", 1, old); ok {
		t.Fatalf("a receipt after its host was lost: got it settled, want it dropped")
	}
	fresh := c.Add("gpu0", 2, "new")
	if _, ok := c.Settle("gpu0", 1, fresh); ok {
		t.Fatalf("a receipt of the old epoch for a new call: got it settled, want it dropped")
	}
	if _, ok := c.Settle("gpu1", 2, fresh); ok {
		t.Fatalf("a receipt from another host: got it settled, want it dropped")
	}
	if v, ok := c.Settle("gpu0", 2, fresh); !ok || v != "new" {
		t.Fatalf("the new epoch's receipt: got %q, %v; want new, true", v, ok)
	}
	if _, ok := c.Settle("gpu0", 2, fresh); ok {
		t.Fatalf("a duplicate receipt: got it settled twice, want once")
	}
}
