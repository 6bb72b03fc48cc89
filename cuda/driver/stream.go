//go:build cuda

// Streams of the real device: enqueuing commands, fences, readback and
// stream capture.

package driver

import (
	"runtime"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// stream is a non-blocking CUDA stream. Like every backend.Stream it has one
// owner; its capture bookkeeping needs no lock beyond that.
type stream struct {
	dev       *device
	id        uint64
	use       sync.Mutex // held while an enqueue or launch checks handles and issues work (see backend.FreeFence)
	s         cStream
	destroyed bool
	argv      [cuda.MaxArgs]uint64 // launch arguments, reused: the stream has one owner
	blob      []byte               // structs passed by value, reused likewise
	offs      [cuda.MaxArgs]int32  // where in blob each struct argument lies (-1: not a struct)

	// pins holds the staging memory of uploads recorded by the current
	// capture; EndCapture hands it to the graph, with the handles its
	// commands named.
	pins       *pinSet
	capturing  bool
	capHandles backend.Handles

	events eventPool // released events, reused by the next records

	last checkedLaunch // the launch validated last (see checkedLaunch)
}

// checkedLaunch is the launch a stream validated last, with what made it
// valid: the kernel table it was checked against and the device's free
// count then. A stream that launches one command over and over (an eager
// step, a capture) checks it once: the same command against the same
// table, while nothing was freed (the count is read under the stream's use
// lock, which every free takes, backend.FreeFence), is still valid, so it
// skips the spec look-up, the argument checks and the buffer look-ups.
type checkedLaunch struct {
	cmd   cuda.Command // Args copied: the caller may reuse its slice
	table *kernelTable
	fn    cFunction
	frees uint64
}

// matches reports whether cmd is the launch checked last, against table,
// with nothing freed since.
func (c *checkedLaunch) matches(cmd *cuda.Command, table *kernelTable, frees uint64) bool {
	return c.table == table && c.frees == frees && c.cmd.Kernel == cmd.Kernel && c.cmd.Config == cmd.Config &&
		len(c.cmd.Args) == len(cmd.Args) && equalArgs(c.cmd.Args, cmd.Args)
}

func equalArgs(a, b []cuda.Arg) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

var _ backend.Stream = (*stream)(nil)

func (s *stream) ID() uint64             { return s.id }
func (s *stream) DeviceInstance() uint64 { return s.dev.info.Instance }

func (s *stream) live(op string) error {
	if s.destroyed {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "stream %d was destroyed; create a new one", s.id)
	}
	return s.dev.live(op)
}

// launch validates a kernel launch (unless it is the one checked last,
// still valid: checkedLaunch) and issues it. The caller holds the use lock.
func (s *stream) launch(op string, cmd *cuda.Command) error {
	d := s.dev
	table := d.table.Load()
	if frees := d.Frees(); !s.last.matches(cmd, table, frees) {
		if err := s.validate(op, *cmd); err != nil {
			return err
		}
		args := append(s.last.cmd.Args[:0], cmd.Args...) // the stream's own copy, reused
		s.last = checkedLaunch{cmd: *cmd, table: table, fn: table.funcs[cmd.Kernel], frees: frees}
		s.last.cmd.Args = args
	}
	if s.capturing {
		s.capHandles.Add(*cmd)
	}
	n := len(cmd.Args)
	structs := false
	for i, a := range cmd.Args {
		switch a.Kind {
		case cuda.ParamBuffer:
			s.argv[i] = a.Region.Addr()
		case cuda.ParamStruct:
			structs = true
		default:
			s.argv[i] = a.Bits
		}
	}
	if structs {
		return s.launchStructs(op, cmd)
	}
	if r := launchKernel(d.ctx, s.last.fn, cmd.Config, s.s, s.argv[:n]); r != 0 {
		return d.check(op, r, "cuLaunchKernel "+cmd.Kernel)
	}
	return nil
}

// validate checks a command against this device: structure, kernel and
// buffers.
func (s *stream) validate(op string, cmd cuda.Command) error {
	return backend.ValidateEnqueue(op, cmd, s.dev.table.Load().kernels, func(b cuda.Buffer) error {
		_, err := s.dev.lookup(op, b)
		return err
	})
}

// Enqueue validates cmd and issues it on the stream (recorded, if the
// stream captures).
func (s *stream) Enqueue(cmd cuda.Command) error {
	op := backend.EnqueueOp(cmd.Kind)
	if err := s.live(op); err != nil {
		return err
	}
	d := s.dev
	s.use.Lock() // see backend.FreeFence
	defer s.use.Unlock()
	if cmd.Kind == cuda.KindLaunch {
		return s.launch(op, &cmd)
	}
	if err := s.validate(op, cmd); err != nil {
		return err
	}
	if s.capturing {
		s.capHandles.Add(cmd)
	}
	switch cmd.Kind {
	case cuda.KindUpload:
		src := unsafe.Pointer(&cmd.Host[0])
		if st, r := captureStatus(d.ctx, s.s); r == 0 && st != backend.CaptureNone {
			// A graph's memcpy node reads its host source at every replay:
			// it must be pinned memory that lives as long as the graph.
			p, err := s.pin(op, cmd.Host)
			if err != nil {
				return err
			}
			src = p
		}
		err := d.check(op, copyHtoD(d.ctx, cmd.Dst.Addr(), src, cmd.Dst.Length, s.s), "cuMemcpyHtoDAsync")
		runtime.KeepAlive(cmd.Host)
		return err
	case cuda.KindCopy:
		return d.check(op, copyDtoD(d.ctx, cmd.Dst.Addr(), cmd.Src.Addr(), cmd.Dst.Length, s.s), "cuMemcpyDtoDAsync")
	case cuda.KindZero:
		return d.check(op, zero(d.ctx, cmd.Dst.Addr(), cmd.Dst.Length, s.s), "cuMemsetD8Async")
	case cuda.KindStageIn:
		p, err := d.stagingPointer(op, cmd.Staging)
		if err != nil {
			return err
		}
		return d.check(op, copyHtoD(d.ctx, cmd.Dst.Addr(), p, cmd.Dst.Length, s.s), "cuMemcpyHtoDAsync from staging")
	case cuda.KindStageOut:
		p, err := d.stagingPointer(op, cmd.Staging)
		if err != nil {
			return err
		}
		return d.check(op, copyDtoH(d.ctx, p, cmd.Src.Addr(), cmd.Src.Length, s.s), "cuMemcpyDtoHAsync to staging")
	case cuda.KindCall:
		return s.call(op, cmd.LibraryCall)
	}
	return cuda.Contractf(op, cuda.ErrInvalidCommand, "unknown command kind %d", cmd.Kind)
}

// launchStructs issues a launch that passes structs by value: their
// bytes are laid in the stream's blob (the driver copies every parameter
// when it launches or captures, so the blob is reused), the rest in argv.
func (s *stream) launchStructs(op string, cmd *cuda.Command) error {
	s.blob = s.blob[:0]
	offs := s.offs[:len(cmd.Args)]
	for i, a := range cmd.Args {
		offs[i] = -1
		if a.Kind == cuda.ParamStruct {
			for len(s.blob)%16 != 0 { // every struct aligned as any C type needs
				s.blob = append(s.blob, 0)
			}
			offs[i] = int32(len(s.blob))
			s.blob = append(s.blob, a.Struct...)
		}
	}
	if r := launchKernelStructs(s.dev.ctx, s.last.fn, cmd.Config, s.s, s.argv[:len(cmd.Args)], s.blob, offs); r != 0 {
		return s.dev.check(op, r, "cuLaunchKernel "+cmd.Kernel)
	}
	return nil
}

// Native is the stream's CUstream (backend.NativeStream).
func (s *stream) Native() uintptr { return uintptr(unsafe.Pointer(s.s)) }

// call runs a library call's Enqueue on this thread, which must have the
// device's context current, handing it the raw CUstream: what it enqueues
// there is the command's work (captured, when the stream captures). Its
// error or panic comes back as a *cuda.CallError inside a device error
// (blame stream: the lane recovers, its neighbours do not notice).
func (s *stream) call(op string, lc *cuda.LibraryCall) error {
	d := s.dev
	if lc.Enqueue == nil {
		return cuda.Contractf(op, cuda.ErrInvalidCommand, "library call %q has no Enqueue: the real device runs a call by letting it enqueue its work", lc.Name)
	}
	if err := d.check(op, bound(d.ctx), "library call "+lc.Name); err != nil {
		return err
	}
	stream := s.Native()
	return backend.RunCall(op, codes.DriverError, "library call", lc.Name, func() error { return lc.Enqueue(stream) })
}

// pin copies host bytes into the staging arena for the current capture.
func (s *stream) pin(op string, host []byte) (unsafe.Pointer, error) {
	p, ok := s.dev.staging.alloc(uint64(len(host)))
	if !ok {
		return nil, backend.DriverError(op, codes.OutOfMemory, "the pinned staging arena for captured uploads is full; destroy unused graphs or open the device with a larger Config.StagingBytes")
	}
	copy(unsafe.Slice((*byte)(p), len(host)), host)
	if s.pins == nil {
		s.pins = &pinSet{arena: s.dev.staging}
	}
	s.pins.add(p, uint64(len(host)))
	return p, nil
}

// Launch enqueues one replay of an executable.
func (s *stream) Launch(e backend.Exec) error {
	const op = "graph launch"
	x, err := s.dev.exec(op, e)
	if err != nil {
		return err
	}
	if err := s.live(op); err != nil {
		return err
	}
	s.use.Lock() // see backend.FreeFence
	defer s.use.Unlock()
	if err := s.dev.checkExecHandles(op, x); err != nil {
		return err
	}
	return s.dev.check(op, graphLaunch(s.dev.ctx, x.x, s.s), "cuGraphLaunch")
}

// Record records a timing event after the work enqueued so far.
func (s *stream) Record() (backend.Event, error) { return s.record(true) }

// RecordFence records an event without timing (CU_EVENT_DISABLE_TIMING).
func (s *stream) RecordFence() (backend.Event, error) { return s.record(false) }

// record re-records a released event of the kind when the stream has one,
// and creates one otherwise: a steady lane creates no events at all.
func (s *stream) record(timed bool) (backend.Event, error) {
	const op = "event record"
	if err := s.live(op); err != nil {
		return nil, err
	}
	slot := s.events.take(timed)
	var ev cEvent
	if slot != nil {
		ev = slot.ev
	}
	ev, r := recordEvent(s.dev.ctx, s.s, ev, timed)
	if err := s.dev.check(op, r, "cuEventRecord"); err != nil {
		return nil, err // a reused slot is dropped: the collector destroys it
	}
	if slot == nil {
		slot = &eventSlot{ev: ev, timed: timed}
		runtime.AddCleanup(slot, func(h eventHandle) { h.dev.destroyEvent(h.ev) }, eventHandle{s.dev, ev})
	}
	return &event{s: s, slot: slot, gen: slot.gen.Load()}, nil
}

// Query reports whether the stream's work has finished (cuStreamQuery).
func (s *stream) Query() backend.FenceQuery {
	const op = "stream query"
	if err := s.live(op); err != nil {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
	}
	return s.dev.fence(op, queryStream(s.dev.ctx, s.s))
}

// fence turns the answer of a fence query into a FenceQuery: not ready is
// pending, a sticky error is indeterminate, and a refused query (during a
// capture) is pending with the error.
func (d *device) fence(op string, r cResult) backend.FenceQuery {
	switch {
	case r == 0:
		return backend.FenceQuery{State: backend.FenceComplete}
	case cuda.Code(r) == codes.NotReady:
		return backend.FenceQuery{State: backend.FencePending}
	}
	err := d.check(op, r, "query")
	if cuda.Classify(err).Sticky {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
	}
	return backend.FenceQuery{State: backend.FencePending, Err: err}
}

// Synchronize blocks until the stream's work has finished.
func (s *stream) Synchronize() error {
	const op = "stream synchronize"
	if err := s.live(op); err != nil {
		return err
	}
	return s.dev.check(op, syncStream(s.dev.ctx, s.s), "cuStreamSynchronize")
}

// Readback synchronizes the stream, then copies src into dst.
func (s *stream) Readback(src cuda.Region, dst []byte) error {
	const op = "readback"
	if err := s.live(op); err != nil {
		return err
	}
	if err := src.Validate(); err != nil {
		return err
	}
	if uint64(len(dst)) != src.Length {
		return cuda.Contractf(op, cuda.ErrOutOfBounds, "destination holds %d bytes for a %d-byte region; they must match", len(dst), src.Length)
	}
	if _, err := s.dev.lookup(op, src.Buffer); err != nil {
		return err
	}
	return s.dev.check(op, readback(s.dev.ctx, dst, src.Addr(), s.s), "readback")
}

// BeginCapture starts a stream capture.
func (s *stream) BeginCapture(mode backend.CaptureMode) error {
	const op = "begin capture"
	if err := s.live(op); err != nil {
		return err
	}
	if mode > backend.CaptureRelaxed {
		return cuda.Contractf(op, cuda.ErrInvalidCommand, "unknown capture mode %d", mode)
	}
	if err := s.dev.check(op, beginCapture(s.dev.ctx, s.s, mode), "cuStreamBeginCapture"); err != nil {
		return err
	}
	s.capturing, s.capHandles = true, backend.Handles{}
	return nil
}

// EndCapture ends the capture and returns its graph.
func (s *stream) EndCapture() (backend.Graph, error) {
	const op = "end capture"
	if err := s.live(op); err != nil {
		return nil, err
	}
	pins, handles := s.pins, s.capHandles
	s.pins, s.capturing, s.capHandles = nil, false, backend.Handles{}
	g, n, r := endCapture(s.dev.ctx, s.s)
	if err := s.dev.check(op, r, "cuStreamEndCapture"); err != nil {
		pins.release()
		return nil, err
	}
	gr := &graph{dev: s.dev, g: g, nodes: n, pins: pins.retain(), handles: handles}
	gr.refs.Store(1)
	return gr, nil
}

// Capture reports the capture status (cuStreamIsCapturing).
func (s *stream) Capture() backend.CaptureStatus {
	st, _ := captureStatus(s.dev.ctx, s.s)
	return st
}

// Destroy releases the stream; its work completes.
func (s *stream) Destroy() error {
	const op = "stream destroy"
	if s.destroyed {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "stream %d was already destroyed", s.id)
	}
	if err := s.dev.check(op, destroyStream(s.dev.ctx, s.s), "cuStreamDestroy"); err != nil {
		return err
	}
	s.dev.frees.RemoveStream(&s.use)
	s.destroyed = true
	s.events.close()
	return nil
}

var _ backend.Event = (*event)(nil)

// maxPooledEvents bounds each free list: a burst's surplus is left to the
// collector.
const maxPooledEvents = 1024

// arena is a first-fit allocator over one pinned host allocation.
type arena struct {
	base unsafe.Pointer
	size uint64

	mu   sync.Mutex
	free []span // sorted by offset, coalesced
}

type span struct{ off, n uint64 }

func newArena(base unsafe.Pointer, size uint64) *arena {
	return &arena{base: base, size: size, free: []span{{0, size}}}
}

const pinAlign = 64

func (a *arena) alloc(n uint64) (unsafe.Pointer, bool) {
	n = (n + pinAlign - 1) / pinAlign * pinAlign
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, f := range a.free {
		if f.n >= n {
			a.free[i] = span{f.off + n, f.n - n}
			if a.free[i].n == 0 {
				a.free = append(a.free[:i], a.free[i+1:]...)
			}
			return unsafe.Add(a.base, f.off), true
		}
	}
	return nil, false
}

func (a *arena) release(p unsafe.Pointer, n uint64) {
	n = (n + pinAlign - 1) / pinAlign * pinAlign
	off := uint64(uintptr(p) - uintptr(a.base))
	a.mu.Lock()
	defer a.mu.Unlock()
	i := 0
	for i < len(a.free) && a.free[i].off < off {
		i++
	}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{off, n}
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
}
