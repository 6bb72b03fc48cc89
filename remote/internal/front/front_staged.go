// A tenant's staged programs through the front: declared by their device
// regions and compute, prepared on the tenant's host with pinned staging
// the host makes, replayed with Go slices, released.

package front

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	wire "github.com/lanesched/lanes/remote/internal/wire"
	"google.golang.org/protobuf/proto"
)

// StagedSpec is remote.StagedSpec as this package makes it: see there for
// what each field means.
type StagedSpec struct {
	Inputs    []cuda.Region
	InputMap  []int
	Outputs   []cuda.Region
	OutputMap []int
	Compute   []lanes.Entry
}

// StagedProgram is a staged program prepared on a tenant's host
// (Front.PrepareStaged): it replays there, on the lane it was prepared
// on, until it is released, its tenant forgotten, or its host lost (then
// prepare it again).
type StagedProgram struct {
	tenant, host string
	epoch, id    uint64
	in, out      uint64
	outSizes     []uint64 // each output's bytes, in logical order
}

// of refuses a program that is not one PrepareStaged returned for tenant.
func (p *StagedProgram) of(tenant string) error {
	switch {
	case p == nil || p.id == 0:
		return fmt.Errorf("%w: not a staged program Front.PrepareStaged returned", lanes.ErrStagedInput)
	case p.tenant != tenant:
		return fmt.Errorf("%w: the staged program was prepared for tenant %q; a tenant uses only its own", actors.ErrNotYours, p.tenant)
	}
	return nil
}

// Bytes is what one replay moves: its input slots' bytes and its output
// slots' (read back when collected), as lanecore.Staged.Bytes.
func (p *StagedProgram) Bytes() (in, out uint64) { return p.in, p.out }

// PrepareStaged prepares a staged program for the tenant on its host, as
// actors.Scheduler.PrepareStaged does in one process, on the lane the
// tenant's batches run on (for a tenant that ran nothing yet, the lane of
// its buffers' device that holds the fewest staged programs; a lane whose
// preparation is open before one sealed): the host makes pinned staging
// for each slot,
// owned by the tenant, and captures the program's two variants there (the
// lane's preparation must be open). Slots are 1 byte to MaxHostBytes
// each, at most MaxStagedSlots in all; a host keeps MaxStagedPerTenant
// programs of a tenant (actors.ErrProgramLimit past it). The spec's
// mistakes are refused as actors.Scheduler.PrepareStaged refuses them.
func (f *Front) PrepareStaged(ctx context.Context, tenant string, spec StagedSpec) (*StagedProgram, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	if len(spec.Inputs)+len(spec.Outputs) > wire.MaxStagedSlots {
		return nil, wire.WireErr("%d slots; a staged program through a front has at most %d", len(spec.Inputs)+len(spec.Outputs), wire.MaxStagedSlots)
	}
	compute, err := wire.BatchToWire(lanes.Batch{Entries: spec.Compute})
	if err != nil {
		return nil, fmt.Errorf("the staged program's compute: %w", err)
	}
	pl, err := f.place(tenant)
	if err != nil {
		return nil, err
	}
	l, epoch := pl.link, pl.epoch
	if err := refuseLeaving(tenant, l, epoch); err != nil {
		return nil, err
	}
	m := &wirepb.StagedPrepare{Epoch: epoch, Tenant: tenant, Compute: compute.Entries, InputMap: wire.NodesToWire(spec.InputMap), OutputMap: wire.NodesToWire(spec.OutputMap)}
	for _, r := range spec.Inputs {
		m.Inputs = append(m.Inputs, wire.RegionToWire(r))
	}
	for _, r := range spec.Outputs {
		m.Outputs = append(m.Outputs, wire.RegionToWire(r))
	}
	res, err := f.op(ctx, l, epoch, tenant, 0, func(call uint64) proto.Message {
		m.Call = call
		return m
	})
	if err != nil {
		return nil, err
	}
	// The host made the program as the spec says (lanecore.NewStaged checked
	// that its output map orders the slots): each logical output is as
	// long as its slot's region.
	sizes := make([]uint64, len(spec.Outputs))
	for slot, r := range spec.Outputs {
		if slot < len(spec.OutputMap) && spec.OutputMap[slot] >= 0 && spec.OutputMap[slot] < len(sizes) {
			sizes[spec.OutputMap[slot]] = r.Length
		}
	}
	return &StagedProgram{tenant: tenant, host: l.Name, epoch: epoch, id: res.Staged, in: res.StagedInBytes, out: res.StagedOutBytes, outSizes: sizes}, nil
}

// OutputSizes is each output's bytes, in logical order, as
// lanecore.Staged.OutputSizes: what ReplayInto and Repeat fill.
func (p *StagedProgram) OutputSizes() []uint64 { return slices.Clone(p.outSizes) }

// MakeOutputs allocates one buffer per output, in logical order and each
// of its length, as lanecore.Staged.MakeOutputs: buffers for ReplayInto and
// Repeat to fill, reused from one replay to the next.
func (p *StagedProgram) MakeOutputs() [][]byte {
	out := make([][]byte, len(p.outSizes))
	for i, n := range p.outSizes {
		out[i] = make([]byte, n)
	}
	return out
}

// ReleaseStaged frees a staged program the tenant prepared, and its
// staging on the host; one with replays in flight is refused
// (actors.ErrTenantBusy, retryable). A program whose host was lost is
// gone already: releasing it is nil.
func (f *Front) ReleaseStaged(ctx context.Context, tenant string, p *StagedProgram) error {
	if err := f.admit(ctx, tenant); err != nil {
		return err
	}
	if err := p.of(tenant); err != nil {
		return err
	}
	pl, err := f.place(tenant)
	var lost *wire.DeviceStateLostError
	if errors.As(err, &lost) && lost.Epoch == p.epoch && lost.Host == p.host {
		return nil // gone with its host
	}
	if err != nil {
		return err
	}
	l, epoch := pl.link, pl.epoch
	if l.Name != p.host || epoch != p.epoch {
		return nil
	}
	_, err = f.op(ctx, l, epoch, tenant, 0, func(call uint64) proto.Message {
		return &wirepb.StagedRelease{Epoch: epoch, Call: call, Tenant: tenant, Staged: p.id}
	})
	return err
}
