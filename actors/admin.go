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
func (s *Scheduler) ask(ctx context.Context, op string, lane int, request func(call uint64) any, release func()) (any, error) {
	if err := s.refuseStopped(op); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, lanes.Wrap(op, true, errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return nil, lanes.Wrap(op, true, err)
	}
	if lane < 0 || lane >= len(s.lanes) {
		return nil, lanes.Wrap(op, true, fmt.Errorf("%w: %d (there are %d)", ErrUnknownLane, lane, len(s.lanes)))
	}
	c := s.adminFor(s.lanes[lane], &s.stopping)
	if c == nil {
		if release != nil {
			release()
		}
		return nil, lanes.Wrap(op, true, ErrStopped)
	}
	c.release = release
	s.system.Root.Send(s.lanes[lane].pid, request(c.id))
	select {
	case <-c.done:
		return c.result, c.err
	case <-ctx.Done():
		return nil, lanes.Wrap(op, false, ctx.Err())
	}
}

// adminCall sends an administrative request to one lane and waits.
func (s *Scheduler) adminCall(ctx context.Context, lane int, op AdminOp, capacity int) (any, error) {
	return s.ask(ctx, op.String(), lane, func(id uint64) any { return &AdminRequest{Call: id, Op: op, Capacity: capacity} }, nil)
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
	_, err := s.ask(ctx, "prepare staged", lane, func(id uint64) any { return &StagedRequest{Call: id, Prepare: true, Program: st} }, nil)
	return err
}

// Replay runs a staged program, for the tenant that owns its buffers and
// staging, on the lane it was prepared on, with inputs in logical order,
// and returns its outputs (when collect).
func (s *Scheduler) Replay(ctx context.Context, tenant string, lane int, st *lanes.Staged, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
	if err := s.refuseStopped("staged replay"); err != nil {
		return lanes.StagedResult{}, err
	}
	if err := s.checkStaged(tenant, st); err != nil {
		return lanes.StagedResult{}, lanes.Wrap("staged replay", true, err)
	}
	var bytes, largest int64
	for _, in := range inputs {
		bytes += int64(len(in))
		largest = max(largest, int64(len(in)))
	}
	if bytes > s.cfg.MaxBatchBytes {
		return lanes.StagedResult{}, lanes.Wrap("staged replay", true, &BatchTooLargeError{Entries: len(inputs), MaxEntries: s.cfg.MaxBatchEntries, Bytes: bytes, MaxBytes: s.cfg.MaxBatchBytes, Largest: largest})
	}
	if lane < 0 || lane >= len(s.lanes) {
		return lanes.StagedResult{}, lanes.Wrap("staged replay", true, fmt.Errorf("%w: %d (there are %d)", ErrUnknownLane, lane, len(s.lanes)))
	}
	ts, err := s.tenant(tenant)
	if err != nil {
		return lanes.StagedResult{}, lanes.Wrap("staged replay", true, err)
	}
	// A staged replay holds an admission slot of its lane, as a batch does.
	ref := s.lanes[lane]
	if !s.reserve(ts, ref, 0) {
		s.dropIfFresh(ts)
		return lanes.StagedResult{}, lanes.Wrap("staged replay", true, fmt.Errorf("%w: lane %d has %d submissions in flight (limit %d) and tenant %q its share of them; retry later",
			ErrOverloaded, lane, ref.inflight.Load(), s.cfg.MaxInFlightPerLane, tenant))
	}
	ts.staged.Add(1)
	release := func() {
		ref.inflight.Add(-1)
		ts.staged.Add(-1)
	}
	r, err := s.ask(ctx, "staged replay", lane, func(id uint64) any {
		return &StagedRequest{Call: id, Program: st, Inputs: inputs, Collect: collect, tenant: ts.name, weight: ts.weight}
	}, release)
	res, _ := r.(lanes.StagedResult)
	return res, err
}
