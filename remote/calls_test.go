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
// and more calls are added to it, from many goroutines at once: every
// call ends exactly once, by its receipt, by its host's loss, or by Add
// refusing it (its epoch was lost first), and nothing is left.
func TestCallsEndExactlyOnce(t *testing.T) {
	var c remote.Calls[int]
	const n, late = 20000, 5000
	ended := make([]atomic.Int32, n+late)
	ids := make([]uint64, n)
	hosts := []string{"gpu0", "gpu1"}
	for i := range n {
		var ok bool
		if ids[i], ok = c.Add(hosts[i%2], 1, i); !ok {
			t.Fatalf("Add %d before any loss: got refused, want added", i)
		}
	}
	var wg sync.WaitGroup
	refused := atomic.Int32{}
	wg.Add(1)
	go func() { // calls still being added to gpu1 while it is lost
		defer wg.Done()
		for i := n; i < n+late; i++ {
			if _, ok := c.Add("gpu1", 1, i); !ok {
				ended[i].Add(1)
				refused.Add(1)
			}
		}
	}()
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
	go func() { // gpu1 is lost midway
		defer wg.Done()
		lost := c.Lose("gpu1", 1)
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
	if _, ok := c.Add("gpu1", 1, 0); ok {
		t.Fatalf("Add under an epoch lost: got added, want refused")
	}
	t.Logf("%d of %d late calls refused by the loss", refused.Load(), late)
}

// TestCallsDropLateReceipts: after a host is lost, its calls' receipts
// (a stopped host that resumes) find nothing; a restarted host's new epoch
// settles only its own calls.
func TestCallsDropLateReceipts(t *testing.T) {
	var c remote.Calls[string]
	old, _ := c.Add("gpu0", 1, "old")
	if got := c.InFlight("gpu0", 1); got != 1 {
		t.Fatalf("InFlight: got %d, want 1", got)
	}
	if lost := c.Lose("gpu0", 1); len(lost) != 1 || lost[0] != "old" {
		t.Fatalf("Lose: got %v, want [old]", lost)
	}
	if _, ok := c.Settle("gpu0", 1, old); ok {
		t.Fatalf("a receipt after its host was lost: got it settled, want it dropped")
	}
	fresh, ok := c.Add("gpu0", 2, "new")
	if !ok {
		t.Fatalf("Add under a new epoch: got refused, want added")
	}
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
