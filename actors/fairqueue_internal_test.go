package actors

import (
	"slices"
	"testing"

	"github.com/lanesched/lanes/lanes"
)

func request(tenant string, entries, weight int) *submitRequest {
	return &submitRequest{Tenant: tenant, Batch: lanes.Batch{Entries: make([]lanes.Entry, entries)}, weight: weight}
}

func order(q *fairQueue) []string {
	var got []string
	for m := q.pop(); m != nil; m = q.pop() {
		got = append(got, m.owner())
	}
	return got
}

func TestFairQueueTakesTurns(t *testing.T) {
	q := fairQueue{quantum: 1}
	for range 4 {
		q.push(request("flood", 1, 1))
	}
	q.push(request("light", 1, 1))
	q.push(request("other", 1, 1))
	if got, want := order(&q), []string{"flood", "light", "other", "flood", "flood", "flood"}; !slices.Equal(got, want) {
		t.Fatalf("got order %v, want %v", got, want)
	}
	if q.len() != 0 || len(q.queues) != 0 || q.size != 0 {
		t.Fatalf("the emptied queue: got len %d, %d tenant queues, %d tenants in the ring; want 0, 0, 0", q.len(), len(q.queues), q.size)
	}
}

func TestFairQueueWeighsTenantsAndEntries(t *testing.T) {
	q := fairQueue{quantum: 4}
	for range 3 {
		q.push(request("heavy", 4, 2)) // two batches per round
		q.push(request("light", 4, 1)) // one per round
	}
	if got, want := order(&q), []string{"heavy", "heavy", "light", "heavy", "light", "light"}; !slices.Equal(got, want) {
		t.Fatalf("weights: got order %v, want %v", got, want)
	}
	q.push(request("huge", 40, 1)) // ten rounds of credit
	for range 12 {
		q.push(request("small", 4, 1))
	}
	got := order(&q)
	if at := slices.Index(got, "huge"); at != 9 {
		t.Fatalf("the huge batch: got position %d (after %d small ones), want 9: after nine rounds of credit, one small batch each (order %v)", at, at, got)
	}
}

func TestFairQueueKeepsEachTenantsOrder(t *testing.T) {
	q := fairQueue{quantum: 3}
	var want []work
	for i := range 50 {
		m := request([]string{"a", "b", "c"}[i%3], 1+i%5, 1+i%2)
		want = append(want, m)
		q.push(m)
	}
	seen := map[string]int{}
	for m := q.pop(); m != nil; m = q.pop() {
		i := slices.Index(want, m)
		if i < seen[m.owner()] {
			t.Fatalf("tenant %s: got its batch %d after its batch %d, want its batches in the order pushed", m.owner(), i, seen[m.owner()])
		}
		seen[m.owner()] = i
	}
	q.push(request("a", 1, 1))
	if d := q.drain(); len(d) != 1 || q.len() != 0 || q.pop() != nil {
		t.Fatalf("drain of one queued batch: got %d taken, len %d after; want 1 taken, len 0, nothing left to pop", len(d), q.len())
	}
}

// TestFairQueueRemove: a withdrawn batch leaves from wherever it waits (a
// tenant's head, middle or last one); the others keep their order and
// turns, and a tenant left with nothing leaves the ring.
func TestFairQueueRemove(t *testing.T) {
	q := fairQueue{quantum: 1}
	var calls []*submitRequest
	for i, tenant := range []string{"a", "a", "a", "b", "c", "c"} {
		m := request(tenant, 1, 1)
		m.Call = uint64(i + 1)
		calls = append(calls, m)
		q.push(m)
	}
	byCall := func(id uint64) func(work) bool {
		return func(w work) bool { return w.(*submitRequest).Call == id }
	}
	if q.remove(byCall(99)) != nil || q.len() != 6 {
		t.Fatalf("removing a call not waiting: got len %d, want 6 and nil", q.len())
	}
	for _, id := range []uint64{2, 4, 5} { // a's middle, b's only, c's head
		if got := q.remove(byCall(id)); got != calls[id-1] {
			t.Fatalf("remove call %d: got %v, want it", id, got)
		}
	}
	if q.len() != 3 || q.has("b") || q.size != 2 {
		t.Fatalf("after the removals: got len %d, b waiting %v, %d tenants in the ring; want 3, false, 2", q.len(), q.has("b"), q.size)
	}
	var got []uint64
	for m := q.pop(); m != nil; m = q.pop() {
		got = append(got, m.(*submitRequest).Call)
	}
	if want := []uint64{1, 6, 3}; !slices.Equal(got, want) {
		t.Fatalf("what is left, in turn: got calls %v, want %v", got, want)
	}
}
