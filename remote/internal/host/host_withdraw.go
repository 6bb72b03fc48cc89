// A lane host's withdrawable submissions: those whose front's caller has a
// context that can end run under a context of the host's, which the
// front's Withdraw ends, so that a batch still waiting for its lane is
// withdrawn as it is in one process.

package host

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/internal/wirepb"
)

// watchedCalls are a registration's withdrawable submissions in flight:
// each one's context, by the front's call id. Only withdrawable
// submissions touch it, so a serving loop's steps (whose contexts cannot
// end) take no lock here.
type watchedCalls struct {
	mu    sync.Mutex
	calls map[uint64]*callerContext
}

// callerContext is the context a withdrawable submission runs under on
// the host: it ends when the front's caller's does (Withdraw), and its
// Err is that caller's cause, so that the withdrawal's error says what one
// process's says (context.DeadlineExceeded or context.Canceled). It is a
// cancelable context of the standard library underneath, which the
// scheduler watches without a goroutine of its own.
type callerContext struct {
	context.Context
	cancel   context.CancelFunc
	deadline atomic.Bool
}

// Err is the caller's cause once the context ended, nil before.
func (c *callerContext) Err() error {
	err := c.Context.Err()
	if err != nil && c.deadline.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// end ends the context, for the caller's cause.
func (c *callerContext) end(deadline bool) {
	if deadline {
		c.deadline.Store(true) // before the cancel: whoever sees it done sees why
	}
	c.cancel()
}

// watch is the context a withdrawable submission runs under, kept by its
// call until it ends (forget) or is withdrawn.
func (w *watchedCalls) watch(call uint64) context.Context {
	c := &callerContext{}
	c.Context, c.cancel = context.WithCancel(context.Background())
	w.mu.Lock()
	if w.calls == nil {
		w.calls = map[uint64]*callerContext{}
	}
	w.calls[call] = c
	w.mu.Unlock()
	return c
}

// forget lets a submission's context go: it ended.
func (w *watchedCalls) forget(call uint64) {
	w.mu.Lock()
	c := w.calls[call]
	delete(w.calls, call)
	w.mu.Unlock()
	if c != nil {
		c.cancel() // it ended: canceling changes nothing but frees the context
	}
}

// withdraw ends a submission's context, for the caller's cause: a batch
// still waiting for its lane is withdrawn (it never runs; its receipt says
// so), one on its lane's stream runs on. A call not held (it ended, or
// never was withdrawable) is nothing to withdraw.
func (w *watchedCalls) withdraw(call uint64, deadline bool) {
	w.mu.Lock()
	c := w.calls[call]
	w.mu.Unlock()
	if c != nil {
		c.end(deadline)
	}
}

// drop forgets every submission's context: the registration was dropped
// (its submissions run on and end unanswered).
func (w *watchedCalls) drop() {
	w.mu.Lock()
	w.calls = nil
	w.mu.Unlock()
}

// takeWithdraw takes a Withdraw from the remote: in its tenant's order,
// through the tenant's shard, so that its submission, which came before
// it, was admitted first. (Through a data plane, the reader admits the
// submissions itself, and withdraws at once: fromPlane.)
func (h *Host) takeWithdraw(sender *actor.PID, m *wirepb.Withdraw) {
	r, ok := h.serving(m.Epoch)
	if !ok {
		h.tellDropped(sender, m.Epoch)
		return
	}
	r.heard()
	select {
	case h.shards[shardOf(scoped(m.Epoch, m.Tenant))] <- hostJob{epoch: m.Epoch, call: m.Call, op: m}:
	case <-h.quit:
	}
}

// withdraw withdraws a submission of a registration the host serves.
func (h *Host) withdraw(m *wirepb.Withdraw) {
	if r, ok := h.serving(m.Epoch); ok {
		r.watched.withdraw(m.Call, m.Deadline)
	}
}
