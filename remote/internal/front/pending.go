// Pending: one call in flight on a lane host, ended exactly once.

package front

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// Pending is a call in flight on a lane host: a lanes.Pending.
type Pending struct {
	enc     *Encoded   // the template, if it was submitted encoded
	release func()     // gives back the call's bytes in flight
	placed  *placement // a submission's tenant placement, whose calls it counts
	done    chan struct{}
	sentAt  atomic.Int64  // a sampled call's queuing, Unix nanoseconds; 0 for most (set once it is recorded, read at its answer)
	w       *withdrawable // a submission whose caller's context can end; nil for most
	tenant  string
	host    string
	r       lanes.Receipt
	err     error
	result  *wirepb.OpResult
}

// Done is closed when the call ended.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Result is the call's receipt and error, once Done is closed. The
// receipt's attribution is read-only, as in one process (lanes.Attribution):
// receipts that attribute identically (a tenant's steady steps) share one
// copy of their rows.
func (p *Pending) Result() (lanes.Receipt, error) {
	<-p.done
	return p.r, p.err
}

// wait waits for the end or ctx; a ctx that ends first detaches.
func (p *Pending) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		select {
		case <-p.done:
			if !errors.Is(p.err, actors.ErrWithdrawn) { // ctx's end withdrew it: say detached, as one process does
				return nil
			}
		default:
		}
		return &actors.DetachedError{Pending: p, Err: fmt.Errorf("remote: stopped waiting (the call is still in flight on %s): %w", p.host, ctx.Err())}
	}
}

// end ends the call; the in-flight table makes it once.
func (p *Pending) end(r lanes.Receipt, err error, res *wirepb.OpResult) {
	if p.release != nil {
		p.release()
	}
	if p.placed != nil {
		p.placed.calls.Add(-1)
	}
	p.r, p.err, p.result = r, err, res
	close(p.done)
	if p.w != nil {
		p.w.unwatch()
	}
}

// withdrawable is a submission whose caller's context can end: the
// context, and how to stop watching it once the call ended.
type withdrawable struct {
	ctx   context.Context
	mu    sync.Mutex
	stop  func() bool // stops watching ctx (context.AfterFunc's); nil before watching, and once the call ended
	ended bool
}

// watching keeps how to stop watching the context, or stops at once if
// the call ended meanwhile.
func (w *withdrawable) watching(stop func() bool) {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		stop()
		return
	}
	w.stop = stop
	w.mu.Unlock()
}

// unwatch stops watching the context: the call ended, so that a context
// that outlives many calls holds nothing of theirs.
func (w *withdrawable) unwatch() {
	w.mu.Lock()
	w.ended = true
	stop := w.stop
	w.stop = nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// lost ends a call whose host was lost.
func (p *Pending) lost(e error) {
	p.end(lanes.Receipt{Outcome: lanes.OutcomeIndeterminate, Err: e, Tenant: p.tenant, Lane: -1}, e, nil)
}

// opError is the error of an op's result, or nil.
func opError(res *wirepb.OpResult) error {
	if res.ErrorCode == 0 && res.Error == "" {
		return nil
	}
	return wire.NewPeerError(res.ErrorCode, res.Error, res.ErrorKinds, res.ErrorKindsNamed)
}
