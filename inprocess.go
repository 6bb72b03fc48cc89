package lanes

import (
	"context"
	"fmt"
	"sync"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// inProcess is a Server over an in-process scheduler: it allocates a
// tenant's buffers on one device (the one its lane is on, else the device
// with the fewest tenants), owned by the tenant, and remembers them so
// that Forget frees them, as a lane host does.
type inProcess struct {
	s    *actors.Scheduler
	devs []cuda.Device

	mu      sync.Mutex
	placed  map[string]int                  // tenant -> index in devs
	tenants []int                           // tenants placed on each device
	bufs    map[string]map[cuda.Buffer]bool // each tenant's buffers
}

func newInProcess(s *actors.Scheduler, devs []cuda.Device) *inProcess {
	return &inProcess{s: s, devs: devs, placed: map[string]int{}, tenants: make([]int, len(devs)), bufs: map[string]map[cuda.Buffer]bool{}}
}

// place is the device the tenant's buffers go on (mu held).
func (p *inProcess) place(tenant string) int {
	if i, ok := p.placed[tenant]; ok {
		return i
	}
	best := 0
	if lane, ok := p.s.TenantLane(tenant); ok {
		for _, st := range p.s.Lanes() {
			if st.ID == lane {
				best = st.Device
			}
		}
	} else {
		for i, n := range p.tenants {
			if n < p.tenants[best] {
				best = i
			}
		}
	}
	p.placed[tenant] = best
	p.tenants[best]++
	return best
}

func (p *inProcess) Alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error) {
	if err := p.check(ctx, tenant); err != nil {
		return Buffer{}, err
	}
	p.mu.Lock()
	dev := p.devs[p.place(tenant)]
	p.mu.Unlock()
	var b cuda.Buffer
	if err := cuda.Bound(dev, func() (err error) {
		b, err = dev.Alloc(spec)
		return err
	}); err != nil {
		p.unplaceIfEmpty(tenant)
		return Buffer{}, err
	}
	if err := p.s.Own(tenant, b); err != nil {
		_ = cuda.Bound(dev, func() error { return dev.Free(b) })
		p.unplaceIfEmpty(tenant)
		return Buffer{}, err
	}
	p.mu.Lock()
	if p.bufs[tenant] == nil {
		p.bufs[tenant] = map[cuda.Buffer]bool{}
	}
	p.bufs[tenant][b] = true
	p.mu.Unlock()
	return b, nil
}

// unplaceIfEmpty forgets the placement of a tenant with no buffers.
func (p *inProcess) unplaceIfEmpty(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.placed[tenant]; ok && len(p.bufs[tenant]) == 0 {
		delete(p.placed, tenant)
		delete(p.bufs, tenant)
		p.tenants[i]--
	}
}

// check refuses what the scheduler would: a stopped server, a done
// context.
func (p *inProcess) check(ctx context.Context, tenant string) error {
	if ctx == nil {
		return fmt.Errorf("%w: a nil context.Context; pass context.Background()", actors.ErrInvalidArgument)
	}
	select {
	case <-p.s.Done():
		return fmt.Errorf("%w: %s", actors.ErrStopped, tenant)
	default:
	}
	if err := ctx.Err(); err != nil {
		return lanes.Wrap("submit", true, err)
	}
	return nil
}

func (p *inProcess) Upload(ctx context.Context, tenant string, dst Region, data []byte) error {
	return upload(ctx, p.s.Submit, tenant, dst, data)
}

func (p *inProcess) Read(ctx context.Context, tenant string, src Region) ([]byte, error) {
	return p.s.Read(ctx, tenant, src)
}

func (p *inProcess) Free(ctx context.Context, tenant string, b Buffer) error {
	if err := p.check(ctx, tenant); err != nil {
		return err
	}
	p.mu.Lock()
	mine := p.bufs[tenant][b]
	if mine {
		delete(p.bufs[tenant], b)
	}
	p.mu.Unlock()
	if !mine {
		return p.notMine(tenant, b)
	}
	dev := p.device(b)
	return cuda.Bound(dev, func() error { return dev.Free(b) })
}

// notMine is the error for a buffer the tenant did not allocate here:
// another tenant's (ErrNotYours), else a stale or foreign handle.
func (p *inProcess) notMine(tenant string, b Buffer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for other, bufs := range p.bufs {
		if other != tenant && bufs[b] {
			return fmt.Errorf("%w: buffer %d is another tenant's; a tenant may free only its own buffers", actors.ErrNotYours, b.ID)
		}
	}
	return errNotServed("free", tenant, b)
}

func (p *inProcess) device(b Buffer) cuda.Device {
	for _, d := range p.devs {
		if d.Info().Instance == b.Device {
			return d
		}
	}
	return p.devs[0]
}

func (p *inProcess) Forget(ctx context.Context, tenant string) error {
	if err := p.check(ctx, tenant); err != nil {
		return err
	}
	if err := p.s.Forget(tenant); err != nil {
		return err // busy or suspended: nothing of it is freed
	}
	p.mu.Lock()
	bufs := p.bufs[tenant]
	delete(p.bufs, tenant)
	if i, ok := p.placed[tenant]; ok {
		delete(p.placed, tenant)
		p.tenants[i]--
	}
	p.mu.Unlock()
	var first error
	for b := range bufs {
		dev := p.device(b)
		if err := cuda.Bound(dev, func() error { return dev.Free(b) }); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *inProcess) Submit(ctx context.Context, tenant string, b Batch) (Receipt, error) {
	return p.s.Submit(ctx, tenant, b)
}

func (p *inProcess) SubmitAsync(ctx context.Context, tenant string, b Batch) (Pending, error) {
	pd, err := p.s.SubmitAsync(ctx, tenant, b)
	if err != nil {
		return nil, err
	}
	return pd, nil
}

func (p *inProcess) Kernels() Kernels { return p.devs[0].Kernels() }

func (p *inProcess) Status() Status {
	st := Status{InProcess: true, Lanes: p.s.Lanes()}
	st.Total = len(st.Lanes)
	for _, l := range st.Lanes {
		st.InFlight += l.InFlight
		if l.Health == actors.HealthHealthy {
			st.Serving++
		}
	}
	return st
}

func (p *inProcess) Stop(ctx context.Context) error { return p.s.Stop(ctx) }

func (p *inProcess) Scheduler() *actors.Scheduler { return p.s }

func (p *inProcess) Front() *remote.Front { return nil }
