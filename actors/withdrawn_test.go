package actors_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"
)

// laterCtx is a context that is live for its first Err call (admission's
// check) and done from the second on (the lane's, as it takes the batch):
// a caller whose deadline passed while its batch waited for its lane.
type laterCtx struct {
	context.Context
	calls atomic.Int32
	done  chan struct{}
}

func (c *laterCtx) Err() error {
	if c.calls.Add(1) == 1 {
		return nil
	}
	return context.DeadlineExceeded
}

func (c *laterCtx) Done() <-chan struct{} { return c.done }

// TestRefusalWithdrawalAndDetachmentHaveTheirOwnCodes: a batch refused at
// admission for a context already done, one admitted and withdrawn before
// its lane took it, and a wait the caller gave up on while the batch went
// on each come back with their own code, and only the first two say the
// batch never ran.
func TestRefusalWithdrawalAndDetachmentHaveTheirOwnCodes(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockVirtual}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: -1, PollMax: 200 * time.Microsecond})

	done, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Submit(done, "t", dev.batch(0, 1))
	if c := cuda.Classify(err); c.Code != codes.Canceled || !c.NotSubmitted || !errors.Is(err, context.Canceled) {
		t.Fatalf("Submit with a canceled context: got %v (%+v), want code canceled, not submitted", err, c)
	}

	later := &laterCtx{Context: context.Background(), done: make(chan struct{})}
	p, err := s.SubmitAsync(later, "t", dev.batch(0, 1))
	if err != nil {
		t.Fatalf("SubmitAsync with a context live at admission: got err %v, want nil", err)
	}
	_, err = p.Result()
	if c := cuda.Classify(err); c.Code != codes.Withdrawn || !c.NotSubmitted || !errors.Is(err, actors.ErrWithdrawn) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a batch whose context ended before its lane took it: got %v (%+v), want code withdrawn, not submitted, errors.Is ErrWithdrawn and context.DeadlineExceeded", err, c)
	}

	ctx := newDeadline()
	submitted := make(chan error, 1)
	before := s.Lanes()[0].Counters.Submissions
	go func() {
		_, err := s.Submit(ctx, "t", dev.batch(0, 1))
		submitted <- err
	}()
	waitSubmitted(t, s, before+1)
	ctx.pass()
	err = <-submitted
	var de *actors.DetachedError
	if c := cuda.Classify(err); c.Code != codes.Detached || c.NotSubmitted || !errors.As(err, &de) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit that stopped waiting: got %v (%+v), want a *DetachedError of code detached, not classified not submitted", err, c)
	}
	dev.Clock().Advance(time.Second)
	if _, err := de.Pending.Result(); err != nil {
		t.Fatalf("the detached submission's own end: got err %v, want nil (it ran)", err)
	}
}
