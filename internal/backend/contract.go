// The backends' contract with the lane core: streams, events, graphs,
// executables and pinned staging. Both backends (cuda/sim, cuda/driver)
// implement it; a user holds only a cuda.Device and never names these.

package backend

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
)

// Device is a device as the lane core drives it: the user's cuda.Device
// and what only a lane calls. Both backends implement it; [Of] asserts it.
type Device interface {
	cuda.Device
	// CheckBuffer reports whether b is a live buffer of this device
	// instance, exactly the value Alloc returned: nil, or a contract error
	// wrapping ErrForeignHandle (another instance) or ErrStaleHandle (freed,
	// never allocated, or altered). It never waits and touches no stream,
	// so a lane checks every handle of a batch before enqueuing any of it.
	CheckBuffer(b cuda.Buffer) error
	// Frees counts the frees (Free and FreeHost) begun on the device: a
	// handle CheckBuffer or CheckHost found live stays live while the
	// count is unchanged, so a caller may skip checking it again.
	Frees() uint64
	// NewStream creates a stream.
	NewStream() (Stream, error)
	// Synchronize waits for all work on all streams of the device.
	Synchronize() error
}

// Of is dev as the lane core drives it, or an error saying what dev is
// instead and how to make a device ("a T, not a device of lanes'
// backends: ..."), for the caller to wrap with its own sentinel.
func Of(dev cuda.Device) (Device, error) {
	if d, ok := dev.(Device); ok {
		return d, nil
	}
	return nil, fmt.Errorf("a %T, not a device of lanes' backends: make it with sim.New or driver.Open", dev)
}

// Must is dev as the lane core drives it; it panics when dev is not one
// (tests and code that made dev with a backend itself).
func Must(dev cuda.Device) Device {
	d, err := Of(dev)
	if err != nil {
		panic(err)
	}
	return d
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
	Enqueue(cmd cuda.Command) error
	// Launch enqueues one replay of an executable graph.
	Launch(exec Exec) error
	// Record records a timing event after all work enqueued so far.
	// Recording during a capture is rejected (cuda.ErrIllegalState) and leaves
	// the capture intact.
	Record() (Event, error)
	// RecordFence records an event without timing (CUDA's
	// CU_EVENT_DISABLE_TIMING), the cheaper kind to record and query, for
	// completion only: Elapsed with it fails with codes.InvalidHandle, as in
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
	Readback(src cuda.Region, dst []byte) error
	// BeginCapture starts recording instead of executing.
	BeginCapture(mode CaptureMode) error
	// EndCapture ends the capture and returns the recorded graph, or
	// cuda.ErrCaptureInvalidated if a call during the capture invalidated it.
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
	// complete (otherwise an error with codes.NotReady) and timing events
	// (otherwise codes.InvalidHandle).
	Elapsed(start Event) (time.Duration, error)
	// Release hands the event back to its stream, which reuses it for a
	// later record instead of creating one. Release an event only once
	// nothing waits on it; afterwards every method of this handle fails
	// with cuda.ErrStaleHandle, and a second Release does nothing. Releasing is
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
	// differ. Otherwise it fails with cuda.ErrUpdateRefused (the detail names
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
	// *RebindRefusedError (errors.Is cuda.ErrUpdateRefused) saying why, and is
	// unchanged, except after RebindDeviceRefused at a node past the first
	// (RebindRefusedError.Node: the nodes before it took theirs; launch it
	// again only after a Rebind that succeeds, to its old commands say);
	// it is unchanged after a contract error.
	// Launches already enqueued run what they were launched with, so a
	// Rebind need not wait for them.
	Rebind(cmds []cuda.Command) error
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

// HostView is pinned host memory the host addresses in place: both
// backends implement it beside [cuda.HostMemory]. HostBytes returns a region's
// bytes with no copy, to fill before the commands that read them run, or
// read after those that write them ended; no such command may be in flight
// while the slice is used, and it is valid only while the host buffer
// lives.
type HostView interface {
	HostBytes(r cuda.HostRegion) ([]byte, error)
}

// HostPinner is a device that can pin host memory it did not allocate
// (cuMemHostRegister on the GPU): copies from it then run as from its own
// pinned staging, the GPU reading it directly, not through the driver's
// bounce buffer for pageable memory. The memory must stay mapped until
// unpin returned, and no command that reads it may be in flight then.
// Both are called, as every call into the device, from a goroutine bound
// to it (BindThread). Pinning is by whole pages: a range overlapping pages
// pinned already fails (codes.HostMemoryRegistered). Both backends implement
// it; the simulated device keeps the driver's bookkeeping (overlaps, the
// pinned-memory limit), reading any memory the same way.
type HostPinner interface {
	PinHost(mem []byte) (unpin func() error, err error)
}

// CallValidator is implemented by a device's cuda.Kernels when the device
// cannot run every library call (the simulated device runs a call only
// through its Reference): ValidateFor asks it about each call, so a batch
// is refused before any of it is enqueued.
type CallValidator interface {
	ValidateCall(op string, c *cuda.LibraryCall) error
}

// ValidateFor checks a command against a device before it is enqueued:
// its structure, its kernel (by the device's registry) or library call,
// and every buffer it names (through lookup).
func ValidateFor(op string, cmd cuda.Command, kernels cuda.Kernels, lookup func(cuda.Buffer) error) error {
	if cv, ok := kernels.(CallValidator); ok && cmd.Kind == cuda.KindCall && cmd.LibraryCall != nil {
		if err := cv.ValidateCall(op, cmd.LibraryCall); err != nil {
			return err
		}
	}
	if cmd.Kind == cuda.KindLaunch {
		spec, ok := kernels.Kernel(cmd.Kernel)
		if !ok {
			return cuda.Contractf(op, cuda.ErrUnknownKernel, "kernel %q is not loaded on this device", cmd.Kernel)
		}
		if err := cmd.ValidateLaunch(&spec); err != nil {
			return err
		}
	} else if err := cmd.Validate(); err != nil {
		return err
	}
	return ForRegions(cmd, func(r cuda.Region) error { return lookup(r.Buffer) })
}
