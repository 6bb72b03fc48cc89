// Warm: a lane rebuilt in place of a failed one captures again what its
// predecessor replayed, most replayed first, before it takes traffic.

package lanecore

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	lanes "github.com/lanesched/lanes/lanes"

	execcache "github.com/lanesched/lanes/internal/execcache"
)

// Recipes lists what the lane's resident executables replay, most
// replayed first: what a lane rebuilt in its place captures again (Warm).
// They are host data, valid after the lane failed, even hung.
func (l *Lane) Recipes() []execcache.Recipe { return l.cache.Recipes() }

// Warm captures recipes (a predecessor's Recipes) into the lane's cache,
// in order, until budget has passed on the lane's clock (Config.Now; a
// lane without one is given no bound) or the cache is full; it evicts
// nothing. The lane must be ready with nothing in flight, its cache
// configured. A recipe that names a buffer no longer live, or that fails
// to capture, is skipped with its reason (execcache.WarmReport); a failure
// that leaves the stream unsafe fails the lane and is returned.
func (l *Lane) Warm(recipes []execcache.Recipe, budget time.Duration) (execcache.WarmReport, error) {
	switch {
	case l.state != StateReady:
		return execcache.WarmReport{}, rejected("warm", fmt.Errorf("%w: lane %d is %v", lanes.ErrInvalidBatch, l.id, l.state))
	case len(l.pending) > 0:
		return execcache.WarmReport{}, rejected("warm", fmt.Errorf("%w: lane %d has %d submissions in flight", lanes.ErrNotQuiescent, l.id, len(l.pending)))
	}
	var outOfTime func() bool
	if l.now != nil {
		deadline := l.now() + budget
		outOfTime = func() bool { return l.now() >= deadline }
	}
	for _, rc := range recipes { // never inside a capture: set up first
		for _, cmd := range rc.Commands {
			if lc := cmd.LibraryCall; cmd.Kind == cuda.KindCall && lc != nil && lc.Library != nil {
				if st := l.library(lc.Library); st == nil || !st.ready {
					_ = l.SetUpLibrary(lc.Library) // a failure skips the recipe: its capture fails
				}
			}
		}
	}
	enqueue := func(cmd cuda.Command) error { return l.s.Enqueue(l.bind(cmd)) }
	r, err := l.cache.Warm(l.s, recipes, enqueue, outOfTime)
	l.counters.Warmed += uint64(r.Captured)
	l.counters.WarmSkipped += uint64(len(r.Skipped))
	if r.Captured > 0 {
		l.tailFence = 0 // uploads went onto the stream after the last fence
	}
	if err != nil {
		l.fail(err)
		return r, fmt.Errorf("%w: %w", lanes.ErrCaptureFailed, err)
	}
	return r, nil
}

// DeviceBytesByTenant is the device memory each tenant's resident
// executables on the lane hold.
func (l *Lane) DeviceBytesByTenant() map[string]int64 { return l.cache.DeviceBytesByOwner() }
