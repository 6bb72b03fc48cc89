// A cache's preparation as it goes: configured, recorded, sealed.

package execcache

import (
	"fmt"

	discovery "github.com/lanesched/lanes/internal/discovery"

	cache "github.com/lanesched/lanes/cache"
)

type tracker struct {
	state    cache.PrepState
	capacity int
	counts   cache.Preparation
}

func (t *tracker) configure(capacity, resident int) error {
	switch {
	case t.state == cache.PrepOpen:
		return fmt.Errorf("%w: seal it before configuring again", cache.ErrAlreadyOpen)
	case capacity <= 0:
		return fmt.Errorf("%w: %d; give a capacity of at least 1 executable", cache.ErrCapacity, capacity)
	case capacity < resident:
		return fmt.Errorf("%w: %d is below the %d resident executables; trim first", cache.ErrCapacity, capacity, resident)
	}
	t.state, t.capacity = cache.PrepOpen, capacity
	t.counts = cache.Preparation{}
	return nil
}

func (t *tracker) seal() error {
	if t.state != cache.PrepOpen {
		return fmt.Errorf("%w: seal needs an open preparation (state %v)", cache.ErrNotOpen, t.state)
	}
	t.state = cache.PrepSealed
	return nil
}

func (t *tracker) record(r discovery.PrepareReport) {
	t.counts.Batches++
	t.counts.Captured += r.Captured
	t.counts.Uploaded += r.Uploaded
	t.counts.CapacityDeferred += r.CapacityDeferred
}

func (t *tracker) snapshot(resident, rejected int) cache.Preparation {
	p := t.counts
	p.State, p.Capacity, p.Resident, p.Rejected = t.state, t.capacity, resident, rejected
	return p
}
