package lanes

import (
	"context"
	"errors"
	"sync"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/remote"
)

// inProcess is the side of an in-process scheduler: it allocates a
// tenant's buffers on one device (the one its lane is on, else the device
// with the fewest tenants), owned by the tenant, as a lane host does.
type inProcess struct {
	s    *actors.Scheduler
	devs []backend.Device // the scheduler's devices, as the lanes drive them

	mu      sync.Mutex
	placed  map[string]int // tenant -> index in devs
	tenants []int          // tenants placed on each device
}

func newInProcess(s *actors.Scheduler, devs []cuda.Device) *inProcess {
	p := &inProcess{s: s, placed: map[string]int{}, tenants: make([]int, len(devs))}
	for _, d := range devs {
		p.devs = append(p.devs, backend.Must(d)) // the scheduler's start checked each is one
	}
	return p
}

// place is the device the tenant's buffers go on: where they went before;
// else the device of its lane when that device serves; else the serving
// device with the fewest tenants. A device serves while a lane of it is
// not out for good: a device whose context a sticky fault poisoned takes
// no new tenant (and takes them again should its lanes come back).
func (p *inProcess) place(tenant string) cuda.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.placed[tenant]; ok {
		return p.devs[i]
	}
	serving := make([]bool, len(p.devs))
	lane, routed := p.s.TenantLane(tenant)
	best := -1
	for _, st := range p.s.Lanes() {
		if st.Device < 0 || st.Device >= len(p.devs) {
			continue
		}
		switch st.Health {
		case actors.HealthStarting, actors.HealthServing, actors.HealthRecovering:
			serving[st.Device] = true
			if routed && st.ID == lane {
				best = st.Device
			}
		}
	}
	if best < 0 {
		for i, n := range p.tenants {
			if serving[i] && (best < 0 || n < p.tenants[best]) {
				best = i
			}
		}
	}
	if best < 0 {
		best = 0 // none serves: its calls say why (the device's error)
	}
	p.placed[tenant] = best
	p.tenants[best]++
	return p.devs[best]
}

// unplace forgets the tenant's placement.
func (p *inProcess) unplace(tenant string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.placed[tenant]; ok {
		delete(p.placed, tenant)
		p.tenants[i]--
	}
}

func (p *inProcess) alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error) {
	select {
	case <-p.s.Done():
		return Buffer{}, laneerr.Wrap("alloc", true, actors.ErrStopped)
	default:
	}
	if err := ctx.Err(); err != nil {
		return Buffer{}, laneerr.Wrap("alloc", true, err)
	}
	if err := schedhook.CheckTenant(tenant); err != nil {
		return Buffer{}, laneerr.Wrap("alloc", true, err)
	}
	dev := p.place(tenant)
	if err := schedhook.CheckFits(dev, spec); err != nil {
		return Buffer{}, laneerr.Wrap("alloc", true, err)
	}
	var b cuda.Buffer
	if err := cuda.Bound(dev, func() (err error) {
		b, err = dev.Alloc(spec)
		return err
	}); err != nil {
		return Buffer{}, err
	}
	if err := p.s.Own(tenant, b); err != nil {
		_ = cuda.Bound(dev, func() error { return dev.Free(b) })
		return Buffer{}, err
	}
	return b, nil
}

func (p *inProcess) read(ctx context.Context, tenant string, src Region) ([]byte, error) {
	return p.s.Read(ctx, tenant, src)
}

func (p *inProcess) device(b Buffer) backend.Device {
	for _, d := range p.devs {
		if d.Info().Instance == b.Device {
			return d
		}
	}
	return nil
}

func (p *inProcess) check(b Buffer) error {
	dev := p.device(b)
	if dev == nil {
		return cuda.Contractf("check", cuda.ErrForeignHandle, "buffer %d belongs to device instance %d, which this server does not serve", b.ID, b.Device)
	}
	return dev.CheckBuffer(b)
}

func (p *inProcess) free(_ context.Context, _ string, b Buffer) error {
	dev := p.device(b)
	return cuda.Bound(dev, func() error { return dev.Free(b) })
}

func (p *inProcess) forget(_ context.Context, tenant string, bufs []Buffer) error {
	if err := p.s.Forget(tenant); err != nil {
		return err // busy or suspended: nothing of it is freed
	}
	p.unplace(tenant)
	var first error
	for _, b := range bufs {
		err := p.free(context.Background(), tenant, b)
		if c := cuda.Classify(err); c.Sticky || errors.Is(err, cuda.ErrDeviceClosed) {
			// Its memory went with the poisoned (or closed) device: the
			// tenant starts over elsewhere, as through a front it does
			// after its host was lost.
			err = nil
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (p *inProcess) submit(ctx context.Context, tenant string, b Batch) (Receipt, error) {
	return p.s.Submit(ctx, tenant, b)
}

func (p *inProcess) submitAsync(ctx context.Context, tenant string, b Batch) (Pending, error) {
	pd, err := p.s.SubmitAsync(ctx, tenant, b)
	if err != nil {
		return nil, err
	}
	return pd, nil
}

func (p *inProcess) checksBatches() bool { return false } // the scheduler does

func (p *inProcess) kernels() Kernels { return p.devs[0].Kernels() }

func (p *inProcess) status() Status {
	st := Status{InProcess: true, Lanes: p.s.Lanes()}
	st.Total = len(st.Lanes)
	for _, l := range st.Lanes {
		st.InFlight += l.InFlight
		if l.Health == actors.HealthServing {
			st.Serving++
		}
	}
	return st
}

func (p *inProcess) stop(ctx context.Context) error { return p.s.Stop(ctx) }

func (p *inProcess) scheduler() *actors.Scheduler { return p.s }

func (p *inProcess) front() *remote.Front { return nil }
