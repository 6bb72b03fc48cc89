package lanes

import (
	"context"

	"github.com/lanesched/lanes/cuda"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/remote"
)

// onHosts is the side of a front to lane hosts.
type onHosts struct {
	f  *remote.Front
	ks Kernels
}

func (h *onHosts) alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error) {
	return h.f.Alloc(ctx, tenant, spec)
}

func (h *onHosts) read(ctx context.Context, tenant string, src Region) ([]byte, error) {
	return h.f.Read(ctx, tenant, src)
}

func (h *onHosts) free(ctx context.Context, tenant string, b Buffer) error {
	return h.f.Free(ctx, tenant, b)
}

func (h *onHosts) forget(ctx context.Context, tenant string, _ []Buffer) error {
	return h.f.Forget(ctx, tenant) // the host frees the tenant's buffers
}

// check is asked of a buffer the server did not hand the tenant: on lane
// hosts every buffer a tenant may name is one it allocated through the
// server, so any other is stale (freed, forged, or allocated through
// Front directly).
func (h *onHosts) check(b Buffer) error {
	return cuda.Contractf("check", cuda.ErrStaleHandle, "buffer %d is not one this server allocated (freed, forged, or allocated through Front directly); allocate it with Server.Alloc", b.ID)
}

func (h *onHosts) submit(ctx context.Context, tenant string, b Batch) (Receipt, error) {
	return h.f.Submit(ctx, tenant, b)
}

func (h *onHosts) submitAsync(ctx context.Context, tenant string, b Batch) (Pending, error) {
	p, err := h.f.SubmitAsync(ctx, tenant, b)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// checksBatches: a tenant's host knows its own tenants' buffers, not
// those of its tenants on other hosts.
func (h *onHosts) checksBatches() bool { return true }

func (h *onHosts) kernels() Kernels { return h.ks }

func (h *onHosts) status() Status {
	st := Status{Hosts: h.f.Hosts(), InFlight: h.f.InFlight()}
	st.Total = len(st.Hosts)
	for _, hs := range st.Hosts {
		if hs.Health == remote.HostServing {
			st.Serving++
		}
	}
	return st
}

func (h *onHosts) stop(ctx context.Context) error { return h.f.Stop(ctx) }

func (h *onHosts) scheduler() *actors.Scheduler { return nil }

func (h *onHosts) front() *remote.Front { return h.f }
