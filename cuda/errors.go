// The device's errors: Error with its Code and operation, sentinels, and
// contract violations.

package cuda

import (
	"fmt"

	"github.com/lanesched/lanes/internal/codes"
)

// Error is every error a backend returns. Op names the operation that failed,
// Code classifies it. A contract violation (the caller's mistake, caught
// before anything was enqueued) has the code runtime_contract and wraps one of the
// Err sentinels below, so errors.Is(err, cuda.ErrOutOfBounds) works. A driver
// error matches the code sentinels: errors.Is(err, cuda.ErrOutOfMemory).
type Error struct {
	Op        string // the operation that failed, e.g. "alloc", "enqueue", "end capture"
	Code      Code   // the stable code
	Sticky    bool   // the device's context is poisoned; every later call fails
	Retryable bool   // the same call may succeed later
	Detail    string // what was wrong and how to fix it
	Contract  error  // what it wraps: for runtime_contract the sentinel that names the violation; for a library call's failure its *CallError
}

// Error formats the error as "cuda: op: code: detail" (a code sentinel,
// with no op: "cuda: code").
func (e *Error) Error() string {
	msg := "cuda: " + e.Code.String()
	if e.Op != "" {
		msg = "cuda: " + e.Op + ": " + e.Code.String()
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the contract sentinel or the library call's error, if any.
func (e *Error) Unwrap() error { return e.Contract }

// Class classifies the error: a contract violation is the caller's and was
// refused before anything ran; a driver error is classified by its code.
func (e *Error) Class() Class {
	c := e.Code.Class()
	c.Retryable = c.Retryable || e.Retryable
	c.Sticky = c.Sticky || e.Sticky
	if c.Sticky {
		c.Blame = BlameDevice
	}
	return c
}

// Is matches a code sentinel such as [ErrOutOfMemory] by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Code == e.Code && t.Code != codes.RuntimeContract
}

// Contract sentinels: the caller's mistakes, caught at the boundary. A
// contract *Error wraps one, so errors.Is finds it; alone, each classifies
// as the caller's error.
var (
	ErrOutOfBounds    = codes.NewSentinel(codes.RuntimeContract, "cuda: region out of bounds")
	ErrEmptyRegion    = codes.NewSentinel(codes.RuntimeContract, "cuda: empty region")
	ErrForeignHandle  = codes.NewSentinel(codes.RuntimeContract, "cuda: handle belongs to another device instance")
	ErrStaleHandle    = codes.NewSentinel(codes.RuntimeContract, "cuda: handle was freed or destroyed")
	ErrElementType    = codes.NewSentinel(codes.RuntimeContract, "cuda: element type mismatch")
	ErrKernelArity    = codes.NewSentinel(codes.RuntimeContract, "cuda: wrong number of kernel arguments")
	ErrUnknownKernel  = codes.NewSentinel(codes.RuntimeContract, "cuda: unknown kernel")
	ErrLaunchConfig   = codes.NewSentinel(codes.RuntimeContract, "cuda: invalid launch configuration")
	ErrInvalidCommand = codes.NewSentinel(codes.RuntimeContract, "cuda: invalid command")
	ErrAlignment      = codes.NewSentinel(codes.RuntimeContract, "cuda: invalid alignment")
	ErrDeviceClosed   = codes.NewSentinel(codes.RuntimeContract, "cuda: device closed")
	ErrThreadNotBound = codes.NewSentinel(codes.RuntimeContract, "cuda: calling thread is not bound to the device")
)

// Code sentinels: match driver errors by code with errors.Is.
var (
	ErrOutOfMemory        = &Error{Code: codes.OutOfMemory}
	ErrIllegalAddress     = &Error{Code: codes.IllegalAddress}
	ErrLaunchFailed       = &Error{Code: codes.LaunchFailed}
	ErrLaunchResources    = &Error{Code: codes.LaunchOutOfResources}
	ErrIllegalState       = &Error{Code: codes.IllegalState}
	ErrInvalidHandle      = &Error{Code: codes.InvalidHandle}
	ErrCaptureUnsupported = &Error{Code: codes.StreamCaptureUnsupported}
	ErrCaptureInvalidated = &Error{Code: codes.StreamCaptureInvalidated}
	ErrDeinitialized      = &Error{Code: codes.Deinitialized}
	ErrUpdateRefused      = &Error{Code: codes.GraphExecUpdateFailure}
)

// Contractf builds a contract error: sentinel names the violation, the
// formatted detail says what was wrong and how to fix it. Backends use it to
// reject bad input the same way this package does.
func Contractf(op string, sentinel error, format string, args ...any) *Error {
	return contractf(op, sentinel, format, args...)
}

func contractf(op string, sentinel error, format string, args ...any) *Error {
	return &Error{Op: op, Code: codes.RuntimeContract, Contract: sentinel, Detail: fmt.Sprintf(format, args...)}
}
