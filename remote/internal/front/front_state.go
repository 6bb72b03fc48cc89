// A tenant's device state through the front: allocations, frees,
// read-backs and forgetting, each one call to the tenant's host.

package front

import (
	"context"
	"fmt"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/wirepb"

	wire "github.com/lanesched/lanes/remote/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Forget drops a tenant: on its host (its buffers freed) if the host still
// holds its state, and its placement here, so its next call places it
// afresh. After a lost host this is how a tenant starts over. While the
// tenant has submissions in flight (through this front, or through
// another front on its host) it is refused, actors.ErrTenantBusy
// (retryable), and frees nothing.
func (f *Front) Forget(ctx context.Context, tenant string) error {
	if err := f.admit(ctx, tenant); err != nil {
		return err
	}
	f.mu.Lock()
	pl, ok := f.tenants[tenant]
	if ok && pl.calls.Load() > 0 && pl.link.servingUnder(pl.epoch) {
		n := pl.calls.Load()
		f.mu.Unlock()
		return laneerr.Wrap("forget", true, fmt.Errorf("%w: tenant %q has %d submissions in flight through this front; wait for them to end", actors.ErrTenantBusy, tenant, n))
	}
	if ok {
		delete(f.tenants, tenant)
		if len(f.last) < maxRemembered {
			f.last[tenant] = pl.link
		}
		pl.link.mu.Lock()
		if pl.link.Epoch == pl.epoch {
			pl.link.tenants-- // counted under this registration (a new one counts afresh)
		}
		pl.link.mu.Unlock()
	}
	f.mu.Unlock()
	if !ok {
		return nil
	}
	if !pl.link.servingUnder(pl.epoch) {
		return nil // its state went with the host
	}
	_, err := f.op(ctx, pl.link, pl.epoch, tenant, 0, func(call uint64) proto.Message {
		return &wirepb.Forget{Epoch: pl.epoch, Call: call, Tenant: tenant}
	})
	return err
}

// Alloc allocates device memory for the tenant on its host (placing a new
// tenant), owned by the tenant there.
func (f *Front) Alloc(ctx context.Context, tenant string, spec cuda.BufferSpec) (cuda.Buffer, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return cuda.Buffer{}, err
	}
	pl, err := f.place(tenant)
	if err != nil {
		return cuda.Buffer{}, err
	}
	l, epoch := pl.link, pl.epoch
	if err := refuseLeaving(tenant, l, epoch); err != nil {
		return cuda.Buffer{}, err
	}
	res, err := f.op(ctx, l, epoch, tenant, 0, func(call uint64) proto.Message {
		return &wirepb.Alloc{Epoch: epoch, Call: call, Tenant: tenant, Size: spec.Size, Align: spec.Align, Elem: uint32(spec.Elem)}
	})
	if err != nil {
		return cuda.Buffer{}, err
	}
	return wire.BufferFromWire(res.Buffer)
}

// Free frees a buffer the tenant allocated through Alloc.
func (f *Front) Free(ctx context.Context, tenant string, b cuda.Buffer) error {
	if err := f.admit(ctx, tenant); err != nil {
		return err
	}
	pl, err := f.place(tenant)
	if err != nil {
		return err
	}
	l, epoch := pl.link, pl.epoch
	_, err = f.op(ctx, l, epoch, tenant, 0, func(call uint64) proto.Message {
		return &wirepb.Free{Epoch: epoch, Call: call, Tenant: tenant, Buffer: wire.BufferToWire(b)}
	})
	return err
}

// Read copies a region of the tenant's buffer back, after the tenant's
// submissions the host received before it.
func (f *Front) Read(ctx context.Context, tenant string, r cuda.Region) ([]byte, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	if r.Length == 0 || r.Length > wire.MaxReadBytes {
		return nil, wire.WireErr("a read of %d bytes: read 1 to %d at a time", r.Length, uint64(wire.MaxReadBytes))
	}
	pl, err := f.place(tenant)
	if err != nil {
		return nil, err
	}
	l, epoch := pl.link, pl.epoch
	res, err := f.op(ctx, l, epoch, tenant, int64(r.Length), func(call uint64) proto.Message {
		return &wirepb.Read{Epoch: epoch, Call: call, Tenant: tenant, Region: wire.RegionToWire(r)}
	})
	if err != nil {
		return nil, err
	}
	return res.Data, nil
}

// op sends one device-state operation to the tenant's host and waits for
// its result (or the host's loss, or ctx).
func (f *Front) op(ctx context.Context, l *Link, epoch uint64, tenant string, bytes int64, msg func(call uint64) proto.Message) (*wirepb.OpResult, error) {
	return f.opWith(ctx, l, epoch, tenant, bytes, nil, msg)
}

// opWith is op with set, which fills in the call before it is recorded
// (see newCall).
func (f *Front) opWith(ctx context.Context, l *Link, epoch uint64, tenant string, bytes int64, set func(*Pending), msg func(call uint64) proto.Message) (*wirepb.OpResult, error) {
	p, id, err := f.newCall(ctx, l, epoch, tenant, bytes, bytes > 0, set) // an op's bytes are a read's
	if err != nil {
		return nil, err
	}
	l.out.Add(frontOut{op: msg(id), epoch: epoch}) // after the submissions queued before it
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	return p.result, p.err // a failed op's answer too (a preparation may come with its error)
}
