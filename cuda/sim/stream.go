// Streams of the simulated device: in-order work on a worker, and stream
// capture with CUDA's rules.

package sim

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// node is one unit of recorded work: a command.
type node struct {
	cmd cuda.Command
}

// frozen is cmd as the device keeps it, as CUDA copies a launch's
// arguments when it is enqueued or captured: its arguments and its
// library call's description are its own, so a caller that changes its
// command afterwards (or a kernel body its arguments) changes no recorded
// or pending work.
func frozen(cmd cuda.Command) cuda.Command {
	if len(cmd.Args) > 0 {
		cmd.Args = slices.Clone(cmd.Args)
	}
	if len(cmd.Host) > 0 {
		cmd.Host = slices.Clone(cmd.Host) // CUDA stages pageable bytes at the call
	}
	if c := cmd.LibraryCall; c != nil {
		cp := *c
		cp.Params, cp.Regions = slices.Clone(c.Params), slices.Clone(c.Regions)
		cmd.LibraryCall = &cp
	}
	return cmd
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

type stream struct {
	dev *device
	id  uint64
	use sync.Mutex // held while an enqueue or launch checks handles and schedules work (see backend.FreeFence)

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
	stalled   bool        // the worker is stuck on a hung item
	failure   failure     // the first failure not yet reported (worker.go)
	failed    atomic.Bool // failure is set
}

var _ backend.Stream = (*stream)(nil)

func newStream(d *device, id uint64) *stream {
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
	return backend.ValidateEnqueue(op, cmd, kernelView{s.dev.kernels()}, func(b cuda.Buffer) error {
		_, err := s.dev.lookup(op, b)
		return err
	})
}

// Enqueue validates cmd and enqueues it, or records it during a capture.
// Its handles are checked and its work scheduled under the stream's use
// lock, so a concurrent Free either waits for this work or makes the
// enqueue fail (see backend.FreeFence).
func (s *stream) Enqueue(cmd cuda.Command) error {
	op := backend.EnqueueOp(cmd.Kind)
	if err := s.check(op); err != nil {
		return err
	}
	s.use.Lock()
	defer s.use.Unlock()
	if err := s.validate(op, cmd); err != nil {
		return err
	}
	n := node{cmd: frozen(cmd)}
	if recorded, err := s.record(op, n); recorded || err != nil {
		return err
	}
	host, device := s.dev.commandCost(cmd, false)
	return s.submit(op, []node{n}, host, device)
}

// Launch enqueues one replay of an executable. As on the GPU (CUDA 13),
// launching a graph into a capturing stream is unsupported and invalidates
// the capture.
func (s *stream) Launch(e backend.Exec) error {
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
	host, device := s.dev.cost.GraphLaunchHost, s.dev.cost.GraphLaunchDevice+x.cost
	if !x.uploaded.Swap(true) {
		device += s.dev.uploadCost(x.nodes)
	}
	if err := s.submitKernels(op, x.nodes, x.kernels, host, device); err != nil {
		return err
	}
	s.mu.Lock()
	seq := s.enqSeq // the launch's item: the stream has one owner, which launches
	s.mu.Unlock()
	x.launched(s, seq)
	return nil
}

// submit schedules work: it decides its faults, charges the host cost, and
// hands the item to the worker.
func (s *stream) submit(op string, nodes []node, host, device time.Duration) error {
	return s.submitKernels(op, nodes, nodeKernels(nodes), host, device)
}

// submitKernels is submit with the nodes' kernels known.
func (s *stream) submitKernels(op string, nodes []node, kernels []string, host, device time.Duration) error {
	d := s.dev
	d.mu.Lock()
	var fault FaultKind
	switch {
	case len(kernels) > 0 && d.fire(FaultLaunch, kernels):
		d.mu.Unlock()
		d.clock.spin(host)
		return backend.DriverError(op, codes.LaunchOutOfResources, "injected launch failure; the stream is unaffected")
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
	seq := s.enqSeq
	if fault == 0 && d.noData && d.clock.mode == ClockZeroCost && len(s.queue) == 0 {
		// No bytes to run and no time to charge, behind nothing: the idle
		// worker would retire it the moment it woke, so it is retired here,
		// without waking the worker (a thread hand-off per launch that
		// would be most of what --clock none measures). No one waits for
		// it yet, and every earlier item was done already.
		s.doneSeq = seq
	} else {
		s.queue = append(s.queue, &item{seq: seq, op: op, nodes: nodes, start: start, finish: finish, fault: fault})
		s.cond.Broadcast()
	}
	s.mu.Unlock()

	if d.tracing {
		d.mu.Lock()
		entry := TraceEntry{Stream: s.id, Seq: seq, Op: op, Start: start, Finish: finish}
		if fault != 0 {
			entry.Fault = fault.String()
		}
		d.trace = append(d.trace, entry)
		d.mu.Unlock()
	}
	return nil
}

// Record records a timing event after the work enqueued so far.
func (s *stream) Record() (backend.Event, error) { return s.recordEvent(true) }

// RecordFence records an event without timing.
func (s *stream) RecordFence() (backend.Event, error) { return s.recordEvent(false) }

func (s *stream) recordEvent(timed bool) (backend.Event, error) {
	const op = "event record"
	if err := s.check(op); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.capture != nil {
		return nil, backend.DriverError(op, codes.IllegalState, "events are not recorded during a capture; record after EndCapture")
	}
	at := max(time.Duration(s.tail.Load()), s.dev.clock.now())
	if s.dev.clock.mode == ClockVirtual {
		at = max(at, s.host)
	}
	return &event{s: s, seq: s.enqSeq, at: at, timed: timed}, nil
}

// Query reports whether the stream's work so far has finished.
func (s *stream) Query() backend.FenceQuery {
	const op = "stream query"
	if err := s.unsupportedDuringCapture(op); err != nil {
		return backend.FenceQuery{State: backend.FencePending, Err: err}
	}
	e, err := s.recordEvent(false)
	if err != nil {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
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
	return s.waitReported(op)
}

// waitReported is wait, then the stream's failure in the work waited for,
// which is reported then (failedBy).
func (s *stream) waitReported(op string) error {
	s.mu.Lock()
	seq := s.enqSeq
	s.mu.Unlock()
	if err := s.wait(op); err != nil {
		return err
	}
	return s.failedBy(seq, true)
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
	if err := s.waitReported(op); err != nil {
		return err
	}
	a, err := s.dev.lookup(op, src.Buffer)
	if err != nil {
		return err
	}
	s.dev.execMu.Lock()
	copy(dst, a.bytes[src.Offset:src.End()])
	err = s.dev.checkReadback(src)
	s.dev.execMu.Unlock()
	return err
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
		return backend.DriverError(op, codes.IllegalState, "the stream is capturing; end the capture before destroying it")
	}
	s.destroyed = true
	s.cond.Broadcast()
	s.dev.fence.RemoveStream(&s.use)
	return nil
}
