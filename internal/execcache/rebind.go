// Sharing executables by rebinding: a miss whose shape a resident has
// replays that resident with the miss's own parameters written into it in
// place (backend.Exec.Rebind), so tenants of one shape share a few executables
// instead of holding one each, and a miss replays after preparation closed.

package execcache

import (
	"errors"

	"github.com/lanesched/lanes/internal/backend"

	discovery "github.com/lanesched/lanes/internal/discovery"

	cache "github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// MinSharedNodes is the fewest commands a segment needs for a miss to be
// served by rebinding a resident of its shape. A rebind writes one set of
// parameters per node (a fraction of a launch's cost: 0.44 µs a node on
// the H200 against 2 to 3 µs an eager launch), and the graph launch then
// replaces one launch per command; for one command the two come out even,
// so such a miss runs eagerly when it cannot be captured.
const MinSharedNodes = 2

// maxNoRebind bounds the shapes remembered as refusing a rebind.
const maxNoRebind = 256

// Refusals by the device: a shape whose rebinds the device refused
// refusalsToPause times in a row is not rebound for rebindPause prepared
// batches (a driver that refuses a kind of node would otherwise cost a
// refused rebind at every step), then tried again.
const (
	refusalsToPause = 8
	rebindPause     = 4096
)

// refusal is why a shape is not rebound, and until when.
type refusal struct {
	err   error
	until uint64 // the prepared-batch count it may be tried again at (0: never)
}

// rebindRefused reports whether shape's rebinds are refused for now.
func (c *Cache) rebindRefused(shape discovery.ShapeKey) bool {
	f, ok := c.noRebind[shape]
	if ok && f.until != 0 && c.batches >= f.until {
		delete(c.noRebind, shape)
		return false
	}
	return ok
}

// refuseRebinds remembers that shape's rebinds are refused (until 0:
// for good, as its nodes refuse them).
func (c *Cache) refuseRebinds(shape discovery.ShapeKey, err error, until uint64) {
	if len(c.noRebind) >= maxNoRebind {
		clear(c.noRebind)
	}
	c.noRebind[shape] = refusal{err: err, until: until}
}

// share serves the misses it can by rebinding a resident of their shape
// and returns the others, in order. It takes a miss when its commands are
// known (enc.Command), it has at least MinSharedNodes commands, and it
// cannot be captured into an executable of its own: preparation closed,
// the stream busy, or the cache full by any of its bounds. The resident it
// takes is its shape's least recently used one that this batch does not
// need (donorFor): while preparation is open, the batch's owner's or one
// of an owner beyond its equal share, so a tenant within its share keeps
// its executables whatever its neighbours do, and the rest are traded,
// which costs a rebind where trading them by capture would cost a capture
// each (placeMisses' rule for those); once it closed, any tenant's. A rebind needs no quiescent stream: launches already
// enqueued keep the parameters they were launched with (CUDA's rule for
// cuGraphExecKernelNodeSetParams, which the simulated device keeps too).
func (c *Cache) share(r *discovery.PrepareReport, owner string, cands []discovery.Candidate, misses []discovery.SegmentKey, quiescent bool, enc Encoder) ([]discovery.SegmentKey, error) {
	if enc.Command == nil || len(c.shapes) == 0 {
		return misses, nil
	}
	capture := c.prep.state == cache.PrepOpen && quiescent
	rest := misses[:0]
	for _, k := range misses {
		cand := cands[indexOf(cands, k)]
		if cand.Len() < MinSharedNodes || capture && !c.full(cand) {
			rest = append(rest, k)
			continue
		}
		done, err := c.shareOne(r, owner, cands, cand, !capture || c.atShare(owner), c.prep.state == cache.PrepOpen, quiescent, enc)
		if err != nil {
			return nil, err
		}
		if !done {
			rest = append(rest, k)
		}
	}
	return rest, nil
}

// full reports whether a new executable for cand would exceed the
// cache's count, host-byte or device-byte bound.
func (c *Cache) full(cand discovery.Candidate) bool {
	return len(c.entries) >= c.prep.capacity ||
		c.byteLimit > 0 && c.resident+cand.Bytes > c.byteLimit ||
		c.devLimit > 0 && c.devBytes+c.estimate(cand.Len()) > c.devLimit
}

// shareOne rebinds a donor for cand (see share) and reports whether it
// did. A refusal is recorded: by the executable's nodes, the shape is not
// tried again; by the device, the donor is restored (restore), and a shape
// refused refusalsToPause times in a row rests for rebindPause batches.
// Any other failure that leaves eager fallback safe is remembered as the
// candidate's rejection.
func (c *Cache) shareOne(r *discovery.PrepareReport, owner string, cands []discovery.Candidate, cand discovery.Candidate, own, shares, quiescent bool, enc Encoder) (bool, error) {
	if c.rebindRefused(cand.Shape) {
		return false, nil
	}
	donor := c.donorFor(owner, own, shares, cands, cand.Shape)
	if donor == nil {
		return false, nil
	}
	recipe := c.spare
	if cap(recipe) < cand.Len() {
		recipe = make([]cuda.Command, cand.Len())
	}
	recipe = recipe[:cand.Len()]
	for i := range recipe {
		keepInto(&recipe[i], enc.Command(cand.Start+i))
	}
	if ok, _, err := c.rebindDonor(r, donor, recipe, cand.Shape, quiescent); !ok {
		c.spare = recipe
		if err == nil {
			return false, nil
		}
		if !err.EagerFallbackSafe {
			return false, err
		}
		c.remember(cand.Key)
		r.Rejections = append(r.Rejections, err)
		c.dispose(r, cands, cand.Key, discovery.DispositionCaptureRejected)
		r.CaptureRejections++
		return true, nil
	}
	c.spare = donor.recipe
	c.take(r, donor, Executable{Key: cand.Key, Shape: cand.Shape, Commands: cand.Len(), GraphNodes: donor.GraphNodes,
		NodeCounts: donor.NodeCounts, Scope: cand.Scope, Owner: owner, Bytes: cand.Bytes, recipe: recipe}, discovery.UpdateByParameters)
	c.dispose(r, cands, cand.Key, discovery.DispositionUpdated)
	return true, nil
}

// rebindDonor writes recipe, the commands of a miss of shape, into the
// resident donor in place (backend.Exec.Rebind), timed, and reports whether
// it did. A refusal is recorded in r and returns neither ok nor an error:
// by the executable's nodes, the shape is not rebound again; by the
// device, the donor is restored (restore; gone: it could not be, and was
// evicted), and a shape refused refusalsToPause times in a row rests for
// rebindPause batches. Any other failure is returned, saying whether eager
// fallback is safe.
func (c *Cache) rebindDonor(r *discovery.PrepareReport, donor *Executable, recipe []cuda.Command, shape discovery.ShapeKey, quiescent bool) (ok, gone bool, err *ReplayError) {
	t := c.start()
	rerr := donor.Exec.Rebind(recipe)
	c.timed(r, cache.StageRebind, len(recipe), t)
	var refused *backend.RebindRefusedError
	switch {
	case rerr == nil:
		if len(c.refusedInARow) > 0 {
			delete(c.refusedInARow, shape)
		}
		return true, false, nil
	case !errors.As(rerr, &refused):
		return false, false, &ReplayError{Stage: "rebind", Detail: rerr.Error(), EagerFallbackSafe: !cuda.Classify(rerr).Sticky, Err: rerr}
	}
	r.RebindRefusals = append(r.RebindRefusals, rerr)
	if refused.Refusal != backend.RebindDeviceRefused {
		c.refuseRebinds(shape, rerr, 0)
		return false, false, nil
	}
	if gone, err = c.restore(r, donor, refused, quiescent); err != nil {
		return false, gone, err
	}
	if len(c.refusedInARow) >= maxNoRebind {
		clear(c.refusedInARow)
	}
	if c.refusedInARow[shape]++; c.refusedInARow[shape] >= refusalsToPause {
		delete(c.refusedInARow, shape)
		c.refuseRebinds(shape, rerr, c.batches+rebindPause)
	}
	return false, gone, nil
}

// restore makes a donor whose rebind the device refused replay its own
// key again: unchanged when the refusal came at its first node, else
// rebound to its own recipe (the nodes before the refused one took the
// new parameters). One it cannot restore is evicted (gone): a sealed cache
// never gets it back, so it is kept whenever it can be.
func (c *Cache) restore(r *discovery.PrepareReport, donor *Executable, refused *backend.RebindRefusedError, quiescent bool) (gone bool, err *ReplayError) {
	if refused.Node <= 0 {
		return false, nil
	}
	if donor.recipe != nil {
		err := donor.Exec.Rebind(donor.recipe)
		if err == nil {
			return false, nil
		}
		if cuda.Classify(err).Sticky {
			return false, &ReplayError{Stage: "rebind", Detail: err.Error(), Err: err}
		}
	}
	c.evict(donor.Key, quiescent)
	r.Evicted = append(r.Evicted, donor.Key)
	return true, nil
}

// donorFor is the resident a miss of owner's batch of this shape may take
// (see share), or nil: walking the shape's residents least recently used
// first, past those the batch needs, the owner's own unless own (an owner
// under its share that can capture gets an executable of its own rather
// than trade its own away), and, with shares (while preparation is open),
// those of other owners within their share (no one's, Disown, are
// anyone's). With more owners than the cache holds executables every
// owner is beyond its share, and the walk ends at the first resident.
// Once preparation has closed, nothing can be captured in a resident's
// place: every tenant of the shape shares its residents, least recently
// used first, and a tenant whose executable another took rebinds in turn.
func (c *Cache) donorFor(owner string, own, shares bool, cands []discovery.Candidate, shape discovery.ShapeKey) *Executable {
	ring := c.shapes[shape]
	if ring == nil {
		return nil
	}
	for e := ring.oldest; e != nil; e = e.shapeNext {
		mine := e.Owner == owner
		if mine && !own || shares && !mine && e.Owner != "" && !c.overShare(e.Owner, owner) || indexOf(cands, e.Key) >= 0 {
			continue
		}
		return e
	}
	return nil
}

// take makes the resident donor, just rebound or updated in place, replay
// exe's candidate: it takes exe's key, counts, scope, owner, bytes and
// recipe, becomes the most recently used, and the report says so.
func (c *Cache) take(r *discovery.PrepareReport, donor *Executable, exe Executable, how discovery.UpdateKind) {
	from := donor.Key
	c.remove(from)
	donor.Key, donor.Shape, donor.Commands, donor.GraphNodes, donor.NodeCounts, donor.Scope = exe.Key, exe.Shape, exe.Commands, exe.GraphNodes, exe.NodeCounts, exe.Scope
	donor.Owner, donor.Bytes, donor.DeviceBytes, donor.recipe, donor.Hits = exe.Owner, exe.Bytes, donor.Exec.DeviceBytes(), exe.recipe, 0
	donor.lastUsed, donor.lastBatch = c.tick(), c.batches
	c.put(donor)
	r.Updates = append(r.Updates, discovery.Update{From: from, To: exe.Key, InPlace: how})
	r.Evicted = append(r.Evicted, from)
	r.Updated++
}

// dispose gives disposition d to every candidate of key k.
func (c *Cache) dispose(r *discovery.PrepareReport, cands []discovery.Candidate, k discovery.SegmentKey, d discovery.Disposition) {
	for i := range cands {
		if cands[i].Key == k {
			r.Dispositions[i] = d
		}
	}
}

// keepInto copies cmd into dst as the cache keeps it (a recipe), reusing
// dst's argument and host-byte storage: the caller may change cmd's
// slices afterwards.
func keepInto(dst *cuda.Command, cmd cuda.Command) {
	args, host := dst.Args[:0], dst.Host[:0]
	*dst = cmd
	dst.Args, dst.Host = nil, nil
	if len(cmd.Args) > 0 {
		dst.Args = append(args, cmd.Args...)
	}
	if len(cmd.Host) > 0 {
		dst.Host = append(host, cmd.Host...)
	}
}

// keepAll is a copy of cmds the caller may keep.
func keepAll(cmds []cuda.Command) []cuda.Command {
	if cmds == nil {
		return nil
	}
	out := make([]cuda.Command, len(cmds))
	for i := range cmds {
		keepInto(&out[i], cmds[i])
	}
	return out
}
