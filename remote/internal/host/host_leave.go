// A lane host that leaves well: no new work, what it has finished, then
// its fronts told.

package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lanesched/lanes/internal/wirepb"
	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// errHostStopped is a Leave of a host Stop stopped (or stops meanwhile).
var errHostStopped = errors.New("remote: the host was stopped")

// errLeaving is a submission (or allocation) refused by a leaving host.
var errLeaving = fmt.Errorf("%w: the host is leaving: it takes no new work", wire.ErrHostLeaving)

// Leave asks the host to leave well: from now on it refuses new
// submissions and allocations (the fronts hear it is leaving and place no
// new tenants on it), finishes every submission it has, then tells its
// fronts it left, whose tenants then move (DeviceStateLostError with
// Left). Reads, frees and forgets still run meanwhile, and after. It
// returns once every front it told has answered that it heard and has
// nothing more in flight on the host (what a front sent before it heard
// is answered first: a submission refused, an operation run), or a
// front's registration ended meanwhile; or with ctx's error
// (the host still leaves: Stop ends what is left, and what a front still
// has in flight on it ends indeterminate there). Stop the host after.
func (h *Host) Leave(ctx context.Context) error {
	if h.stopped.Load() {
		return errHostStopped
	}
	done := make(chan struct{})
	h.sys.Actors.Root.Send(h.pid, &leaveNow{done: done})
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-h.quit:
		return errHostStopped
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for h.inFlight.Load() > 0 { // reads, frees and forgets go on: the fronts' releases wait for them
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("remote: leave: %d submissions still in flight: %w", h.inFlight.Load(), ctx.Err())
		case <-h.quit:
			return fmt.Errorf("remote: leave: %w before %d submissions ended (they end indeterminate at their fronts)", errHostStopped, h.inFlight.Load())
		}
	}
	told := h.welcomed()
	for _, r := range told { // behind every receipt of the registration
		h.send(Outgoing{leaving: &wirepb.Leaving{Epoch: r.epoch, Drained: true}})
	}
	for {
		waiting := h.unreleased(told)
		if len(waiting) == 0 {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("remote: leave: the front at %s has not said it has nothing more in flight on this host: %w", waiting[0].front.GetAddress(), ctx.Err())
		case <-h.quit:
			return errHostStopped
		}
	}
}

// unreleased is the registrations of told still held whose front has not
// said it sends nothing more under them.
func (h *Host) unreleased(told []*registration) []*registration {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	var out []*registration
	for _, r := range told {
		if h.Regs[r.epoch] == r && !r.released.Load() {
			out = append(out, r)
		}
	}
	return out
}

// startLeaving refuses new work from now on and tells the fronts (the
// host's actor, so no submission it took is missed).
func (h *Host) startLeaving() {
	if h.Leaving.Load() {
		return
	}
	h.Leaving.Store(true)
	h.cfg.Logf("leaving: no new submissions; finishing %d in flight", h.inFlight.Load())
	for _, r := range h.welcomed() {
		h.toFront(r, dataplane.PlaneLeaving, &wirepb.Leaving{Epoch: r.epoch})
	}
}
