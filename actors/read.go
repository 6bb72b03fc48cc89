// Reading a tenant's buffer back, in the order of its submissions.

package actors

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/lanes"
)

// MaxReadBytes bounds one Read.
const MaxReadBytes = 256 << 20

// Read copies region r of a buffer the tenant owns, or of a shared one,
// back to the host, after every submission of the tenant that Submit
// accepted before it: a stage-out into pinned memory, submitted for the
// tenant as any batch is (admitted, routed to its lane, fair-queued), then
// read; the staging is freed in the background (a free waits for the
// whole device, which a hung kernel of another lane never lets end).
// Errors are the submission's: ErrNotYours for another tenant's buffer, a
// contract error for a freed or foreign one or a region out of its
// bounds, ErrOverloaded when the tenant's lane is full. r's Length is 1
// to MaxReadBytes.
func (s *Scheduler) Read(ctx context.Context, tenant string, r cuda.Region) ([]byte, error) {
	if s.unstarted() {
		return nil, errUnstarted
	}
	if r.Length == 0 || r.Length > MaxReadBytes {
		return nil, fmt.Errorf("%w: Read: %d bytes; read 1 to %d at a time", ErrInvalidArgument, r.Length, uint64(MaxReadBytes))
	}
	dev := s.device(r.Buffer.Device)
	if dev == nil {
		return nil, cuda.Contractf("read", cuda.ErrForeignHandle, "buffer %d belongs to device instance %d, which this scheduler does not serve", r.Buffer.ID, r.Buffer.Device)
	}
	var hb cuda.HostBuffer
	if err := cuda.Bound(dev, func() (err error) {
		hb, err = dev.AllocHost(r.Length)
		return err
	}); err != nil {
		return nil, err
	}
	freeHost := func() { s.freers[dev].free(hb) }
	rc, err := s.readInto(ctx, tenant, hb, r)
	var detached *DetachedError
	if errors.As(err, &detached) {
		// The stage-out may still run (its lane took it) and write the
		// pinned buffer: free it once the submission has ended.
		go func() { <-detached.Pending.Done(); freeHost() }()
		return nil, err
	}
	defer freeHost()
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return nil, err
	}
	data := make([]byte, r.Length)
	if err := cuda.Bound(dev, func() error { return dev.ReadHost(cuda.HostRegion{Buffer: hb, Length: r.Length}, data) }); err != nil {
		return nil, err
	}
	return data, nil
}

// readInto submits, for the tenant, the stage-out of r into hb.
func (s *Scheduler) readInto(ctx context.Context, tenant string, hb cuda.HostBuffer, r cuda.Region) (lanes.Receipt, error) {
	cmd, err := cuda.StageOut(cuda.HostRegion{Buffer: hb, Length: r.Length}, r)
	if err != nil {
		return lanes.Receipt{}, err
	}
	if err := s.OwnHost(tenant, hb); err != nil {
		return lanes.Receipt{}, err
	}
	return s.Submit(ctx, tenant, lanes.Batch{Tenant: tenant, Entries: []lanes.Entry{{Command: cmd}}})
}

// hostFreer frees one device's pinned staging in the background, in the
// order given. A free waits for all of the device's work (as
// cuMemFreeHost does), and on a device whose kernel hangs that wait never
// ends: so no Read waits on it, and a hung tenant's lane cannot hold up
// another tenant's reads. One goroutine per device at most, and only
// while frees are queued.
type hostFreer struct {
	dev     backend.Device
	mu      sync.Mutex
	queue   []cuda.HostBuffer
	running bool
}

// free queues hb and returns at once.
func (f *hostFreer) free(hb cuda.HostBuffer) {
	f.mu.Lock()
	f.queue = append(f.queue, hb)
	start := !f.running
	f.running = true
	f.mu.Unlock()
	if start {
		go f.drain()
	}
}

func (f *hostFreer) drain() {
	for {
		f.mu.Lock()
		batch := f.queue
		f.queue = nil
		if len(batch) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		_ = cuda.Bound(f.dev, func() error {
			for _, hb := range batch {
				_ = f.dev.FreeHost(hb)
			}
			return nil
		})
	}
}
