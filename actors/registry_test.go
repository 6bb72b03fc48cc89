package actors

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRegistryTakesEachCallOnce: calls registered from many goroutines are
// each taken exactly once although two takers race for every id, and
// matching sees every call still registered.
func TestRegistryTakesEachCallOnce(t *testing.T) {
	var r callRegistry
	const n = 4000
	var lanes [2]laneRef
	for i := range n {
		c := &call{id: uint64(i + 1)}
		c.lane.Store(&lanes[i%2])
		r.store(c)
	}
	if got := len(r.matching(func(c *call) bool { return c.lane.Load() == &lanes[1] })); got != n/2 {
		t.Fatalf("matching found %d calls of lane 1, want %d", got, n/2)
	}
	var taken atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := uint64(1); id <= n; id++ {
				if c := r.take(id); c != nil {
					if c.id != id {
						t.Errorf("take(%d): got call %d, want call %d", id, c.id, id)
					}
					taken.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if taken.Load() != n {
		t.Fatalf("got %d calls taken, want each of %d exactly once", taken.Load(), n)
	}
	if _, ok := r.load(1); ok {
		t.Fatal("load(1) after every call was taken: got a call, want none")
	}
	if left := len(r.matching(func(*call) bool { return true })); left != 0 {
		t.Fatalf("matching after every call was taken: got %d calls, want 0", left)
	}
}

// TestRegistryBarrierSettlesAdmission: Stop's invariant. Goroutines keep
// registering while the registry is closed and passed by a barrier: what is
// registered right after the barrier is every call that was ever accepted.
func TestRegistryBarrierSettlesAdmission(t *testing.T) {
	var r callRegistry
	var closed atomic.Bool
	var accepted atomic.Int64
	var attempts [4]atomic.Int64 // per goroutine: storeUnless calls returned
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if r.storeUnless(&call{id: uint64(g)<<32 | i}, &closed) {
					accepted.Add(1)
				}
				attempts[g].Add(1)
			}
		}()
	}
	for accepted.Load() < 100 { // registration under way on every side
		time.Sleep(time.Millisecond)
	}
	closed.Store(true)
	r.barrier()
	all := func(*call) bool { return true }
	settled := len(r.matching(all))
	// The goroutines keep trying, refused: each makes at least 100 attempts
	// that began after settled was counted (its count read here may miss one
	// attempt in progress, hence 101 more).
	var from [len(attempts)]int64
	for g := range attempts {
		from[g] = attempts[g].Load()
	}
	deadline := time.Now().Add(10 * time.Second)
	for g := range attempts {
		for attempts[g].Load() < from[g]+101 {
			if time.Now().After(deadline) {
				t.Fatalf("goroutine %d after 10s: got %d attempts since the barrier, want 101", g, attempts[g].Load()-from[g])
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	close(stop)
	wg.Wait()
	if int64(settled) != accepted.Load() {
		t.Fatalf("got %d calls registered at the barrier and %d accepted in all, want every accepted call registered at the barrier", settled, accepted.Load())
	}
	if end := len(r.matching(all)); end != settled {
		t.Fatalf("got %d calls registered at the end, want the %d registered at the barrier (none after it)", end, settled)
	}
}
