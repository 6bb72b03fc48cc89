// A lane host's device-state operations: allocations, frees, read-backs,
// forgetting and the administration of a tenant's lane, for tenants, on
// one goroutine bound to the devices.

package host

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/programs"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// hostOps runs the operations in order on a goroutine bound to the host's
// devices (the real device wants its context current on the calling
// thread), and keeps which buffers each tenant allocated here.
type hostOps struct {
	h       *Host
	work    chan hostOp
	done    chan struct{}
	tenants map[string]map[uint64]cuda.Buffer // by tenant, by buffer id: only the goroutine touches it
	owner   map[string]uint64                 // the registration (epoch) that last allocated for each tenant
	staged  *hostStaged                       // tenants' staged programs (replayed on goroutines of their own)

	mu     sync.Mutex // orders later retirements with stop
	closed bool
}

// hostOp is one operation of the epoch it came under, or the retirement
// of that epoch's tenants (msg nil).
type hostOp struct {
	epoch, call uint64
	msg         any
}

func startHostOps(h *Host) (*hostOps, error) {
	o := &hostOps{h: h, work: make(chan hostOp, 1024), done: make(chan struct{}), tenants: map[string]map[uint64]cuda.Buffer{}, owner: map[string]uint64{}, staged: newHostStaged()}
	bound := make(chan error, 1)
	go func() {
		defer close(o.done)
		var unbinds []func()
		for _, d := range h.cfg.Scheduler.Devices {
			unbind, err := d.BindThread()
			if err != nil {
				bound <- fmt.Errorf("%w: bind the host's operations to device %s: %v", wire.ErrConfig, d.Info().Name, err)
				return
			}
			unbinds = append(unbinds, unbind)
		}
		bound <- nil
		defer func() {
			for _, u := range unbinds {
				u()
			}
		}()
		for op := range o.work {
			o.run(op)
		}
	}()
	if err := <-bound; err != nil {
		return nil, err
	}
	return o, nil
}

func (o *hostOps) enqueue(epoch, call uint64, msg any) {
	o.work <- hostOp{epoch: epoch, call: call, msg: msg}
}

// retire drops the tenants of a registration that ended (the tenants it
// last allocated for): frees their buffers and forgets them in the
// scheduler. Other fronts' tenants stay.
func (o *hostOps) retire(epoch uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.work <- hostOp{epoch: epoch}
	}
}

func (o *hostOps) stop() {
	o.mu.Lock()
	o.closed = true
	close(o.work)
	o.mu.Unlock()
	<-o.done
}

// retireLater retires epoch's tenants again in a while: one still busy
// (submissions in flight through another front) is freed once they end.
func (o *hostOps) retireLater(epoch uint64) {
	time.AfterFunc(100*time.Millisecond, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if !o.closed {
			select {
			case o.work <- hostOp{epoch: epoch}:
			default: // the queue is full: the next retirement of epoch, or Stop, frees it
			}
		}
	})
}

// beforeOp, set by a test, runs before the host runs each tenant's
// operation: an operation held up on the host.
var BeforeOp func(msg any)

func (o *hostOps) run(op hostOp) {
	if op.msg == nil {
		busy := false
		for t, e := range o.owner {
			if e == op.epoch && errors.Is(o.forget(t), actors.ErrTenantBusy) {
				busy = true
			}
		}
		if busy {
			o.retireLater(op.epoch)
		}
		return
	}
	if BeforeOp != nil {
		BeforeOp(op.msg)
	}
	res := &wirepb.OpResult{Epoch: op.epoch, Call: op.call}
	if _, ok := o.h.serving(op.epoch); !ok {
		return // sent to a registration the front has dropped, or never welcomed
	}
	var err error
	tenant := scoped(op.epoch, op.msg.(tenantOp).GetTenant()) // the host's name of the front's tenant
	switch m := op.msg.(type) {
	case *wirepb.Alloc:
		var b cuda.Buffer
		if b, err = o.alloc(tenant, m); err == nil {
			res.Buffer = wire.BufferToWire(b)
			o.owner[tenant] = op.epoch
		}
	case *wirepb.Free:
		err = o.free(tenant, m)
	case *wirepb.Read:
		res.Data, err = o.read(tenant, m)
	case *wirepb.Forget:
		err = o.forget(tenant)
	case *wirepb.LaneAdmin:
		err = o.laneAdmin(res, op.epoch, tenant, m)
	case *wirepb.StagedPrepare:
		if err = o.prepareStaged(res, op.epoch, tenant, m); err == nil {
			o.owner[tenant] = op.epoch // retired with the registration, as an allocation is
		}
	case *wirepb.StagedRelease:
		err = o.releaseStaged(tenant, m)
	}
	if err != nil {
		wire.ErrorToResult(res, err)
	}
	o.h.send(Outgoing{result: res})
}

func (o *hostOps) device(i uint32) (cuda.Device, error) {
	devs := o.h.cfg.Scheduler.Devices
	if int(i) >= len(devs) {
		return nil, cuda.Contractf("alloc", cuda.ErrInvalidCommand, "device %d: this host serves devices 0 to %d", i, len(devs)-1)
	}
	return devs[i], nil
}

func (o *hostOps) alloc(tenant string, m *wirepb.Alloc) (cuda.Buffer, error) {
	if m.Elem > math.MaxUint8 {
		return cuda.Buffer{}, cuda.Contractf("alloc", cuda.ErrInvalidCommand, "element type %d out of range", m.Elem)
	}
	dev, err := o.device(m.Device)
	if err != nil {
		return cuda.Buffer{}, err
	}
	spec := cuda.BufferSpec{Size: m.Size, Align: m.Align, Elem: cuda.ElementType(m.Elem)}
	if err := schedhook.CheckFits(dev, spec); err != nil {
		return cuda.Buffer{}, laneerr.Wrap("alloc", true, err) // as one process answers it
	}
	b, err := dev.Alloc(spec)
	if err != nil {
		return cuda.Buffer{}, err
	}
	if err := o.h.sched.Own(tenant, b); err != nil {
		_ = dev.Free(b)
		return cuda.Buffer{}, err
	}
	if o.tenants[tenant] == nil {
		o.tenants[tenant] = map[uint64]cuda.Buffer{}
	}
	o.tenants[tenant][b.ID] = b
	return b, nil
}

// owned is the tenant's buffer w names, exactly as allocated here.
func (o *hostOps) owned(tenant string, w *wirepb.Buffer) (cuda.Buffer, error) {
	b, err := wire.BufferFromWire(w)
	if err != nil {
		return cuda.Buffer{}, err
	}
	if mine, ok := o.tenants[tenant][b.ID]; !ok || mine != b {
		for other, bufs := range o.tenants { // another tenant's of the same front: as a submission naming it says
			if theirs, ok := bufs[b.ID]; ok && other != tenant && scopeOf(other) == scopeOf(tenant) && theirs == b {
				return cuda.Buffer{}, fmt.Errorf("%w: buffer %d is another tenant's; a tenant may use only its own buffers and shared ones", actors.ErrNotYours, b.ID)
			}
		}
		return cuda.Buffer{}, cuda.Contractf("remote", cuda.ErrStaleHandle, "buffer %d is not one tenant %q allocated on this host (or it was freed)", b.ID, tenant)
	}
	return b, nil
}

func (o *hostOps) deviceOf(b cuda.Buffer) backend.Device {
	for _, d := range o.h.cfg.Scheduler.Devices {
		if d.Info().Instance == b.Device {
			return backend.Must(d) // the scheduler's start checked it is one
		}
	}
	return nil
}

func (o *hostOps) free(tenant string, m *wirepb.Free) error {
	b, err := o.owned(tenant, m.Buffer)
	if err != nil {
		return err
	}
	delete(o.tenants[tenant], b.ID)
	return o.deviceOf(b).Free(b)
}

// read copies a region of the tenant's buffer out through the tenant's own
// lane (so after its earlier submissions): Scheduler.Read.
func (o *hostOps) read(tenant string, m *wirepb.Read) ([]byte, error) {
	if m.Region == nil {
		return nil, wire.WireErr("a read names no region")
	}
	b, err := o.owned(tenant, m.Region.Buffer)
	if err != nil {
		return nil, err
	}
	r := cuda.Region{Buffer: b, Offset: m.Region.Offset, Length: m.Region.Length}
	if r.Length == 0 || r.Length > wire.MaxReadBytes {
		return nil, cuda.Contractf("read", cuda.ErrInvalidCommand, "%d bytes: read 1 to %d at a time", r.Length, uint64(wire.MaxReadBytes))
	}
	return o.h.sched.Read(context.Background(), tenant, r)
}

// forget frees every buffer the tenant allocated here and forgets it in
// the scheduler.
func (o *hostOps) forget(tenant string) error {
	// The scheduler first: a tenant with work in flight is refused
	// (busy), and then nothing of it is freed.
	if err := o.h.sched.Forget(tenant); err != nil {
		return err
	}
	var first error
	for _, b := range o.tenants[tenant] {
		if err := o.deviceOf(b).Free(b); err != nil && first == nil {
			first = err
		}
	}
	delete(o.tenants, tenant)
	delete(o.owner, tenant)
	o.forgetStaged(tenant)
	return first
}

// laneAdmin seals, or reads the preparation or the sealed catalog of, the
// lane the tenant's batches run on (after the tenant's submissions that
// arrived before it); a catalog holds the registration's programs alone,
// named as its front named them.
func (o *hostOps) laneAdmin(res *wirepb.OpResult, epoch uint64, tenant string, m *wirepb.LaneAdmin) error {
	lane, ok := o.h.sched.TenantLane(tenant)
	if !ok {
		return fmt.Errorf("%w: tenant %q runs on no lane yet: submit a batch first (its lane is the one its batches run on)", actors.ErrUnknownLane, tenant)
	}
	ctx := context.Background()
	var err error
	var p cache.Preparation
	switch m.Op {
	case wire.LaneSeal:
		p, err = o.h.sched.Seal(ctx, lane)
		res.Preparation = wire.PreparationToWire(p)
	case wire.LanePreparation:
		p, err = o.h.sched.Preparation(ctx, lane)
		res.Preparation = wire.PreparationToWire(p)
	case wire.LaneCatalog:
		var ds []programs.Descriptor
		ds, err = o.h.sched.Catalog(ctx, lane)
		res.Programs = wire.CatalogToWire(ds, epoch)
	default:
		return wire.WireErr("lane operation %d: a front asks for 1 (seal), 2 (preparation) or 3 (catalog)", m.Op)
	}
	return err
}
