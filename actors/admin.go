// Administrative calls to one lane (configure, seal, preparation, trim,
// catalog, synchronize, prepare staged), each a typed ask of the lane actor.

package actors

import (
	"context"
	"fmt"

	"github.com/lanesched/lanes/cache"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// ask sends one lane the request made for a registered administrative
// call and waits for the lane's answer, typed: T is what the operation
// answers (struct{} for none). After Stop began it answers ErrStopped at
// once. The lane answers within its hang timeout: a wait on its stream
// that outlives it abandons the stream.
func ask[T any](ctx context.Context, s *Scheduler, op string, lane int, request func(call uint64) any) (T, error) {
	var zero T
	if err := s.checkAsk(ctx, op, lane); err != nil {
		return zero, err
	}
	c := s.adminFor(s.lanes[lane], &s.stopping)
	if c == nil {
		return zero, laneerr.Wrap(op, true, ErrStopped)
	}
	s.system.Root.Send(s.lanes[lane].pid, request(c.id))
	select {
	case <-c.done:
	case <-ctx.Done():
		return zero, laneerr.Wrap(op, false, ctx.Err())
	}
	return reply[T](c, op)
}

// reply is an ended administrative call's typed answer: its result (which
// may come with an error, as a preparation's snapshot does) and its error.
func reply[T any](c *call, op string) (T, error) {
	r, ok := c.result.(T)
	if !ok && c.result != nil { // a lane answered an operation with another's reply: a bug here, said as one
		return r, fmt.Errorf("actors: %s answered %T, want %T", op, c.result, r)
	}
	return r, c.err
}

// checkAsk refuses a call to a lane before anything is sent: the scheduler
// stopping, a nil or ended context, an unknown lane.
func (s *Scheduler) checkAsk(ctx context.Context, op string, lane int) error {
	if err := s.refuseStopped(op); err != nil {
		return err
	}
	if ctx == nil {
		return laneerr.Wrap(op, true, errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return laneerr.Wrap(op, true, err)
	}
	if lane < 0 || lane >= len(s.lanes) {
		return laneerr.Wrap(op, true, fmt.Errorf("%w: %d (there are %d)", ErrUnknownLane, lane, len(s.lanes)))
	}
	return nil
}

// adminCall sends an administrative operation to one lane and waits for
// its typed reply.
func adminCall[T any](ctx context.Context, s *Scheduler, lane int, op adminOp, capacity int) (T, error) {
	return ask[T](ctx, s, op.String(), lane, func(id uint64) any { return &adminRequest{Call: id, Op: op, Capacity: capacity} })
}

// Configure opens a lane's preparation with a capacity.
//
// Configure, Seal, Trim and Catalog need a quiescent lane (nothing in
// flight, nothing quarantined): a lane with work in flight answers
// lanes.ErrNotQuiescent, retryable; call them while the lane's tenants are
// idle (a lane runs what it received before the call first, so a busy
// lane seldom is). Every administrative call answers an unknown lane with
// ErrUnknownLane, a nil context with ErrInvalidArgument and a done one with
// its error, not submitted; if ctx ends while the lane works on the call,
// it returns ctx's error, not marked not submitted: the operation may
// still happen on the lane.
func (s *Scheduler) Configure(ctx context.Context, lane, capacity int) (cache.Preparation, error) {
	if s.unstarted() {
		return cache.Preparation{}, errUnstarted
	}
	return adminCall[cache.Preparation](ctx, s, lane, opConfigure, capacity)
}

// Seal closes a lane's preparation.
func (s *Scheduler) Seal(ctx context.Context, lane int) (cache.Preparation, error) {
	if s.unstarted() {
		return cache.Preparation{}, errUnstarted
	}
	return adminCall[cache.Preparation](ctx, s, lane, opSeal, 0)
}

// Preparation reports a lane's preparation: whether it is open (misses are
// captured), sealed (misses run eagerly) or unconfigured, its capacity, and
// how many executables and cached rejections it holds. With work in flight
// the snapshot comes back all the same, with lanes.ErrNotQuiescent: its
// counts may move before the lane is quiescent.
func (s *Scheduler) Preparation(ctx context.Context, lane int) (cache.Preparation, error) {
	if s.unstarted() {
		return cache.Preparation{}, errUnstarted
	}
	return adminCall[cache.Preparation](ctx, s, lane, opPreparation, 0)
}

// Trim releases a lane's executables and programs.
func (s *Scheduler) Trim(ctx context.Context, lane int) (cache.TrimReport, error) {
	if s.unstarted() {
		return cache.TrimReport{}, errUnstarted
	}
	return adminCall[cache.TrimReport](ctx, s, lane, opTrim, 0)
}

// Catalog returns a lane's sealed program catalog.
func (s *Scheduler) Catalog(ctx context.Context, lane int) ([]programs.Descriptor, error) {
	if s.unstarted() {
		return nil, errUnstarted
	}
	return adminCall[[]programs.Descriptor](ctx, s, lane, opCatalog, 0)
}

// Synchronize waits for a lane's stream to drain, within the lane's hang
// timeout: a kernel that never finishes abandons the stream and answers
// ErrHung.
func (s *Scheduler) Synchronize(ctx context.Context, lane int) error {
	if s.unstarted() {
		return errUnstarted
	}
	_, err := adminCall[struct{}](ctx, s, lane, opSynchronize, 0)
	return err
}

// PrepareStaged builds the staged program spec declares and captures its
// two variants on one lane (its preparation must be open), for the tenant
// that owns its buffers and staging; the program replays there
// (Replay, ReplayInto, Repeat). A spec whose slots or maps do not fit is
// refused with lanes.ErrIndexMap or lanes.ErrStagedInput. A program whose input slots alone move more than
// MaxBatchBytes could never be replayed: it is refused with a
// *BatchTooLargeError (one whose outputs push a collecting replay past
// the limit is prepared; those replays are refused).
func (s *Scheduler) PrepareStaged(ctx context.Context, tenant string, lane int, spec lanes.StagedSpec) (*StagedProgram, error) {
	if s.unstarted() {
		return nil, errUnstarted
	}
	if err := s.refuseStopped("prepare staged"); err != nil {
		return nil, err
	}
	st, err := lanecore.NewStaged(spec.Inputs, spec.InputMap, spec.Outputs, spec.OutputMap, spec.Compute)
	if err != nil {
		return nil, laneerr.Wrap("prepare staged", true, err)
	}
	if err := s.checkStaged(tenant, st); err != nil {
		return nil, laneerr.Wrap("prepare staged", true, err)
	}
	if in, _ := st.Bytes(); int64(in) > s.cfg.MaxBatchBytes {
		return nil, laneerr.Wrap("prepare staged", true, &BatchTooLargeError{Bytes: int64(in), MaxBytes: s.cfg.MaxBatchBytes, Staged: true})
	}
	if _, err := ask[struct{}](ctx, s, "prepare staged", lane, func(id uint64) any { return &stagedRequest{Call: id, Prepare: true, Program: st} }); err != nil {
		return nil, err
	}
	return &StagedProgram{st: st, lane: lane, sched: s}, nil
}
