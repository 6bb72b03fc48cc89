//go:build cuda

// The real Device: a GPU's primary context, bound threads, memory, streams.

package driver

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	"gorgonia.org/cu"
)

// Config configures a device.
type Config struct {
	// Ordinal selects the GPU (cuDeviceGet).
	Ordinal int
	// StagingBytes is the size of the pinned host arena that holds the
	// bytes of uploads recorded into graphs; 0 means 64 MiB.
	StagingBytes uint64
	// Kernels are the kernels the device launches, looked up by name in the
	// built-in PTX (kernels.PTX); nil means kernels.Builtin(). Tests that
	// provoke device faults add kernels.FaultInjection() here.
	Kernels kernels.Registry
	// Modules are one's own kernels, loaded at open as LoadModule loads them.
	Modules []kernels.Module
}

// Device is one device instance on a GPU's primary context: a
// [cuda.Device] that loads kernel modules ([kernels.Loader]). [Open] makes
// one. Its streams, graphs and executables are what a lane drives
// (internal/backend's Device, which the device implements).
type Device interface {
	cuda.Device
	kernels.Loader
}

// device is the real device (see [Device]).
type device struct {
	info    cuda.DeviceInfo
	dev     cu.Device
	ctx     cContext
	primary cu.CUContext
	module  cu.Module
	table   atomic.Pointer[kernelTable] // replaced whole by LoadModule: launches read it without a lock
	loadMu  sync.Mutex                  // LoadModule's
	modules []cu.Module                 // the modules LoadModule loaded (loadMu)
	staging *arena

	// ctxMu orders event cleanups (readers) against Close releasing the
	// primary context (the writer).
	ctxMu       sync.RWMutex
	ctxReleased bool

	// unwell is set once the device is poisoned or closed: live's fast
	// path, so a healthy device's hot calls take no lock.
	unwell atomic.Bool

	// frees orders frees against enqueues and launches (backend.FreeFence):
	// cuMemFree's wait covers every enqueue that found the buffer live.
	frees backend.FreeFence

	graphMem graphMemory // the device memory executables take (Exec.DeviceBytes)

	mu       sync.RWMutex // the tables below; hot paths only read
	buffers  backend.Table[*allocation]
	nextBuf  uint64
	hosts    backend.Table[*pinnedHost]
	nextHost uint64
	nextStr  uint64
	memory   cuda.MemoryStats
	poison   *cuda.Error
	closed   bool
}

var _ cuda.Device = (*device)(nil)

type allocation struct {
	buf  cuda.Buffer
	base uint64 // what cuMemAlloc returned; buf.Addr is aligned within it
}

// Open opens a device instance on GPU cfg.Ordinal: it retains the primary
// context, loads the kernels' PTX and sets up the staging arena. Several
// instances of one GPU share its context but not their handles.
func Open(cfg Config) (Device, error) {
	const op = "open"
	if cfg.StagingBytes == 0 {
		cfg.StagingBytes = 64 << 20
	}
	if cfg.Kernels == nil {
		cfg.Kernels = kernels.Builtin()
	}
	dev, err := cu.GetDevice(cfg.Ordinal)
	if err != nil {
		return nil, driverError(op, err, fmt.Sprintf("no CUDA device %d", cfg.Ordinal))
	}
	primary, err := dev.RetainPrimaryCtx()
	if err != nil {
		return nil, driverError(op, err, "retain the primary context")
	}
	d := &device{
		dev: dev, primary: primary, ctx: *(*cContext)(unsafe.Pointer(&primary)),
		buffers: backend.NewTable[*allocation](), hosts: backend.NewTable[*pinnedHost](),
	}
	unbind, err := d.BindThread()
	if err != nil {
		return nil, err
	}
	defer unbind()
	name, _ := dev.Name()
	_, total, err := cu.MemInfo()
	if err != nil {
		return nil, driverError(op, err, "query memory")
	}
	d.info = cuda.DeviceInfo{Instance: backend.NextInstance(), Ordinal: cfg.Ordinal, Name: name, Backend: "driver", TotalMemory: uint64(total)}
	d.memory.Total = uint64(total)
	if d.module, err = cu.LoadData(kernels.PTX); err != nil {
		return nil, driverError(op, err, "load the kernels' PTX")
	}
	builtin := &kernelTable{kernels: cfg.Kernels, funcs: map[string]cFunction{}}
	for _, n := range cfg.Kernels.Names() {
		fn, err := d.module.Function(n)
		if err != nil {
			return nil, driverError(op, err, "find kernel "+n+" in the PTX")
		}
		builtin.funcs[n] = *(*cFunction)(unsafe.Pointer(&fn))
	}
	d.table.Store(builtin)
	p, r := hostAlloc(d.ctx, cfg.StagingBytes)
	if err := d.check(op, r, "allocate the pinned staging arena"); err != nil {
		return nil, err
	}
	d.staging = newArena(p, cfg.StagingBytes)
	for _, m := range cfg.Modules {
		if err := d.LoadModule(m); err != nil {
			_ = d.Close()
			return nil, err
		}
	}
	return d, nil
}

// BindThread locks the calling goroutine to its OS thread and makes the
// device's context current there.
func (d *device) BindThread() (func(), error) {
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(d.primary); err != nil {
		runtime.UnlockOSThread()
		return nil, driverError("bind thread", err, "make the primary context current")
	}
	return runtime.UnlockOSThread, nil
}

// Info describes the device.
func (d *device) Info() cuda.DeviceInfo { return d.info }

// Kernels returns the kernels the device launches.
func (d *device) Kernels() cuda.Kernels { return d.table.Load().kernels }

// Alloc allocates a buffer with cuMemAlloc, over-allocating to honour an
// alignment above the 256 bytes cuMemAlloc guarantees.
func (d *device) Alloc(spec cuda.BufferSpec) (cuda.Buffer, error) {
	const op = "alloc"
	spec, err := spec.Normalize()
	if err != nil {
		return cuda.Buffer{}, err
	}
	if err := d.live(op); err != nil {
		return cuda.Buffer{}, err
	}
	if spec.Size > d.info.TotalMemory {
		// Refused here: a size near 2^64 would wrap when padded below.
		return cuda.Buffer{}, backend.DriverError(op, codes.OutOfMemory, fmt.Sprintf("cannot allocate %d bytes on a %d-byte GPU", spec.Size, d.info.TotalMemory))
	}
	size := spec.Size
	if spec.Align > cuda.DefaultAlignment {
		size += spec.Align
	}
	base, r := memAlloc(d.ctx, size)
	if err := d.check(op, r, fmt.Sprintf("cuMemAlloc(%d)", size)); err != nil {
		return cuda.Buffer{}, err
	}
	addr := (base + spec.Align - 1) / spec.Align * spec.Align
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextBuf++
	b := cuda.Buffer{Device: d.info.Instance, ID: d.nextBuf, Size: spec.Size, Align: spec.Align, Elem: spec.Elem, Addr: addr}
	d.buffers.Add(b.ID, &allocation{buf: b, base: base})
	d.memory.InUse += size
	d.memory.Allocations++
	d.memory.Peak = max(d.memory.Peak, d.memory.InUse)
	return b, nil
}

// Free releases a buffer (cuMemFree waits for the device's work, so with a
// kernel that never finishes it never returns). From the moment it begins,
// enqueues and launches that name the buffer are refused (ErrStaleHandle);
// work issued before finishes first.
func (d *device) Free(b cuda.Buffer) error {
	const op = "free"
	a, err := d.lookup(op, b)
	if err != nil {
		return err
	}
	if err := d.live(op); err != nil {
		return err
	}
	if err := d.frees.MarkGoing(op, &d.mu, &d.buffers, b.ID); err != nil {
		return err
	}
	err = d.check(op, memFree(d.ctx, a.base), "cuMemFree")
	d.mu.Lock()
	defer d.mu.Unlock()
	d.buffers.EndFree(b.ID, err == nil)
	if err != nil {
		return err
	}
	size := b.Size
	if b.Align > cuda.DefaultAlignment {
		size += b.Align
	}
	d.memory.InUse -= size
	d.memory.Allocations--
	return nil
}

// Frees counts the frees (Free and FreeHost) begun on the device: a handle
// CheckBuffer or CheckHost found live stays live while it is unchanged.
func (d *device) Frees() uint64 { return d.frees.Frees() }

// checkExecHandles checks an executable's buffers before a launch (see
// backend.FreeFence.CheckExec).
func (d *device) checkExecHandles(op string, x *exec) error {
	return d.frees.CheckExec(op, &x.handles, &x.checked, func(id uint64, host bool) bool {
		d.mu.RLock()
		defer d.mu.RUnlock()
		if host {
			_, ok := d.hosts.Live(id)
			return ok
		}
		_, ok := d.buffers.Live(id)
		return ok
	})
}

// lookup checks that b is a live buffer of this device as it was handed
// out, not being freed.
func (d *device) lookup(op string, b cuda.Buffer) (*allocation, error) {
	d.mu.RLock()
	a, ok := d.buffers.Live(b.ID)
	d.mu.RUnlock()
	var have cuda.Buffer
	if ok {
		have = a.buf
	}
	if err := backend.CheckBuffer(op, d.info.Instance, b, have, ok); err != nil {
		return nil, err
	}
	return a, nil
}

// CheckBuffer reports whether b is a live buffer of this device instance,
// exactly as Alloc returned it.
func (d *device) CheckBuffer(b cuda.Buffer) error {
	_, err := d.lookup("check buffer", b)
	return err
}

// Memory reports the device's memory accounting: Total is the GPU's, InUse
// what this instance allocated.
func (d *device) Memory() cuda.MemoryStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.memory
}

// NewStream creates a non-blocking stream.
func (d *device) NewStream() (backend.Stream, error) {
	const op = "stream create"
	if err := d.live(op); err != nil {
		return nil, err
	}
	s, r := createStream(d.ctx)
	if err := d.check(op, r, "cuStreamCreate"); err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.nextStr++
	id := d.nextStr
	d.mu.Unlock()
	st := &stream{dev: d, id: id, s: s}
	d.frees.AddStream(&st.use)
	return st, nil
}

// Synchronize waits for all work of the context (cuCtxSynchronize).
func (d *device) Synchronize() error {
	const op = "device synchronize"
	if err := d.live(op); err != nil {
		return err
	}
	return d.check(op, syncContext(d.ctx), "cuCtxSynchronize")
}

// Close waits for the device's work, frees every buffer this instance
// allocated and releases its hold on the primary context. The calling
// thread need not be bound.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.unwell.Store(true)
	buffers, hosts := d.buffers.Take(), d.hosts.Take()
	poisoned := d.poison != nil
	d.mu.Unlock()
	unbind, err := d.BindThread()
	if err != nil {
		return err
	}
	defer unbind()
	if !poisoned {
		_ = syncContext(d.ctx)
		for _, a := range buffers {
			_ = memFree(d.ctx, a.base)
		}
		for _, h := range hosts {
			_ = hostFree(d.ctx, h.p)
		}
	}
	_ = cu.MemFreeHost(d.staging.base)
	_ = d.module.Unload()
	d.loadMu.Lock()
	for _, m := range d.modules {
		_ = m.Unload()
	}
	d.modules = nil
	d.loadMu.Unlock()
	d.ctxMu.Lock()
	defer d.ctxMu.Unlock()
	d.ctxReleased = true
	if err := d.dev.ReleasePrimaryCtx(); err != nil {
		return driverError("close", err, "release the primary context")
	}
	return nil
}
