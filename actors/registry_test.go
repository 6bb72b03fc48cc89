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
						t.Errorf("took call %d for id %d", c.id, id)
					}
					taken.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if taken.Load() != n {
		t.Fatalf("%d calls taken, want each of %d exactly once", taken.Load(), n)
	}
	if _, ok := r.load(1); ok || len(r.matching(func(*call) bool { return true })) != 0 {
		t.Fatal("a taken call is still registered")
	}
}

// TestRegistryBarrierSettlesAdmission: Stop's invariant. Goroutines keep
// registering while the registry is closed and passed by a barrier: what is
// registered right after the barrier is every call that was ever accepted.
func TestRegistryBarrierSettlesAdmission(t *testing.T) {
	var r callRegistry
	var closed atomic.Bool
	var accepted atomic.Int64
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
	time.Sleep(5 * time.Millisecond) // the goroutines keep trying, refused
	close(stop)
	wg.Wait()
	if int64(settled) != accepted.Load() || len(r.matching(all)) != settled {
		t.Fatalf("%d registered at the barrier, %d accepted in all, %d registered at the end", settled, accepted.Load(), len(r.matching(all)))
	}
}
