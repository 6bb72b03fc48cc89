// Device memory of the simulated device: allocations, Free behind the free
// fence, lookups and the memory stats.

package sim

import (
	"fmt"
	"math"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

type allocation struct {
	buf   cuda.Buffer
	bytes []byte
	// written is what was written since Alloc, tracked only under
	// Config.InitCheck (execMu guards it).
	written written
}

// fillByte is what an allocation's bytes hold until they are written.
const fillByte = 0xA5

// Alloc allocates a buffer. Like cuMemAlloc's, its memory is not
// initialized: it holds the byte 0xA5 throughout, and code that forgets to
// zero or upload before reading reads that, as on a GPU it would read
// whatever the memory held, without an error (Config.InitCheck reports
// such reads, as compute-sanitizer's initcheck does). Any size beyond the
// free memory is a typed out-of-memory error.
func (d *device) Alloc(spec cuda.BufferSpec) (cuda.Buffer, error) {
	const op = "alloc"
	spec, err := spec.Normalize()
	if err != nil {
		return cuda.Buffer{}, err
	}
	if err := d.check(op); err != nil {
		return cuda.Buffer{}, err
	}
	if err := d.unsafeDuringCapture(op); err != nil {
		return cuda.Buffer{}, err
	}
	d.mu.Lock()
	if d.fire(FaultOutOfMemory, nil) {
		d.mu.Unlock()
		return cuda.Buffer{}, backend.DriverError(op, codes.OutOfMemory, "injected out-of-memory fault")
	}
	// Compare before rounding too: a size near 2^64 would round up past
	// zero.
	footprint := roundUp(spec.Size, spec.Align)
	if spec.Size > d.memory.Total || footprint < spec.Size || footprint > d.memory.Free() {
		free, total := d.memory.Free(), d.memory.Total
		d.mu.Unlock()
		return cuda.Buffer{}, backend.DriverError(op, codes.OutOfMemory,
			fmt.Sprintf("cannot allocate %d bytes: %d of %d free; free buffers or wait for other work", spec.Size, free, total))
	}
	// Reserve the memory, then make its bytes without the device's lock:
	// filling a large buffer takes seconds on the host, and everything
	// else of the device (Err, a lane host's heartbeat) waits on the lock.
	d.memory.InUse += footprint
	d.mu.Unlock()
	bytes, err := hostBytes(op, spec.Size, fillByte)
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.closed: // closed meanwhile: Close dropped every reservation
		return cuda.Buffer{}, cuda.Contractf(op, cuda.ErrDeviceClosed, "device %d was closed during the allocation; open a new one", d.info.Instance)
	default:
	}
	if err != nil {
		d.memory.InUse -= footprint
		return cuda.Buffer{}, err
	}
	d.nextBuffer++
	addr := roundUp(d.nextAddr, spec.Align)
	d.nextAddr = addr + footprint
	b := cuda.Buffer{Device: d.info.Instance, ID: d.nextBuffer, Size: spec.Size, Align: spec.Align, Elem: spec.Elem, Addr: addr}
	d.buffers.Add(b.ID, &allocation{buf: b, bytes: bytes})
	d.memory.Allocations++
	d.memory.Peak = max(d.memory.Peak, d.memory.InUse)
	return b, nil
}

// Free releases a buffer after the device's outstanding work, as cuMemFree.
// From the moment it begins, enqueues that name the buffer are refused
// (ErrStaleHandle); work enqueued before it finishes first. Like cuMemFree
// it waits for the whole device: with a kernel that never finishes, it
// never returns.
func (d *device) Free(b cuda.Buffer) error {
	const op = "free"
	if _, err := d.lookup(op, b); err != nil {
		return err
	}
	if err := d.unsafeDuringCapture(op); err != nil {
		return err
	}
	if err := d.fence.MarkGoing(op, &d.mu, &d.buffers, b.ID); err != nil {
		return err
	}
	err := d.Synchronize()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buffers.EndFree(b.ID, err == nil)
	if err != nil {
		return err
	}
	d.memory.InUse -= roundUp(b.Size, b.Align)
	d.memory.Allocations--
	return nil
}

// Frees counts the frees (Free and FreeHost) begun on the device: a handle
// CheckBuffer or CheckHost found live stays live while it is unchanged.
func (d *device) Frees() uint64 { return d.fence.Frees() }

// lookup checks that b is a live buffer of this device, exactly as it was
// handed out and not being freed, and returns its allocation.
func (d *device) lookup(op string, b cuda.Buffer) (*allocation, error) {
	d.mu.Lock()
	a, ok := d.buffers.Live(b.ID)
	d.mu.Unlock()
	var have cuda.Buffer
	if ok {
		have = a.buf
	}
	if err := backend.CheckBuffer(op, d.info.Instance, b, have, ok); err != nil {
		return nil, err
	}
	return a, nil
}

// CheckBuffer reports whether b is a live buffer of this device, exactly as
// Alloc returned it.
func (d *device) CheckBuffer(b cuda.Buffer) error {
	_, err := d.lookup("check buffer", b)
	return err
}

// Memory reports the device's memory accounting.
func (d *device) Memory() cuda.MemoryStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.memory
}

func roundUp(n, align uint64) uint64 { return (n + align - 1) / align * align }

// fillChunk bounds one copy of a fill (see hostBytes).
const fillChunk = 1 << 20

// fillFrom copies src into dst: one piece of a fill, in a call of its own
// (hostBytes says why it must not be inlined).
//
//go:noinline
func fillFrom(dst, src []byte) int { return copy(dst, src) }

// hostBytes returns n bytes of the pattern, the simulated memory of an
// allocation, or an out-of-memory error when the host cannot hold them (a
// size the Go runtime refuses panics in make; that panic never leaves here).
func hostBytes(op string, n uint64, pattern byte) (b []byte, err error) {
	defer func() {
		if recover() != nil {
			b, err = nil, backend.DriverError(op, codes.OutOfMemory, fmt.Sprintf("the simulator cannot hold %d bytes in host memory; configure less Memory or allocate less", n))
		}
	}()
	if n > math.MaxInt {
		panic("size")
	}
	b = make([]byte, n)
	if pattern != 0 && n > 0 {
		// Doubling, in pieces of at most fillChunk, each a call of its
		// own: a copy (a memmove, which page faults make slow) cannot be
		// preempted, and a loop of nothing but copies never reaches a
		// point where the scheduler may stop it, so filling a gigabyte
		// held up the collector's stop of the world, and every goroutine
		// of the process with it (a lane host's heartbeat: its front lost
		// it). A call's prologue is such a point.
		b[0] = pattern
		for i := 1; i < len(b); {
			i += fillFrom(b[i:], b[:min(i, fillChunk)])
		}
	}
	return b, nil
}
