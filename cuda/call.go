// Library calls: one command that runs user code which enqueues device
// work on the stream (a cuBLAS GEMM, an NCCL collective), eagerly or into
// a capture, with the regions it touches declared like a launch's.

package cuda

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// LibraryCall is user code that enqueues device work on a stream, as one
// command (build it with [Call]). The device runs it when the command is
// enqueued: the real device calls Enqueue on the enqueuing thread, with
// the device's context current, and whatever Enqueue puts on the stream is
// the command's work (captured into a graph while the stream captures, so
// it replays like a launch); the simulated device runs Reference, in
// stream order, on the regions' bytes.
//
// Regions must name every byte the work reads or writes: ownership,
// bounds, address scopes and replay keys are checked against them, never
// against what the code does. Enqueue must only enqueue on the stream it
// is given (no synchronization, no allocation: in a capture those
// invalidate it, and the batch then runs eagerly with the capture's
// rejection as its reason).
//
// Failures come back as a *CallError (errors.As) inside a device error,
// and differ by backend as they do in CUDA. Enqueue runs on the host when
// the command is enqueued: its error or panic fails that enqueue (blame
// stream: the lane recovers on a fresh stream, its neighbours are not
// touched). Reference stands for the device work itself: its error or
// panic is that work faulting on the device, a sticky launch failure that
// takes the device out, as a faulting kernel's would (run a tenant's
// untrusted calls on a device of their own). Reference must not block
// (the simulated device runs every stream's work under one execution
// lock) and must not keep mem past its return.
//
// A replay runs what was captured: the work the capturing submission's
// Enqueue put on the stream (on the simulated device, its Reference, as it
// was then). A later submission whose entry replays that executable does
// not call its own Enqueue or Reference at all; so key a call (Params) by
// everything its work depends on, as a launch is keyed by its scalars.
type LibraryCall struct {
	// Name says what the call is, for attribution ("call:sgemm") and
	// errors.
	Name string
	// Regions are every region the work touches, with how.
	Regions []Touch
	// Params are the bytes the work depends on besides its regions (sizes,
	// scalars, transposes): a replay key covers them.
	Params []byte
	// Enqueue puts the work on stream, a CUstream, on the real device.
	Enqueue func(stream uintptr) error
	// Reference is the work's effect on the regions' bytes, in Regions
	// order (then the lane's workspace, when the call declares Workspace),
	// on the simulated device.
	Reference func(mem [][]byte) error

	// Library, when set, is the library whose per-lane state the call
	// needs (a cuBLAS handle, its workspace). Such a call runs only on a
	// lane (package lanes, or the actors scheduler above it): the lane runs
	// the library's Setup once before it enqueues the call, then hands the
	// call its state through EnqueueOn. A stream refuses it directly.
	Library *Library
	// Workspace is how the work touches its lane's workspace of Library
	// (0: not at all). The workspace is a region of the lane's own: the
	// lane adds it to the call's regions, last, so nothing else names it.
	Workspace Access
	// EnqueueOn is Enqueue for a call of a Library: it receives the lane's
	// state of the library (its stream, workspace and what Setup made).
	// Set it instead of Enqueue.
	EnqueueOn func(lane LibraryLane) error
}

// Library is a library's per-lane state: what each lane makes for it
// before it enqueues any of its calls (a cuBLAS handle and its
// workspace: one per stream, made outside any capture, since creating one
// allocates), handed to every call of it on that lane, and released when
// the lane is rebuilt or stops. Declare one value per library and set it
// as the LibraryCall.Library of each of its calls: a lane keys the state
// by the pointer.
type Library struct {
	// Name names the library in errors and counters ("cublas").
	Name string
	// WorkspaceBytes, when not zero, is the device memory each lane
	// allocates for the library, counted as the lane's, kept until the
	// lane stops (a rebuild keeps it: executables captured before it
	// still point into it), handed to Setup and to each call as
	// LibraryLane.Workspace. At most MaxWorkspaceBytes. It is scratch
	// shared by every call of the library on that lane, whichever tenant
	// submitted it (as cuBLAS's own pool is): a call can rely on nothing
	// being in it, and whatever a call leaves there the next call on the
	// lane can read, so never keep a tenant's data in it.
	WorkspaceBytes uint64
	// Setup makes the lane's state of the library, on the lane's bound
	// thread with the device's context current, before the lane enqueues
	// any call of it, and again after the lane was rebuilt on a fresh
	// stream. It may synchronize and allocate (nothing is capturing on
	// the lane). Its result is LibraryLane.State in every call on the
	// lane. An error or panic refuses the submission that needed it
	// (lanes.ErrLibrarySetup), and the next one tries again. nil: no
	// state beyond the workspace.
	Setup func(lane LibraryLane) (any, error)
	// Teardown releases what Setup made, on the lane's thread, when the
	// lane is rebuilt or stops (or the device is lost: then the library's
	// own calls may fail, and their errors are dropped). It may wait for
	// the device (cuBLAS's does): while the device still runs a hung
	// kernel, the scheduler skips it and leaves the state to the device's
	// close. nil: nothing to release.
	Teardown func(lane LibraryLane) error
}

// MaxWorkspaceBytes bounds one library's per-lane workspace (4 GiB).
const MaxWorkspaceBytes = 4 << 30

// LibraryLane is one lane's state of a library, as Setup, Teardown and
// every call's EnqueueOn receive it.
type LibraryLane struct {
	// Lane is the lane's id.
	Lane int
	// Stream is the lane's CUstream on the real device (what Enqueue
	// would get); 0 on the simulated device.
	Stream uintptr
	// Workspace is the lane's workspace of the library (the zero Region
	// when the library declares none).
	Workspace Region
	// State is what Setup returned on this lane (nil in Setup itself).
	State any
}

// Validate checks a library's declaration.
func (lib *Library) Validate() error {
	const op = "library"
	switch {
	case lib == nil:
		return contractf(op, ErrInvalidCommand, "no library")
	case !ValidCallName(lib.Name):
		return contractf(op, ErrInvalidCommand, "library name %.40q: a name is 1 to %d bytes of printable UTF-8 characters without spaces", lib.Name, MaxKernelName)
	case lib.WorkspaceBytes > MaxWorkspaceBytes:
		return contractf(op, ErrInvalidCommand, "library %q asks %d bytes of workspace per lane; at most %d", lib.Name, lib.WorkspaceBytes, uint64(MaxWorkspaceBytes))
	}
	return nil
}

// MaxCallRegions is the most regions one library call may declare.
const MaxCallRegions = 64

// workspaceRegions is 1 when the call touches its lane's workspace.
func workspaceRegions(lc *LibraryCall) int {
	if lc.Workspace != 0 {
		return 1
	}
	return 0
}

// Call builds a library-call command: a name, at least one region, each
// valid with a declared access, and at least one of Enqueue (the real
// device needs it) and Reference (the simulated device needs it).
func Call(lc *LibraryCall) (Command, error) {
	c := Command{Kind: KindCall, LibraryCall: lc}
	return c, c.Validate()
}

// ValidCallName reports whether name can name a library call: 1 to
// MaxKernelName bytes of printable UTF-8 characters without spaces.
func ValidCallName(name string) bool {
	return name != "" && len(name) <= MaxKernelName && utf8.ValidString(name) &&
		!strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) })
}

// validateCall checks a library call's declaration.
func (c Command) validateCall() error {
	const op = "call"
	lc := c.LibraryCall
	switch {
	case lc == nil:
		return contractf(op, ErrInvalidCommand, "a call command carries no LibraryCall; build it with cuda.Call")
	case lc.Name == "":
		return contractf(op, ErrInvalidCommand, "the library call has no name; name it so attribution and errors can say which call it is")
	case !ValidCallName(lc.Name):
		return contractf(op, ErrInvalidCommand, "library call name %.40q: a name is 1 to %d bytes of printable UTF-8 characters without spaces", lc.Name, MaxKernelName)
	case len(lc.Regions) == 0 && lc.Workspace == 0:
		return contractf(op, ErrInvalidCommand, "library call %q declares no regions; declare every region its work reads or writes", lc.Name)
	case len(lc.Regions)+workspaceRegions(lc) > MaxCallRegions:
		return contractf(op, ErrInvalidCommand, "library call %q declares %d regions; at most %d (its workspace counts as one)", lc.Name, len(lc.Regions)+workspaceRegions(lc), MaxCallRegions)
	case lc.Library == nil && (lc.Workspace != 0 || lc.EnqueueOn != nil):
		return contractf(op, ErrInvalidCommand, "library call %q declares a workspace or EnqueueOn but no Library; set Library, whose per-lane state they are", lc.Name)
	case lc.Library != nil && lc.Enqueue != nil:
		return contractf(op, ErrInvalidCommand, "library call %q of library %q sets Enqueue; set EnqueueOn, which receives the lane's state of the library", lc.Name, lc.Library.Name)
	case lc.Enqueue == nil && lc.EnqueueOn == nil && lc.Reference == nil:
		return contractf(op, ErrInvalidCommand, "library call %q has neither Enqueue (the real device's) nor Reference (the simulated device's)", lc.Name)
	}
	if lc.Library != nil {
		if err := lc.Library.Validate(); err != nil {
			return err
		}
		if lc.Workspace != 0 && lc.Library.WorkspaceBytes == 0 {
			return contractf(op, ErrInvalidCommand, "library call %q touches its lane's workspace, but library %q declares none (WorkspaceBytes is 0)", lc.Name, lc.Library.Name)
		}
		if lc.Workspace != 0 && !lc.Workspace.Valid() {
			return contractf(op, ErrInvalidCommand, "library call %q declares workspace access %d; say AccessRead, AccessWrite or AccessReadWrite", lc.Name, lc.Workspace)
		}
	}
	for i, t := range lc.Regions {
		if err := t.Region.Validate(); err != nil {
			return err
		}
		if !t.Access.Valid() {
			return contractf(op, ErrInvalidCommand, "library call %q region %d declares access %d; say AccessRead, AccessWrite or AccessReadWrite", lc.Name, i, t.Access)
		}
	}
	return nil
}

// CallError is user code's own failure: a library call's Enqueue or
// Reference, or a kernel's Go reference, returned an error or panicked.
// Kind says which ("library call" or "kernel"), Name its name, Err what it
// returned (or the panic, as an error). errors.Is reaches Err too, but what
// the failure means for the lane and the device is the enclosing error's
// code (cuda.Classify: a sticky launch failure for a reference, a driver
// error for an Enqueue), whatever Err says: a reference that returns
// ErrOutOfMemory still poisoned its device.
type CallError struct {
	Kind     string
	Name     string
	Panicked bool
	Err      error
}

// Error says which code failed and how.
func (e *CallError) Error() string {
	if e.Panicked {
		return fmt.Sprintf("%s %q panicked: %v", e.Kind, e.Name, e.Err)
	}
	return fmt.Sprintf("%s %q failed: %v", e.Kind, e.Name, e.Err)
}

// Unwrap returns what the call returned.
func (e *CallError) Unwrap() error { return e.Err }
