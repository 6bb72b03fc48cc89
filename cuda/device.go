// The device boundary: Device, Stream, Event, Graph and Exec, the
// interfaces every backend implements.

package cuda

import (
	"time"
)

// Device is one device instance: a GPU's primary context, or a simulated
// device. Every buffer, stream, graph and executable it hands out carries its
// instance id and is rejected by any other instance.
//
// A device is poisoned by a sticky error (an illegal address in a kernel,
// say): from then on [Device.Err] returns that error and every call that
// touches the device fails with it, as CUDA's context does.
type Device interface {
	// BindThread prepares the calling goroutine to call into the device: it
	// locks the goroutine to its OS thread and makes the device's context
	// current there. The returned function unlocks the thread. A lane calls
	// it for each run of its mailbox and each poll, so it must be cheap (one
	// cuCtxSetCurrent on the GPU); a backend without thread affinity (the
	// simulator) only locks the thread. Calls from an unbound thread fail
	// with ErrThreadNotBound where the backend can tell.
	BindThread() (unbind func(), err error)
	// Info describes the device.
	Info() DeviceInfo
	// Kernels resolves the kernels this device can launch.
	Kernels() Kernels
	// Alloc allocates a buffer. Out of memory is retryable.
	Alloc(spec BufferSpec) (Buffer, error)
	// Free releases a buffer. Like cuMemFree it first waits for the device's
	// outstanding work; freeing during a global-mode capture invalidates it.
	Free(b Buffer) error
	// CheckBuffer reports whether b is a live buffer of this device
	// instance, exactly the value Alloc returned: nil, or a contract error
	// wrapping ErrForeignHandle (another instance) or ErrStaleHandle (freed,
	// never allocated, or altered). It never waits and touches no stream,
	// so a lane checks every handle of a batch before enqueuing any of it.
	CheckBuffer(b Buffer) error
	// Frees counts the frees (Free and FreeHost) begun on the device: a
	// handle CheckBuffer or CheckHost found live stays live while the
	// count is unchanged, so a caller may skip checking it again.
	Frees() uint64
	// Memory reports the device's memory accounting.
	Memory() MemoryStats
	// NewStream creates a stream.
	NewStream() (Stream, error)
	// Synchronize waits for all work on all streams of the device.
	Synchronize() error
	// Err returns the sticky error that poisoned the device, or nil.
	Err() error
	// Close waits for outstanding work, releases every resource and makes
	// the device unusable. A second Close returns nil.
	Close() error
	// HostMemory is pinned host memory: staging that commands read and
	// write while they run (staged replays, StageIn and StageOut). Every
	// backend has it.
	HostMemory
}

// DeviceInfo describes a device.
type DeviceInfo struct {
	Instance    uint64 // unique per device instance in this process
	Ordinal     int    // the device's ordinal (cuDeviceGet)
	Name        string // e.g. "NVIDIA H200" or "sim"
	Backend     string // "sim" or "driver"
	TotalMemory uint64 // bytes
}

// Stream is an in-order queue of device work. Work on one stream runs in the
// order it was enqueued; work on different streams runs concurrently. A
// stream has one owner and is not safe for concurrent use.
type Stream interface {
	// ID is unique within the device instance.
	ID() uint64
	// DeviceInstance is the instance id of the owning device.
	DeviceInstance() uint64
	// Enqueue validates cmd against this device and enqueues it, or, while
	// capturing, records it into the capture. It does not wait for the work.
	Enqueue(cmd Command) error
	// Launch enqueues one replay of an executable graph.
	Launch(exec Exec) error
	// Record records a timing event after all work enqueued so far.
	// Recording during a capture is rejected (ErrIllegalState) and leaves
	// the capture intact.
	Record() (Event, error)
	// RecordFence records an event without timing (CUDA's
	// CU_EVENT_DISABLE_TIMING), the cheaper kind to record and query, for
	// completion only: Elapsed with it fails with CodeInvalidHandle, as in
	// CUDA. The capture rule is Record's.
	RecordFence() (Event, error)
	// Query reports whether all work enqueued so far has finished, without
	// blocking. Querying a capturing stream invalidates the capture.
	Query() FenceQuery
	// Synchronize blocks until all work enqueued so far has finished.
	// Synchronizing a capturing stream invalidates the capture.
	Synchronize() error
	// Readback synchronizes the stream, then copies src into dst
	// (len(dst) == src.Length). During a capture it is unsupported and
	// invalidates the capture.
	Readback(src Region, dst []byte) error
	// BeginCapture starts recording instead of executing.
	BeginCapture(mode CaptureMode) error
	// EndCapture ends the capture and returns the recorded graph, or
	// ErrCaptureInvalidated if a call during the capture invalidated it.
	EndCapture() (Graph, error)
	// Capture reports the stream's capture status.
	Capture() CaptureStatus
	// Destroy releases the stream; work already enqueued still completes.
	Destroy() error
}

// CaptureMode is the mode of a stream capture, as CUDA's.
type CaptureMode uint8

// Capture modes. In global mode, a potentially unsafe call anywhere on the
// device (an allocation, a free, a device synchronize) during the capture
// invalidates it; in relaxed mode only calls on the capturing stream do.
const (
	CaptureGlobal CaptureMode = iota
	CaptureRelaxed
)

// CaptureStatus is a stream's capture state.
type CaptureStatus uint8

// Capture states.
const (
	CaptureNone        CaptureStatus = iota // not capturing
	CaptureActive                           // recording
	CaptureInvalidated                      // capturing, but a call invalidated it; EndCapture fails
)

// String names the status.
func (s CaptureStatus) String() string {
	switch s {
	case CaptureNone:
		return "none"
	case CaptureActive:
		return "active"
	case CaptureInvalidated:
		return "invalidated"
	}
	return "unknown"
}

// FenceState is the state of a fence (an event, or a stream's tail).
type FenceState uint8

// Fence states. Complete and Indeterminate are terminal.
const (
	FencePending       FenceState = iota // the work has not finished yet
	FenceComplete                        // the work finished successfully
	FenceIndeterminate                   // the device failed: the work's outcome is unknown
)

// String names the state.
func (s FenceState) String() string {
	switch s {
	case FencePending:
		return "pending"
	case FenceComplete:
		return "complete"
	case FenceIndeterminate:
		return "indeterminate"
	}
	return "unknown"
}

// FenceQuery is the answer to a non-blocking fence query. Err is set when
// State is FenceIndeterminate.
type FenceQuery struct {
	State FenceState
	Err   error
}

// Event marks a point in a stream. It completes when all work enqueued
// before it has finished.
type Event interface {
	// Query reports the event's state without blocking.
	Query() FenceQuery
	// Synchronize blocks until the event completes or the device fails.
	Synchronize() error
	// Elapsed is the device time from start to this event; both must be
	// complete (otherwise an error with CodeNotReady) and timing events
	// (otherwise CodeInvalidHandle).
	Elapsed(start Event) (time.Duration, error)
	// Release hands the event back to its stream, which reuses it for a
	// later record instead of creating one. Release an event only once
	// nothing waits on it; afterwards every method of this handle fails
	// with ErrStaleHandle, and a second Release does nothing. Releasing is
	// optional: an event never released is destroyed once unreachable.
	Release()
}

// Graph is a captured sequence of device work.
type Graph interface {
	// NodeCount is the number of nodes in the graph.
	NodeCount() int
	// Instantiate makes an executable graph.
	Instantiate() (Exec, error)
	// Destroy releases the graph; executables made from it stay valid.
	Destroy() error
}

// Exec is an executable graph, launched on a stream with [Stream.Launch].
type Exec interface {
	// NodeCount is the number of nodes in the executable.
	NodeCount() int
	// Upload prepares the executable on the device through a stream, so
	// the first launch costs no more than later ones.
	Upload(s Stream) error
	// Update makes the executable run g from now on, in place, without a
	// new instantiation (cuGraphExecUpdate): g must have the executable's
	// topology and node types; pointers, scalars and launch shapes may
	// differ. Otherwise it fails with ErrUpdateRefused (the detail names
	// CUDA's update result) and the executable is unchanged. Launches
	// already enqueued run what they were launched with.
	Update(g Graph) error
	// Rebind gives the executable's nodes new parameters in place, without
	// a capture (cuGraphExecKernelNodeSetParams,
	// cuGraphExecMemcpyNodeSetParams, cuGraphExecMemsetNodeSetParams):
	// cmds are one command per node, in the order they were captured, each
	// of the very kind its node was captured from (a kernel launch; a
	// device-to-device copy, a stage-in or a stage-out, each only for a
	// node of its own kind; a memset; never an upload or a library call)
	// and checked as Enqueue checks it.
	// Pointers, scalars, lengths and launch shapes may change. An
	// executable whose nodes cannot take them fails with a
	// *RebindRefusedError (errors.Is ErrUpdateRefused) saying why, and is
	// unchanged, except after RebindDeviceRefused at a node past the first
	// (RebindRefusedError.Node: the nodes before it took theirs; launch it
	// again only after a Rebind that succeeds, to its old commands say);
	// it is unchanged after a contract error.
	// Launches already enqueued run what they were launched with, so a
	// Rebind need not wait for them.
	Rebind(cmds []Command) error
	// DeviceBytes is the device memory the executable holds once
	// instantiated and uploaded, as the backend measures it (CUDA reports
	// no size for an executable; see each backend's doc).
	DeviceBytes() int64
	// Destroy releases the executable; launches already enqueued complete.
	Destroy() error
}

// NativeStream is implemented by a stream of the real device: Native is
// its CUstream, what a library's per-lane Setup binds its handle to.
type NativeStream interface {
	Native() uintptr
}

// NativeHandle returns s's CUstream (through decorators), or 0 when s has
// none (the simulated device's).
func NativeHandle(s Stream) uintptr {
	for {
		if n, ok := s.(NativeStream); ok {
			return n.Native()
		}
		w, ok := s.(interface{ Unwrap() Stream })
		if !ok {
			return 0
		}
		s = w.Unwrap()
	}
}

// Bound runs fn on a goroutine locked to a thread bound to dev (its
// BindThread), waits for it and returns its error: the way to call a
// device's own methods (Alloc, Free, AllocHost, ReadHost, ...) from code
// that is not a lane's. A failure to bind is returned and fn does not run.
func Bound(dev Device, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		unbind, err := dev.BindThread()
		if err != nil {
			done <- err
			return
		}
		defer unbind()
		done <- fn()
	}()
	return <-done
}
