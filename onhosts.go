package lanes

import (
	"context"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/remote"
)

// onHosts is a Server over a front to lane hosts.
type onHosts struct {
	f       *remote.Front
	kernels Kernels
}

func (h *onHosts) Alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error) {
	return h.f.Alloc(ctx, tenant, spec)
}

func (h *onHosts) Upload(ctx context.Context, tenant string, dst Region, data []byte) error {
	return upload(ctx, h.f.Submit, tenant, dst, data)
}

func (h *onHosts) Read(ctx context.Context, tenant string, src Region) ([]byte, error) {
	return h.f.Read(ctx, tenant, src)
}

func (h *onHosts) Free(ctx context.Context, tenant string, b Buffer) error {
	return h.f.Free(ctx, tenant, b)
}

func (h *onHosts) Forget(ctx context.Context, tenant string) error { return h.f.Forget(ctx, tenant) }

func (h *onHosts) Submit(ctx context.Context, tenant string, b Batch) (Receipt, error) {
	return h.f.Submit(ctx, tenant, b)
}

func (h *onHosts) SubmitAsync(ctx context.Context, tenant string, b Batch) (Pending, error) {
	p, err := h.f.SubmitAsync(ctx, tenant, b)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (h *onHosts) Kernels() Kernels { return h.kernels }

func (h *onHosts) Status() Status {
	st := Status{Hosts: h.f.Hosts(), InFlight: h.f.InFlight()}
	st.Total = len(st.Hosts)
	for _, hs := range st.Hosts {
		if hs.Health == remote.HostServing {
			st.Serving++
		}
	}
	return st
}

func (h *onHosts) Stop(ctx context.Context) error { return h.f.Stop(ctx) }

func (h *onHosts) Scheduler() *actors.Scheduler { return nil }

func (h *onHosts) Front() *remote.Front { return h.f }
