// What a lane holds on the device beyond its stream: the callers' input
// buffers it pinned for staged replays (lanecore.Lane.UnpinInputs) and its
// libraries' state and workspaces (lanecore.Lane.ReleaseLibraries), let go of
// once nothing can use them.

package actors

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
)

// hungPins is a lane abandoned after a hang that still held pinned input
// buffers or library workspaces, and an event recorded after everything
// its stream was given: a copy from those buffers, or a replay using a
// workspace, may still run until that event completes.
type hungPins struct {
	lane    *lanecore.Lane
	drained backend.Event
}

// releasePins lets go of the lane's pinned input buffers when its stream
// can no longer read them: it ended its work, failed, or its device is
// lost. A hung stream may still run its copies: its lane's pins are kept
// until an event recorded behind them completes (keepHungPins).
func (a *laneActor) releasePins() {
	if a.lane != nil {
		if a.hung {
			a.keepHungPins()
		} else {
			a.letGo(a.lane)
		}
		a.publish()
	}
	a.releaseHungPins()
}

// keepHungPins sets the hung lane's pins aside, behind an event recorded
// on its stream (before the stream is let go of), when it has any.
func (a *laneActor) keepHungPins() {
	pinned, _ := a.lane.PinnedInputs()
	libs, _ := a.lane.Libraries()
	if pinned+libs == 0 || a.ref.stream == nil {
		return
	}
	for _, h := range a.hungLanes {
		if h.lane == a.lane {
			return
		}
	}
	ev, err := a.ref.stream.RecordFence()
	if err != nil {
		// Nothing can tell when the stream drains: the pins stay until
		// the device closes (never unpinned while a copy may read them).
		return
	}
	a.hungLanes = append(a.hungLanes, hungPins{a.lane, ev})
	a.ref.hungHeld.Add(1)
}

// releaseHungPins unpins what lanes abandoned after a hang held, once
// their streams drained (or failed: nothing more runs there).
func (a *laneActor) releaseHungPins() {
	if len(a.hungLanes) == 0 {
		return
	}
	keep := a.hungLanes[:0]
	for _, h := range a.hungLanes {
		if q := h.drained.Query(); q.State == backend.FencePending && q.Err == nil {
			keep = append(keep, h)
			continue
		}
		a.ref.hungHeld.Add(-1)
		a.letGo(h.lane)
		h.drained.Release()
	}
	clear(a.hungLanes[len(keep):])
	a.hungLanes = keep
}

// letGo releases what the lane holds on the device beyond its stream. A
// device with a hung stream not yet drained would block the release for
// as long as the hang lasts (freeing a workspace, or cuBLAS's handle
// teardown, waits for the device's work): then the lane's libraries are
// left to the device's close instead.
func (a *laneActor) letGo(l *lanecore.Lane) {
	_ = l.UnpinInputs()
	if a.s.deviceHung(a.ref.dev) {
		l.AbandonLibraries()
		return
	}
	_ = l.ReleaseLibraries()
}

// deviceHung reports whether a lane of dev was abandoned after a hang and
// its stream has not drained: the device still runs the hung work.
func (s *Scheduler) deviceHung(dev cuda.Device) bool {
	for _, r := range s.lanes {
		if r.dev == dev && r.hungHeld.Load() > 0 {
			return true
		}
	}
	return false
}
