// Capture on a busy lane: a lane captures a batch's new segments only on a
// quiescent stream (nothing of it in flight), so a tenant whose first
// steps keep meeting its neighbours' work on a shared lane would run
// eagerly for ever. The lane lets its stream drain once for such a tenant
// and gives it the quiescent stream first.

package actors

import discovery "github.com/lanesched/lanes/internal/discovery"

// noteCapture records whether a tenant's batch just submitted had
// segments to capture that waited for a quiescent stream.
func (a *laneActor) noteCapture(tenant string, r discovery.PrepareReport) {
	if r.QuiescenceDeferred > 0 {
		a.wantCapture[tenant] = true
	} else if len(a.wantCapture) > 0 {
		delete(a.wantCapture, tenant)
	}
}

// awaitsDrain reports whether a tenant's batch should wait for the stream
// to drain before it is submitted: its last batch wanted a capture the
// busy stream deferred, and the stream is still busy.
func (a *laneActor) awaitsDrain(tenant string) bool {
	return len(a.calls) > 0 && a.wantCapture[tenant]
}

// draining reports whether the stream takes nothing more until it drains:
// a tenant that wants a capture has a batch waiting. Everyone waits for
// one drain (about the device time of what is on the stream, bounded by
// StreamDepth); the capture then replays from the next step on.
func (a *laneActor) draining() bool {
	for t := range a.wantCapture {
		if a.queue.has(t) {
			return true
		}
	}
	return false
}

// captureTurn takes, on a quiescent stream, the waiting batch of a tenant
// that wants a capture, before anyone else's; nil when there is none.
func (a *laneActor) captureTurn() work {
	if len(a.calls) > 0 || len(a.wantCapture) == 0 {
		return nil
	}
	return a.queue.popFor(func(t string) bool { return a.wantCapture[t] })
}
