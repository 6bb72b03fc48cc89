// Streams of the simulated device: in-order work on a worker, and stream
// capture with CUDA's rules.

package sim

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/cuda"
)

// node is one unit of recorded work: a command.
type node struct {
	cmd cuda.Command
}

// item is one scheduled operation of a stream: an eager command, a graph
// launch, or a graph upload.
type item struct {
	seq    uint64
	op     string
	nodes  []node
	start  time.Duration
	finish time.Duration
	fault  FaultKind // FaultSticky or FaultHang, decided when scheduled
}

type captureState struct {
	mode        cuda.CaptureMode
	nodes       []node
	invalidated bool
}

type stream struct {
	dev *Device
	id  uint64
	use sync.Mutex // held while an enqueue or launch checks handles and schedules work (see cuda.FreeFence)

	mu        sync.Mutex
	cond      *sync.Cond
	queue     []*item
	enqSeq    uint64 // seq of the last item enqueued
	doneSeq   uint64 // seq of the last item the worker finished
	tail      atomic.Int64
	host      time.Duration // virtual mode: when the owning host thread is free
	capture   *captureState
	destroyed bool
	stopped   bool
	stalled   bool // the worker is stuck on a hung item
}

var _ cuda.Stream = (*stream)(nil)

func newStream(d *Device, id uint64) *stream {
	s := &stream{dev: d, id: id}
	s.cond = sync.NewCond(&s.mu)
	go s.work()
	return s
}

func (s *stream) ID() uint64             { return s.id }
func (s *stream) DeviceInstance() uint64 { return s.dev.info.Instance }

// check fails every call on a destroyed stream or a closed or poisoned device.
func (s *stream) check(op string) error {
	s.mu.Lock()
	destroyed := s.destroyed
	s.mu.Unlock()
	if destroyed {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "stream %d was destroyed; create a new one", s.id)
	}
	return s.dev.check(op)
}

// validate checks a command against this device: its structure, its kernel
// and every buffer it names.
func (s *stream) validate(op string, cmd cuda.Command) error {
	if cmd.Kind == cuda.KindStageIn || cmd.Kind == cuda.KindStageOut {
		if _, err := s.dev.hostLookup(op, cmd.Staging.Buffer); err != nil {
			return err
		}
	}
	return cuda.ValidateFor(op, cmd, s.dev.kernels, func(b cuda.Buffer) error {
		_, err := s.dev.lookup(op, b)
		return err
	})
}

// Enqueue validates cmd and enqueues it, or records it during a capture.
// Its handles are checked and its work scheduled under the stream's use
// lock, so a concurrent Free either waits for this work or makes the
// enqueue fail (see cuda.FreeFence).
func (s *stream) Enqueue(cmd cuda.Command) error {
	op := cmd.Kind.EnqueueOp()
	if err := s.check(op); err != nil {
		return err
	}
	s.use.Lock()
	defer s.use.Unlock()
	if err := s.validate(op, cmd); err != nil {
		return err
	}
	n := node{cmd: cmd}
	if recorded, err := s.record(op, n); recorded || err != nil {
		return err
	}
	host, device := s.dev.commandCost(cmd, false)
	return s.submit(op, []node{n}, host, device)
}

// Launch enqueues one replay of an executable. As on the GPU (CUDA 13),
// launching a graph into a capturing stream is unsupported and invalidates
// the capture.
func (s *stream) Launch(e cuda.Exec) error {
	const op = "graph launch"
	x, err := s.dev.exec(op, e)
	if err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	s.use.Lock()
	defer s.use.Unlock()
	if err := s.dev.checkExecHandles(op, x); err != nil {
		return err
	}
	if err := s.unsupportedDuringCapture(op); err != nil {
		return err
	}
	host, device := s.dev.cost.GraphLaunchHost, s.dev.cost.GraphLaunchDevice+s.dev.nodesCost(x.nodes)
	if !x.uploaded.Swap(true) {
		device += s.dev.uploadCost(x.nodes)
	}
	return s.submit(op, x.nodes, host, device)
}

// record appends n to an active capture. It reports whether the stream was
// capturing; a rejected command invalidates the capture.
func (s *stream) record(op string, n node) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.capture
	if c == nil {
		return false, nil
	}
	if c.invalidated {
		return true, cuda.DriverError(op, cuda.CodeStreamCaptureInvalidated, "the capture on this stream was invalidated; end it and capture again")
	}
	s.dev.mu.Lock()
	rejected := s.dev.fire(FaultCaptureReject, nodeKernels([]node{n}))
	s.dev.mu.Unlock()
	if rejected {
		c.invalidated = true
		return true, cuda.DriverError(op, cuda.CodeStreamCaptureUnsupported, "injected capture rejection; the capture is invalidated")
	}
	c.nodes = append(c.nodes, n)
	return true, nil
}

// submit schedules work: it decides its faults, charges the host cost, and
// hands the item to the worker.
func (s *stream) submit(op string, nodes []node, host, device time.Duration) error {
	kernels := nodeKernels(nodes)
	d := s.dev
	d.mu.Lock()
	var fault FaultKind
	switch {
	case len(kernels) > 0 && d.fire(FaultLaunch, kernels):
		d.mu.Unlock()
		d.clock.spin(host)
		return cuda.DriverError(op, cuda.CodeLaunchOutOfResources, "injected launch failure; the stream is unaffected")
	case len(kernels) > 0 && d.fire(FaultSticky, kernels):
		fault = FaultSticky
	case len(kernels) > 0 && d.fire(FaultHang, kernels):
		fault = FaultHang
	}
	d.mu.Unlock()

	now := d.clock.now()
	ready := now
	switch d.clock.mode {
	case ClockRealTime:
		d.clock.spin(host)
		ready = d.clock.now()
	case ClockVirtual:
		s.mu.Lock()
		s.host = max(s.host, now) + host
		ready = s.host
		s.mu.Unlock()
	}
	start := max(ready, time.Duration(s.tail.Load()))
	finish := never
	if start != never && fault != FaultHang {
		finish = start + d.contended(s, start, device)
	}
	s.tail.Store(int64(finish))

	s.mu.Lock()
	s.enqSeq++
	it := &item{seq: s.enqSeq, op: op, nodes: nodes, start: start, finish: finish, fault: fault}
	s.queue = append(s.queue, it)
	s.cond.Broadcast()
	s.mu.Unlock()

	if d.tracing {
		d.mu.Lock()
		entry := TraceEntry{Stream: s.id, Seq: it.seq, Op: op, Start: start, Finish: finish}
		if fault != 0 {
			entry.Fault = fault.String()
		}
		d.trace = append(d.trace, entry)
		d.mu.Unlock()
	}
	return nil
}

// contended stretches a device duration while more streams are busy at
// start than the device runs at full speed.
func (d *Device) contended(self *stream, start, dur time.Duration) time.Duration {
	if d.cost.StreamParallelism <= 1 || dur == 0 {
		return dur
	}
	d.mu.Lock()
	busy := 1
	for _, o := range d.streams {
		if o != self && time.Duration(o.tail.Load()) > start {
			busy++
		}
	}
	d.mu.Unlock()
	if f := float64(busy) / d.cost.StreamParallelism; f > 1 {
		return time.Duration(float64(dur) * f)
	}
	return dur
}

// work is the stream's worker: it executes items in order, one at a time.
func (s *stream) work() {
	d := s.dev
	for {
		s.mu.Lock()
		for len(s.queue) == 0 && !s.stopped && !s.destroyed {
			s.cond.Wait()
		}
		if len(s.queue) == 0 || s.stopped {
			s.mu.Unlock()
			if s.destroyed || s.stopped {
				d.mu.Lock()
				delete(d.streams, s.id)
				d.mu.Unlock()
			}
			return
		}
		it := s.queue[0]
		s.mu.Unlock()

		if it.fault == FaultHang {
			s.mu.Lock()
			s.stalled = true
			s.cond.Broadcast()
			s.mu.Unlock()
			<-d.closed
			return
		}
		d.clock.sleepUntil(it.start, d.closed)
		d.run(it)
		d.clock.sleepUntil(it.finish, d.closed)

		s.mu.Lock()
		s.queue = s.queue[1:]
		s.doneSeq = it.seq
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// run executes an item's bytes, unless the device was already dead when it
// started, and poisons the device on a sticky fault.
func (d *Device) run(it *item) {
	d.mu.Lock()
	dead := d.poison != nil && d.poison.at <= it.start
	d.mu.Unlock()
	if dead {
		return
	}
	if it.fault == FaultSticky {
		d.poisonAt(it.finish, cuda.DriverError("kernel", cuda.CodeIllegalAddress, "injected sticky fault in "+it.op+"; the device is poisoned, open a new one"))
		return
	}
	d.execMu.Lock()
	err := d.execute(it.nodes)
	d.execMu.Unlock()
	var ce *cuda.Error
	if errors.As(err, &ce) && ce.Sticky {
		d.poisonAt(it.finish, ce)
	}
}

// settle waits until the worker has finished every item due by time t.
func (s *stream) settle(t time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.queue) > 0 && s.queue[0].finish <= t && !s.stopped {
		s.cond.Wait()
	}
}

// waitSeq blocks until the worker has finished item seq, which is due at
// device time at. In the virtual mode the clock moves to at first, as the
// host waited that long. Work that never finishes blocks until Close.
func (s *stream) waitSeq(op string, seq uint64, at time.Duration) error {
	d := s.dev
	if d.clock.mode == ClockVirtual && at != never {
		d.clock.virtual.AdvanceTo(at)
	}
	s.mu.Lock()
	for s.doneSeq < seq && !s.stopped {
		s.cond.Wait()
	}
	s.mu.Unlock()
	if err := d.Err(); err != nil {
		return err
	}
	if s.doneSeq < seq {
		return cuda.DriverError(op, cuda.CodeDeinitialized, "the device was closed while the work was still running (a hung kernel?)")
	}
	return nil
}

// wait blocks until all work enqueued so far has finished.
func (s *stream) wait(op string) error {
	s.mu.Lock()
	seq := s.enqSeq
	s.mu.Unlock()
	return s.waitSeq(op, seq, time.Duration(s.tail.Load()))
}

func (s *stream) hung() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stalled || (len(s.queue) > 0 && s.queue[len(s.queue)-1].finish == never)
}

// stop wakes every waiter after the device closed.
func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

// unsupportedDuringCapture invalidates this stream's capture, if any, and
// returns the error CUDA gives for a synchronizing call during capture.
func (s *stream) unsupportedDuringCapture(op string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture == nil {
		return nil
	}
	s.capture.invalidated = true
	return cuda.DriverError(op, cuda.CodeStreamCaptureUnsupported, op+" on a capturing stream is not allowed; the capture is invalidated. End the capture first")
}

// invalidateGlobalCapture invalidates a global-mode capture.
func (s *stream) invalidateGlobalCapture() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture == nil || s.capture.mode != cuda.CaptureGlobal {
		return false
	}
	s.capture.invalidated = true
	return true
}

// Record records a timing event after the work enqueued so far.
func (s *stream) Record() (cuda.Event, error) { return s.recordEvent(true) }

// RecordFence records an event without timing.
func (s *stream) RecordFence() (cuda.Event, error) { return s.recordEvent(false) }

func (s *stream) recordEvent(timed bool) (cuda.Event, error) {
	const op = "event record"
	if err := s.check(op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture != nil {
		return nil, cuda.DriverError(op, cuda.CodeIllegalState, "events are not recorded during a capture; record after EndCapture")
	}
	at := max(time.Duration(s.tail.Load()), s.dev.clock.now())
	if s.dev.clock.mode == ClockVirtual {
		at = max(at, s.host)
	}
	return &event{s: s, seq: s.enqSeq, at: at, timed: timed}, nil
}

// Query reports whether the stream's work so far has finished.
func (s *stream) Query() cuda.FenceQuery {
	const op = "stream query"
	if err := s.unsupportedDuringCapture(op); err != nil {
		return cuda.FenceQuery{State: cuda.FencePending, Err: err}
	}
	e, err := s.recordEvent(false)
	if err != nil {
		return cuda.FenceQuery{State: cuda.FenceIndeterminate, Err: err}
	}
	return e.Query()
}

// Synchronize blocks until the stream's work so far has finished.
func (s *stream) Synchronize() error {
	const op = "stream synchronize"
	if err := s.check(op); err != nil {
		return err
	}
	if err := s.unsupportedDuringCapture(op); err != nil {
		return err
	}
	return s.wait(op)
}

// Readback synchronizes the stream and copies src into dst.
func (s *stream) Readback(src cuda.Region, dst []byte) error {
	const op = "readback"
	if err := s.check(op); err != nil {
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
	if err := s.unsupportedDuringCapture(op); err != nil {
		return err
	}
	if err := s.wait(op); err != nil {
		return err
	}
	a, err := s.dev.lookup(op, src.Buffer)
	if err != nil {
		return err
	}
	s.dev.execMu.Lock()
	copy(dst, a.bytes[src.Offset:src.End()])
	s.dev.execMu.Unlock()
	return nil
}

// BeginCapture starts recording.
func (s *stream) BeginCapture(mode cuda.CaptureMode) error {
	const op = "begin capture"
	if err := s.check(op); err != nil {
		return err
	}
	if mode > cuda.CaptureRelaxed {
		return cuda.Contractf(op, cuda.ErrInvalidCommand, "unknown capture mode %d", mode)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture != nil {
		return cuda.DriverError(op, cuda.CodeIllegalState, "the stream is already capturing; end that capture first")
	}
	s.capture = &captureState{mode: mode}
	return nil
}

// EndCapture ends the capture and returns its graph.
func (s *stream) EndCapture() (cuda.Graph, error) {
	const op = "end capture"
	if err := s.check(op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	c := s.capture
	s.capture = nil
	s.mu.Unlock()
	switch {
	case c == nil:
		return nil, cuda.DriverError(op, cuda.CodeIllegalState, "the stream is not capturing; call BeginCapture first")
	case c.invalidated:
		return nil, cuda.DriverError(op, cuda.CodeStreamCaptureInvalidated, "a call during the capture invalidated it; no graph was made, capture again")
	}
	return &graph{dev: s.dev, nodes: c.nodes}, nil
}

// Capture reports the capture status.
func (s *stream) Capture() cuda.CaptureStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.capture == nil:
		return cuda.CaptureNone
	case s.capture.invalidated:
		return cuda.CaptureInvalidated
	}
	return cuda.CaptureActive
}

// Destroy releases the stream once its work completes.
func (s *stream) Destroy() error {
	const op = "stream destroy"
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "stream %d was already destroyed", s.id)
	}
	if s.capture != nil {
		return cuda.DriverError(op, cuda.CodeIllegalState, "the stream is capturing; end the capture before destroying it")
	}
	s.destroyed = true
	s.cond.Broadcast()
	s.dev.fence.RemoveStream(&s.use)
	return nil
}
