// Pinned host memory of the simulated device.

package sim

import (
	"fmt"
	"slices"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

var _ cuda.HostMemory = (*device)(nil)

// hostLookup checks that h is a live host buffer of this device.
func (d *device) hostLookup(op string, h cuda.HostBuffer) ([]byte, error) {
	if h.Device != d.info.Instance {
		return nil, cuda.Contractf(op, cuda.ErrForeignHandle, "host buffer %d belongs to device instance %d, not %d", h.ID, h.Device, d.info.Instance)
	}
	d.mu.Lock()
	b, ok := d.hosts.Live(h.ID)
	d.mu.Unlock()
	if !ok || uint64(len(b)) != h.Size {
		return nil, cuda.Contractf(op, cuda.ErrStaleHandle, "host buffer %d is not allocated (freed, or never handed out by this device)", h.ID)
	}
	return b, nil
}

// CheckHost reports whether h is live pinned host memory of this device.
func (d *device) CheckHost(h cuda.HostBuffer) error {
	_, err := d.hostLookup("check host buffer", h)
	return err
}

// AllocHost allocates zeroed pinned host memory. The simulator pins at
// most as many bytes as the device has memory, in all.
func (d *device) AllocHost(size uint64) (cuda.HostBuffer, error) {
	const op = "host alloc"
	if size == 0 {
		return cuda.HostBuffer{}, cuda.Contractf(op, cuda.ErrEmptyRegion, "host buffer size is 0")
	}
	if err := d.check(op); err != nil {
		return cuda.HostBuffer{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fire(FaultOutOfMemory, nil) {
		return cuda.HostBuffer{}, backend.DriverError(op, codes.OutOfMemory, "injected out-of-memory fault")
	}
	if size > d.memory.Total-min(d.hostInUse, d.memory.Total) {
		return cuda.HostBuffer{}, backend.DriverError(op, codes.OutOfMemory, fmt.Sprintf("cannot pin %d more bytes of host memory: %d of at most %d (the device's memory) are pinned", size, d.hostInUse, d.memory.Total))
	}
	bytes, err := hostBytes(op, size, 0)
	if err != nil {
		return cuda.HostBuffer{}, err
	}
	d.nextHost++
	h := cuda.HostBuffer{Device: d.info.Instance, ID: d.nextHost, Size: size}
	d.hosts.Add(h.ID, bytes)
	d.hostInUse += size
	return h, nil
}

// FreeHost releases pinned host memory after the device's outstanding work,
// as cuMemFreeHost.
func (d *device) FreeHost(h cuda.HostBuffer) error {
	const op = "host free"
	if _, err := d.hostLookup(op, h); err != nil {
		return err
	}
	if err := d.fence.MarkGoing(op, &d.mu, &d.hosts, h.ID); err != nil {
		return err
	}
	err := d.Synchronize()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.hosts.EndFree(h.ID, err == nil)
	if err != nil {
		return err
	}
	d.hostInUse -= h.Size
	return nil
}

// WriteHost copies src into pinned host memory now.
func (d *device) WriteHost(dst cuda.HostRegion, src []byte) error {
	const op = "host write"
	b, err := d.hostRegion(op, dst, len(src))
	if err != nil {
		return err
	}
	d.execMu.Lock()
	copy(b, src)
	d.execMu.Unlock()
	return nil
}

// ReadHost copies pinned host memory into dst now.
func (d *device) ReadHost(src cuda.HostRegion, dst []byte) error {
	const op = "host read"
	b, err := d.hostRegion(op, src, len(dst))
	if err != nil {
		return err
	}
	d.execMu.Lock()
	copy(dst, b)
	d.execMu.Unlock()
	return nil
}

func (d *device) hostRegion(op string, r cuda.HostRegion, n int) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if uint64(n) != r.Length {
		return nil, cuda.Contractf(op, cuda.ErrOutOfBounds, "%d bytes for a %d-byte host region; they must match", n, r.Length)
	}
	b, err := d.hostLookup(op, r.Buffer)
	if err != nil {
		return nil, err
	}
	return b[r.Offset:r.End()], nil
}

// HostBytes returns a pinned host region's bytes to fill or read in place
// (backend.HostView), with no copy: valid while the host buffer lives, and
// only while no command that reads or writes the region is in flight.
func (d *device) HostBytes(r cuda.HostRegion) ([]byte, error) {
	return d.hostRegion("host view", r, int(min(r.Length, 1<<62)))
}

var _ backend.HostView = (*device)(nil)

// pinnedRange is host memory pinned in place: its page-rounded address
// range and the memory itself, kept reachable while it is pinned.
type pinnedRange struct {
	start, end uintptr
	mem        []byte
}

// simPage is the page size pinning rounds to, as cuMemHostRegister pins
// whole pages.
const simPage = 4096

var _ backend.HostPinner = (*device)(nil)

// PinHost pins memory the device did not allocate, as cuMemHostRegister:
// whole pages, none of them pinned already (an overlap fails with
// cuda_host_memory_already_registered), counted against the pinned-memory limit
// AllocHost keeps. The simulator reads any memory the same way, so what
// pinning changes here is the bookkeeping a real driver would refuse.
func (d *device) PinHost(mem []byte) (unpin func() error, err error) {
	const op = "pin host memory"
	if len(mem) == 0 {
		return nil, cuda.Contractf(op, cuda.ErrEmptyRegion, "no bytes to pin")
	}
	if err := d.check(op); err != nil {
		return nil, err
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	r := pinnedRange{start: start &^ (simPage - 1), end: (start + uintptr(len(mem)) + simPage - 1) &^ (simPage - 1), mem: mem}
	size := uint64(r.end - r.start)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fire(FaultOutOfMemory, nil) {
		return nil, backend.DriverError(op, codes.OutOfMemory, "injected out-of-memory fault")
	}
	for _, p := range d.pins {
		if r.start < p.end && p.start < r.end {
			return nil, backend.DriverError(op, codes.HostMemoryRegistered, fmt.Sprintf("pages [%#x, %#x) overlap host memory pinned already; pin each page once", r.start, r.end))
		}
	}
	if size > d.memory.Total-min(d.hostInUse, d.memory.Total) {
		return nil, backend.DriverError(op, codes.OutOfMemory, fmt.Sprintf("cannot pin %d more bytes of host memory: %d of at most %d (the device's memory) are pinned", size, d.hostInUse, d.memory.Total))
	}
	d.pins = append(d.pins, r)
	d.hostInUse += size
	var once sync.Once
	return func() (err error) {
		once.Do(func() { // a second call does nothing, as the driver's
			err = backend.DriverError("unpin host memory", codes.HostMemoryNotRegistered, "the memory is not pinned (the device was closed since)")
			d.mu.Lock()
			defer d.mu.Unlock()
			for i, p := range d.pins {
				if p.start == r.start && p.end == r.end {
					d.pins = slices.Delete(d.pins, i, i+1)
					d.hostInUse -= size
					err = nil
					return
				}
			}
		})
		return err
	}, nil
}
