// Staged replays through the scheduler. A staged replay runs on the lane
// its caller names and waits there for its fence, so it is held to the
// same shares as a batch: it takes an admission slot of its lane (counted
// against the tenant's fair share of that lane), the bytes it moves count
// against MaxBatchBytes, it waits its turn in the lane's fair queue, and a
// replay whose caller gave up before the lane took it never runs.

package actors

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// Staged request states: waiting in the lane, running, or given up by its
// caller before the lane took it.
const (
	stagedWaiting int32 = iota
	stagedRunning
	stagedCanceled
)

// StagedProgram is a staged program prepared on one lane
// (PrepareStaged): it replays there, through the scheduler that prepared
// it, for a tenant that owns its buffers and staging, until the lane is
// rebuilt after a hang (then prepare it again; a lane that recovers from
// a failed stream keeps its programs). Its methods are safe on a nil
// program, which replays nothing.
type StagedProgram struct {
	st    *lanecore.Staged
	lane  int
	sched *Scheduler
}

// Lane is the lane the program was prepared on, where it replays.
func (p *StagedProgram) Lane() int {
	if p == nil || p.st == nil {
		return -1
	}
	return p.lane
}

// Bytes are the bytes one replay moves through the program's input and
// output slots.
func (p *StagedProgram) Bytes() (in, out uint64) {
	if p == nil || p.st == nil {
		return 0, 0
	}
	return p.st.Bytes()
}

// OutputSizes are the outputs' lengths, in logical order.
func (p *StagedProgram) OutputSizes() []uint64 {
	if p == nil || p.st == nil {
		return nil
	}
	return p.st.OutputSizes()
}

// MakeOutputs allocates one buffer per output, each exactly its length,
// for ReplayInto.
func (p *StagedProgram) MakeOutputs() [][]byte {
	if p == nil || p.st == nil {
		return nil
	}
	return p.st.MakeOutputs()
}

// ForgetOutputs drops the program's output cache and its record of the
// inputs on the device: the next replay stages its inputs and runs the
// full graph even when they are the same. Call it when something other
// than Replay's inputs changed what the program computes (device memory
// it reads, its weights say, written by other work), or identical inputs
// return the old outputs without a launch. It is safe to call from any
// goroutine, also while the program replays (it applies from the next
// replay).
func (p *StagedProgram) ForgetOutputs() {
	if p != nil && p.st != nil {
		p.st.ForgetOutputs()
	}
}

// program is the lane's staged program and its lane; a nil program, or
// one another scheduler prepared, is refused.
func (p *StagedProgram) program(s *Scheduler) (*lanecore.Staged, int, error) {
	if p == nil || p.st == nil {
		return nil, 0, fmt.Errorf("%w: nil staged program: prepare one (PrepareStaged)", lanes.ErrStagedInput)
	}
	if p.sched != s {
		return nil, 0, fmt.Errorf("%w: the staged program was prepared by another scheduler, which alone replays it: replay it there, or prepare its spec on this one", lanes.ErrStagedInput)
	}
	return p.st, p.lane, nil
}

// Replay runs a staged program, for the tenant that owns its buffers and
// staging, on the lane it was prepared on, with inputs in logical order,
// and returns its outputs (when collect). It answers ErrOverloaded when
// the lane is full and the tenant holds its share of it, ErrLaneUnavailable
// while the lane is out of routing, and a *BatchTooLargeError when one
// replay would move more than MaxBatchBytes (its input slots, and its
// output slots when collected). When ctx ends before the lane takes the
// replay, it never runs (not submitted); once it runs, Replay waits for it
// (within the hang timeout), so the lane never reads inputs its caller
// has taken back.
func (s *Scheduler) Replay(ctx context.Context, tenant string, p *StagedProgram, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
	if s.unstarted() {
		return lanes.StagedResult{}, errUnstarted
	}
	return s.replay(ctx, &stagedRequest{Inputs: inputs, Collect: collect}, tenant, p)
}

// ReplayInto is Replay with the outputs copied into the caller's buffers
// (one per output, each exactly its length: StagedProgram.MakeOutputs
// allocates them). The lane writes them only while
// ReplayInto waits, so they are the caller's again when it returns.
func (s *Scheduler) ReplayInto(ctx context.Context, tenant string, p *StagedProgram, inputs, outputs [][]byte) (lanes.StagedResult, error) {
	if s.unstarted() {
		return lanes.StagedResult{}, errUnstarted
	}
	return s.replay(ctx, &stagedRequest{Inputs: inputs, Outputs: outputs, Into: true, Collect: true}, tenant, p)
}

// Repeat runs a staged program again on the inputs of its last replay
// (exact without comparing them; with the outputs cached, a hit costs one
// copy into outputs), held to the same shares as
// Replay. With nil outputs it collects nothing.
func (s *Scheduler) Repeat(ctx context.Context, tenant string, p *StagedProgram, outputs [][]byte) (lanes.StagedResult, error) {
	if s.unstarted() {
		return lanes.StagedResult{}, errUnstarted
	}
	return s.replay(ctx, &stagedRequest{Outputs: outputs, Into: outputs != nil, Collect: outputs != nil, Repeat: true}, tenant, p)
}

// replay is Replay, ReplayInto and Repeat: m says which, and what with.
func (s *Scheduler) replay(ctx context.Context, m *stagedRequest, tenant string, p *StagedProgram) (lanes.StagedResult, error) {
	op, collect := "staged replay", m.Collect
	if m.Repeat {
		op = "staged repeat"
	}
	st, lane, err := p.program(s)
	if err != nil {
		return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
	}
	m.Program = st
	if err := s.checkAsk(ctx, op, lane); err != nil {
		return lanes.StagedResult{}, err
	}
	if err := s.checkStaged(tenant, st); err != nil {
		return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
	}
	if m.Into {
		if err := st.CheckOutputs(m.Outputs); err != nil {
			return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
		}
	}
	in, out := st.Bytes()
	moved := int64(in)
	if collect {
		moved += int64(out)
	}
	if moved > s.cfg.MaxBatchBytes {
		return lanes.StagedResult{}, laneerr.Wrap(op, true, &BatchTooLargeError{Bytes: moved, MaxBytes: s.cfg.MaxBatchBytes, Staged: true})
	}
	ts, err := s.tenant(tenant)
	if err != nil {
		return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
	}
	ref := s.lanes[lane]
	release, err := s.admitStaged(ts, ref)
	if err != nil {
		s.dropIfFresh(ts)
		return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
	}
	c := s.adminFor(ref, &s.stopping)
	if c == nil {
		release()
		return lanes.StagedResult{}, laneerr.Wrap(op, true, ErrStopped)
	}
	c.release = release
	m.Call, m.tenant, m.weight, m.ctx, m.state = c.id, ts.name, ts.weight, ctx, new(atomic.Int32)
	s.system.Root.Send(ref.pid, m)
	select {
	case <-c.done:
	case <-ctx.Done():
		if m.state.CompareAndSwap(stagedWaiting, stagedCanceled) {
			// It will never run; the lane ends the call, not submitted,
			// when it comes to it, and frees its slot then (so a caller
			// that keeps giving up cannot grow the lane's queue).
			return lanes.StagedResult{}, laneerr.Wrap(op, true, ctx.Err())
		}
		<-c.done // running: it ends within the hang timeout
	}
	res, err := reply[lanes.StagedResult](c, op)
	if res.Receipt.Outcome != 0 {
		res.Receipt.Tenant = tenant // as a batch's receipt names its tenant
	}
	return res, err
}

// admitStaged counts a staged replay against its lane's admission and the
// tenant's share of the lane (see reserve), and returns how to undo it.
func (s *Scheduler) admitStaged(ts *tenantState, ref *laneRef) (release func(), err error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if !eligible(ref, 0) {
		return nil, fmt.Errorf("%w: lane %d is %v; retry once it serves again (LaneStatus.Health), or prepare the program on another lane", ErrLaneUnavailable, ref.id, ref.State())
	}
	mine := int64(ts.stagedOn[ref])
	if ts.lane == ref {
		mine += ts.active.Load()
	}
	weight := int64(ts.weight)
	share := func() int64 {
		total := ref.activeWeight.Load() + ref.stagedWeight.Load()
		if mine == 0 {
			total += weight
		}
		return s.fairShare(ts.weight, total)
	}
	if n, ok := s.claimSlot(ref, mine, share); !ok {
		return nil, fmt.Errorf("%w: lane %d has %d submissions in flight (limit %d), and tenant %q %d of them, its fair share being %d; retry later",
			ErrOverloaded, ref.id, n, s.cfg.MaxInFlightPerLane, ts.name, mine, share())
	}
	if ts.stagedOn == nil {
		ts.stagedOn = map[*laneRef]int{}
	}
	if ts.stagedOn[ref]++; ts.stagedOn[ref] == 1 {
		ref.stagedWeight.Add(weight)
	}
	ts.staged.Add(1)
	ts.lastActive.Store(time.Now().UnixNano())
	return func() {
		ts.mu.Lock()
		if ts.stagedOn[ref]--; ts.stagedOn[ref] <= 0 {
			delete(ts.stagedOn, ref)
			ref.stagedWeight.Add(-weight)
		}
		ts.mu.Unlock()
		ts.staged.Add(-1)
		ref.inflight.Add(-1)
	}, nil
}

// take claims a queued staged replay for running; false when its caller
// gave up first (it then ends not submitted, with the caller's reason).
func (m *stagedRequest) take() bool {
	return m.state == nil || m.state.CompareAndSwap(stagedWaiting, stagedRunning)
}

// abandoned is the error of a staged replay its caller gave up on.
func (m *stagedRequest) abandoned() error {
	err := context.Canceled
	if m.ctx != nil && m.ctx.Err() != nil {
		err = m.ctx.Err()
	}
	return laneerr.Wrap("staged replay", true, withdrawn(err))
}
