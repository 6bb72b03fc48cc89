// Warm: what a rebuilt lane captures again of what its predecessor
// replayed (Recipes), most hit first, before it takes traffic.

package execcache

import (
	"errors"
	"fmt"
	"sort"

	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	cache "github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// Recipe is what capturing an executable again takes: its key, shape,
// scope, owner and host bytes, the commands it replays, and how often it
// was replayed.
type Recipe struct {
	Key      discovery.SegmentKey
	Shape    discovery.ShapeKey
	Scope    cache.Scope
	Owner    string
	Bytes    int64
	Hits     uint64
	Commands []cuda.Command
}

// Recipes lists the resident executables whose commands the cache kept
// (those prepared through an Encoder with Command), most replayed first
// (then most recently used).
func (c *Cache) Recipes() []Recipe {
	var kept []*Executable
	for _, e := range c.entries {
		if e.recipe != nil {
			kept = append(kept, e)
		}
	}
	sort.Slice(kept, func(a, b int) bool {
		if kept[a].Hits != kept[b].Hits {
			return kept[a].Hits > kept[b].Hits
		}
		return kept[a].lastUsed > kept[b].lastUsed
	})
	out := make([]Recipe, len(kept))
	for i, e := range kept {
		out[i] = Recipe{Key: e.Key, Shape: e.Shape, Scope: e.Scope, Owner: e.Owner, Bytes: e.Bytes, Hits: e.Hits, Commands: keepAll(e.recipe)}
	}
	return out
}

// WarmSkip is why Warm did not capture a recipe again.
type WarmSkip string

// The reasons Warm skips a recipe.
const (
	// WarmOutOfTime: the time Warm was given ran out first.
	WarmOutOfTime WarmSkip = "out_of_time"
	// WarmNoRoom: the cache's capacity, host-byte or device-byte bound
	// was reached by recipes replayed more.
	WarmNoRoom WarmSkip = "no_room"
	// WarmStaleBuffer: a command names a buffer that is no longer live
	// (its tenant freed it, or was forgotten).
	WarmStaleBuffer WarmSkip = "stale_buffer"
	// WarmCaptureFailed: the capture, instantiation or upload failed
	// (Err says how); the lane replays it once traffic captures it.
	WarmCaptureFailed WarmSkip = "capture_failed"
	// WarmResident: an executable of its key is resident already.
	WarmResident WarmSkip = "resident"
)

// Skipped is one recipe Warm did not capture: its key, owner and why.
type Skipped struct {
	Key    discovery.SegmentKey
	Owner  string
	Reason WarmSkip
	Err    error // the failure behind WarmCaptureFailed or WarmStaleBuffer
}

// WarmReport is what one Warm did.
type WarmReport struct {
	Captured int            // recipes now resident
	Skipped  []Skipped      // the others, with why
	Timings  []cache.Timing // each capture, instantiation and upload, by the cache's clock
}

// Warm captures recipes on s, in order, into this cache as resident
// executables (their owners, keys and hit counts kept), until outOfTime
// reports true or the cache is full; it evicts nothing. enqueue enqueues
// one command as the lane would. s must be quiescent. An error that
// leaves the stream unsafe (a sticky device error, or a capture whose end
// could not be proven) is returned, and the rest are skipped.
func (c *Cache) Warm(s backend.Stream, recipes []Recipe, enqueue func(cuda.Command) error, outOfTime func() bool) (WarmReport, error) {
	var r WarmReport
	var prep discovery.PrepareReport // collects Timings
	skip := func(rest []Recipe, why WarmSkip) {
		for _, rc := range rest {
			r.Skipped = append(r.Skipped, Skipped{Key: rc.Key, Owner: rc.Owner, Reason: why})
		}
	}
	for i, rc := range recipes {
		if outOfTime != nil && outOfTime() {
			skip(recipes[i:], WarmOutOfTime)
			break
		}
		if _, ok := c.entries[rc.Key]; ok {
			r.Skipped = append(r.Skipped, Skipped{Key: rc.Key, Owner: rc.Owner, Reason: WarmResident})
			continue
		}
		if len(c.entries) >= c.prep.capacity || c.byteLimit > 0 && c.resident+rc.Bytes > c.byteLimit ||
			c.devLimit > 0 && c.devBytes+c.estimate(len(rc.Commands)) > c.devLimit {
			r.Skipped = append(r.Skipped, Skipped{Key: rc.Key, Owner: rc.Owner, Reason: WarmNoRoom})
			continue
		}
		e, err := c.warmOne(s, rc, enqueue, &prep)
		if err != nil {
			var re *ReplayError
			if errors.As(err, &re) && !re.EagerFallbackSafe {
				skip(recipes[i:], WarmCaptureFailed)
				r.Timings = prep.Timings
				return r, err
			}
			why := WarmCaptureFailed
			if errors.Is(err, cuda.ErrStaleHandle) || errors.Is(err, cuda.ErrForeignHandle) {
				why = WarmStaleBuffer
			}
			r.Skipped = append(r.Skipped, Skipped{Key: rc.Key, Owner: rc.Owner, Reason: why, Err: err})
			continue
		}
		if c.devLimit > 0 && c.devBytes+e.DeviceBytes > c.devLimit {
			_ = e.Exec.Destroy()
			r.Skipped = append(r.Skipped, Skipped{Key: rc.Key, Owner: rc.Owner, Reason: WarmNoRoom})
			continue
		}
		c.put(e)
		r.Captured++
	}
	r.Timings = prep.Timings
	return r, nil
}

// warmOne captures, instantiates and uploads one recipe.
func (c *Cache) warmOne(s backend.Stream, rc Recipe, enqueue func(cuda.Command) error, prep *discovery.PrepareReport) (*Executable, error) {
	cand := discovery.Candidate{Start: 0, End: len(rc.Commands), Key: rc.Key, Shape: rc.Shape, Scope: rc.Scope, Bytes: rc.Bytes}
	t := c.start()
	graph, exe, err := record(s, cand, func(i int) error { return enqueue(rc.Commands[i]) })
	c.timed(prep, cache.StageCapture, len(rc.Commands), t)
	if err != nil {
		return nil, err
	}
	t = c.start()
	exe, err = instantiate(graph, exe)
	c.timed(prep, cache.StageInstantiate, len(rc.Commands), t)
	if err != nil {
		return nil, err
	}
	t = c.start()
	if err := exe.upload(s); err != nil {
		_ = exe.Exec.Destroy()
		return nil, err
	}
	c.timed(prep, cache.StageUpload, exe.GraphNodes, t)
	exe.Owner, exe.Bytes, exe.Hits, exe.recipe = rc.Owner, rc.Bytes, rc.Hits, rc.Commands
	exe.DeviceBytes = exe.Exec.DeviceBytes()
	exe.lastUsed, exe.lastBatch = c.tick(), c.batches
	c.learn(exe)
	return exe, nil
}

// String says how many recipes were captured and why the rest were not.
func (r WarmReport) String() string {
	why := map[WarmSkip]int{}
	for _, s := range r.Skipped {
		why[s.Reason]++
	}
	return fmt.Sprintf("warmed %d, skipped %v", r.Captured, why)
}
