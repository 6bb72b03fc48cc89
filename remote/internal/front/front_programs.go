// A tenant's programs through the front: sealing the preparation of the
// lane its batches run on, and reading that preparation and its sealed
// catalog, each one call to the tenant's host.

package front

import (
	"context"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/programs"
	wire "github.com/lanesched/lanes/remote/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Seal closes the preparation of the lane the tenant's batches run on, on
// its host, as actors.Scheduler.Seal does in one process: from then on
// its resident segments replay, its misses run eagerly, and its catalog
// is readable (Catalog), so that batches may invoke the programs
// registered there (lanes.Entry.Invoke). It acts on the lane for every
// tenant it serves, of every front. It runs after the tenant's
// submissions that reached the host before it, and needs the lane
// quiescent (lanes.ErrNotQuiescent, retryable, while any tenant's work is
// in flight there); a tenant that has submitted nothing yet has no lane
// (actors.ErrUnknownLane); a lane sealed already answers
// cache.ErrNotOpen. Errors are as Alloc's.
func (f *Front) Seal(ctx context.Context, tenant string) (cache.Preparation, error) {
	res, err := f.laneOp(ctx, tenant, wire.LaneSeal)
	if err != nil {
		return preparationOf(res), err
	}
	return wire.PreparationFromWire(res.Preparation)
}

// Preparation reports the preparation of the lane the tenant's batches run
// on, as actors.Scheduler.Preparation does.
func (f *Front) Preparation(ctx context.Context, tenant string) (cache.Preparation, error) {
	res, err := f.laneOp(ctx, tenant, wire.LanePreparation)
	if err != nil {
		return preparationOf(res), err
	}
	return wire.PreparationFromWire(res.Preparation)
}

// Catalog returns the sealed catalog of the lane the tenant's batches run
// on, as actors.Scheduler.Catalog does, but holding only the programs of
// this front's tenants (a host keeps each front's program names apart, as
// it keeps its tenants), named as they were declared: an invocation
// (programs.Invocation) names a program and one of its segments from here.
func (f *Front) Catalog(ctx context.Context, tenant string) ([]programs.Descriptor, error) {
	res, err := f.laneOp(ctx, tenant, wire.LaneCatalog)
	if err != nil {
		return nil, err
	}
	return wire.CatalogFromWire(res.Programs)
}

// laneOp makes one administrative call on the tenant's lane.
func (f *Front) laneOp(ctx context.Context, tenant string, op uint32) (*wirepb.OpResult, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	pl, err := f.place(tenant)
	if err != nil {
		return nil, err
	}
	l, epoch := pl.link, pl.epoch
	return f.op(ctx, l, epoch, tenant, 0, func(call uint64) proto.Message {
		return &wirepb.LaneAdmin{Epoch: epoch, Call: call, Tenant: tenant, Op: op}
	})
}

// preparationOf is the preparation a failed call's answer carries (a
// Preparation answered with lanes.ErrNotQuiescent carries its snapshot),
// or the zero one.
func preparationOf(res *wirepb.OpResult) cache.Preparation {
	if res == nil || res.Preparation == nil {
		return cache.Preparation{}
	}
	p, _ := wire.PreparationFromWire(res.Preparation)
	return p
}
