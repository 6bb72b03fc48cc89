package system

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestCombinerSendsEachOnceInOrder: many callers queue at once; every
// item is sent exactly once, one sender at a time, in batches no larger
// than the bound, and each caller's items in the order it queued them.
func TestCombinerSendsEachOnceInOrder(t *testing.T) {
	const callers, each = 16, 5000
	type item struct{ caller, seq int }
	var (
		sending atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex
		got     = make([][]int, callers)
		batches int
	)
	c := Combiner[item]{Most: 64, Send: func(batch []item) {
		if sending.Add(1) != 1 {
			overlap.Add(1)
		}
		if len(batch) == 0 || len(batch) > 64 {
			t.Errorf("a batch of %d items: want 1 to 64", len(batch))
		}
		mu.Lock()
		batches++
		for _, it := range batch {
			got[it.caller] = append(got[it.caller], it.seq)
		}
		mu.Unlock()
		sending.Add(-1)
	}}
	var wg sync.WaitGroup
	for k := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				c.Add(item{k, i})
			}
		}()
	}
	wg.Wait()
	if n := overlap.Load(); n != 0 {
		t.Fatalf("two senders at once %d times: want one at a time", n)
	}
	for k, seqs := range got {
		if len(seqs) != each {
			t.Fatalf("caller %d: got %d items sent, want %d (each exactly once)", k, len(seqs), each)
		}
		for i, s := range seqs {
			if s != i {
				t.Fatalf("caller %d: item %d sent as number %d, want in the order queued", k, s, i)
			}
		}
	}
	t.Logf("%d items in %d batches", callers*each, batches)
}
