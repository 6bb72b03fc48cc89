//go:build cuda

// Pinned host memory of the real device.

package driver

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

var (
	_ cuda.HostMemory    = (*device)(nil)
	_ backend.HostPinner = (*device)(nil)
)

type pinnedHost struct {
	buf cuda.HostBuffer
	p   unsafe.Pointer
}

func (d *device) hostLookup(op string, h cuda.HostBuffer) (*pinnedHost, error) {
	if h.Device != d.info.Instance {
		return nil, cuda.Contractf(op, cuda.ErrForeignHandle, "host buffer %d belongs to device instance %d, not %d", h.ID, h.Device, d.info.Instance)
	}
	d.mu.RLock()
	a, ok := d.hosts.Live(h.ID)
	d.mu.RUnlock()
	if !ok || a.buf != h {
		return nil, cuda.Contractf(op, cuda.ErrStaleHandle, "host buffer %d is not allocated (freed, or never handed out by this device)", h.ID)
	}
	return a, nil
}

// CheckHost reports whether h is live pinned host memory of this device.
func (d *device) CheckHost(h cuda.HostBuffer) error {
	_, err := d.hostLookup("check host buffer", h)
	return err
}

// AllocHost allocates pinned host memory (cuMemAllocHost), zeroed.
func (d *device) AllocHost(size uint64) (cuda.HostBuffer, error) {
	const op = "host alloc"
	if size == 0 {
		return cuda.HostBuffer{}, cuda.Contractf(op, cuda.ErrEmptyRegion, "host buffer size is 0")
	}
	if err := d.live(op); err != nil {
		return cuda.HostBuffer{}, err
	}
	if size > math.MaxInt/2 {
		return cuda.HostBuffer{}, backend.DriverError(op, codes.OutOfMemory, fmt.Sprintf("cannot pin %d bytes of host memory", size))
	}
	p, r := hostAlloc(d.ctx, size)
	if err := d.check(op, r, "cuMemAllocHost"); err != nil {
		return cuda.HostBuffer{}, err
	}
	clear(unsafe.Slice((*byte)(p), size))
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextHost++
	h := cuda.HostBuffer{Device: d.info.Instance, ID: d.nextHost, Size: size}
	d.hosts.Add(h.ID, &pinnedHost{buf: h, p: p})
	return h, nil
}

// FreeHost releases pinned host memory (cuMemFreeHost).
func (d *device) FreeHost(h cuda.HostBuffer) error {
	const op = "host free"
	a, err := d.hostLookup(op, h)
	if err != nil {
		return err
	}
	if err := d.frees.MarkGoing(op, &d.mu, &d.hosts, h.ID); err != nil {
		return err
	}
	// cuMemFreeHost does not wait for the device: work that reads or
	// writes the staging must finish first, or it touches freed memory.
	err = d.Synchronize()
	if err == nil {
		err = d.check(op, hostFree(d.ctx, a.p), "cuMemFreeHost")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts.EndFree(h.ID, err == nil)
	return err
}

func (d *device) hostBytes(op string, r cuda.HostRegion, n int) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if uint64(n) != r.Length {
		return nil, cuda.Contractf(op, cuda.ErrOutOfBounds, "%d bytes for a %d-byte host region; they must match", n, r.Length)
	}
	a, err := d.hostLookup(op, r.Buffer)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(unsafe.Add(a.p, r.Offset)), r.Length), nil
}

// WriteHost copies src into pinned host memory now.
func (d *device) WriteHost(dst cuda.HostRegion, src []byte) error {
	b, err := d.hostBytes("host write", dst, len(src))
	if err == nil {
		copy(b, src)
	}
	return err
}

// ReadHost copies pinned host memory into dst now.
func (d *device) ReadHost(src cuda.HostRegion, dst []byte) error {
	b, err := d.hostBytes("host read", src, len(dst))
	if err == nil {
		copy(dst, b)
	}
	return err
}

// stagingPointer is the pinned address of a host region.
func (d *device) stagingPointer(op string, r cuda.HostRegion) (unsafe.Pointer, error) {
	a, err := d.hostLookup(op, r.Buffer)
	if err != nil {
		return nil, err
	}
	return unsafe.Add(a.p, r.Offset), nil
}

// HostBytes returns a pinned host region's bytes to fill or read in place
// (backend.HostView), with no copy: valid while the host buffer lives, and
// only while no command that reads or writes the region is in flight.
func (d *device) HostBytes(r cuda.HostRegion) ([]byte, error) {
	return d.hostBytes("host view", r, int(min(r.Length, 1<<62)))
}

var _ backend.HostView = (*device)(nil)

// PinHost pins memory this device did not allocate (cuMemHostRegister,
// portable to every context): copies from it are DMA from pinned memory.
// mem must stay mapped until unpin returned, with no copy from it in
// flight then.
func (d *device) PinHost(mem []byte) (unpin func() error, err error) {
	const op = "pin host memory"
	if len(mem) == 0 {
		return nil, cuda.Contractf(op, cuda.ErrEmptyRegion, "no bytes to pin")
	}
	if err := d.live(op); err != nil {
		return nil, err
	}
	p := unsafe.Pointer(&mem[0])
	if err := d.check(op, hostRegister(d.ctx, p, uint64(len(mem))), "cuMemHostRegister"); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() (err error) {
		once.Do(func() { err = d.check("unpin host memory", hostUnregister(d.ctx, p), "cuMemHostUnregister") })
		return err
	}, nil
}
