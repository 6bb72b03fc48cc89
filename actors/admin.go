package actors

import (
	"context"
	"fmt"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// ask sends one lane the request made for a registered administrative
// call and waits for the lane's answer. After Stop began it answers
// ErrStopped at once. The lane answers within its hang timeout: a wait on
// its stream that outlives it abandons the stream.
func (s *Scheduler) ask(ctx context.Context, op string, lane int, request func(call uint64) any) (any, error) {
	if err := s.checkAsk(ctx, op, lane); err != nil {
		return nil, err
	}
	c := s.adminFor(s.lanes[lane], &s.stopping)
	if c == nil {
		return nil, lanes.Wrap(op, true, ErrStopped)
	}
	s.system.Root.Send(s.lanes[lane].pid, request(c.id))
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
		return nil, lanes.Wrap(op, false, ctx.Err())
	}
}

// checkAsk refuses a call to a lane before anything is sent: the scheduler
// stopping, a nil or ended context, an unknown lane.
func (s *Scheduler) checkAsk(ctx context.Context, op string, lane int) error {
	if err := s.refuseStopped(op); err != nil {
		return err
	}
	if ctx == nil {
		return lanes.Wrap(op, true, errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return lanes.Wrap(op, true, err)
	}
	if lane < 0 || lane >= len(s.lanes) {
		return lanes.Wrap(op, true, fmt.Errorf("%w: %d (there are %d)", ErrUnknownLane, lane, len(s.lanes)))
	}
	return nil
}

// adminCall sends an administrative request to one lane and waits.
func (s *Scheduler) adminCall(ctx context.Context, lane int, op AdminOp, capacity int) (any, error) {
	return s.ask(ctx, op.String(), lane, func(id uint64) any { return &AdminRequest{Call: id, Op: op, Capacity: capacity} })
}

// Configure opens a lane's preparation with a capacity.
func (s *Scheduler) Configure(ctx context.Context, lane, capacity int) (cache.Preparation, error) {
	r, err := s.adminCall(ctx, lane, OpConfigure, capacity)
	p, _ := r.(cache.Preparation)
	return p, err
}

// Seal closes a lane's preparation.
func (s *Scheduler) Seal(ctx context.Context, lane int) (cache.Preparation, error) {
	r, err := s.adminCall(ctx, lane, OpSeal, 0)
	p, _ := r.(cache.Preparation)
	return p, err
}

// Trim releases a lane's executables and programs.
func (s *Scheduler) Trim(ctx context.Context, lane int) (cache.TrimReport, error) {
	r, err := s.adminCall(ctx, lane, OpTrim, 0)
	t, _ := r.(cache.TrimReport)
	return t, err
}

// Catalog returns a lane's sealed program catalog.
func (s *Scheduler) Catalog(ctx context.Context, lane int) ([]programs.Descriptor, error) {
	r, err := s.adminCall(ctx, lane, OpCatalog, 0)
	c, _ := r.([]programs.Descriptor)
	return c, err
}

// Synchronize waits for a lane's stream to drain, within the lane's hang
// timeout: a kernel that never finishes abandons the stream and answers
// ErrHung.
func (s *Scheduler) Synchronize(ctx context.Context, lane int) error {
	_, err := s.adminCall(ctx, lane, OpSynchronize, 0)
	return err
}

// PrepareStaged captures a staged program's two variants on one lane (its
// preparation must be open), for the tenant that owns its buffers and
// staging.
func (s *Scheduler) PrepareStaged(ctx context.Context, tenant string, lane int, st *lanes.Staged) error {
	if err := s.refuseStopped("prepare staged"); err != nil {
		return err
	}
	if err := s.checkStaged(tenant, st); err != nil {
		return lanes.Wrap("prepare staged", true, err)
	}
	_, err := s.ask(ctx, "prepare staged", lane, func(id uint64) any { return &StagedRequest{Call: id, Prepare: true, Program: st} })
	return err
}
