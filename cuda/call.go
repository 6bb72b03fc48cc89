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
	// order, on the simulated device.
	Reference func(mem [][]byte) error
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
	case len(lc.Regions) == 0:
		return contractf(op, ErrInvalidCommand, "library call %q declares no regions; declare every region its work reads or writes", lc.Name)
	case len(lc.Regions) > 64:
		return contractf(op, ErrInvalidCommand, "library call %q declares %d regions; at most 64", lc.Name, len(lc.Regions))
	case lc.Enqueue == nil && lc.Reference == nil:
		return contractf(op, ErrInvalidCommand, "library call %q has neither Enqueue (the real device's) nor Reference (the simulated device's)", lc.Name)
	}
	for i, t := range lc.Regions {
		if err := t.Region.Validate(); err != nil {
			return err
		}
		if t.Access != AccessRead && t.Access != AccessWrite && t.Access != AccessReadWrite {
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

// RunCall runs f, user code of kind ("library call" for a call's Enqueue
// or Reference, "kernel" for a kernel's Go reference) named name, turning
// an error or a panic into a *CallError wrapped in a device error of code:
// a backend's one way to run user code, so that no panic of it escapes
// into the device.
func RunCall(op string, code Code, kind, name string, f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			ce := &CallError{Kind: kind, Name: name, Panicked: true, Err: fmt.Errorf("%v", p)}
			e := DriverError(op, code, ce.Error())
			e.Contract = ce
			err = e
		}
	}()
	if fe := f(); fe != nil {
		ce := &CallError{Kind: kind, Name: name, Err: fe}
		e := DriverError(op, code, ce.Error())
		e.Contract = ce
		return e
	}
	return nil
}
