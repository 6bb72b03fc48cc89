package cuda

import (
	"errors"
	"fmt"
)

// Code is a stable error code. Driver codes carry the numbers of CUDA's
// CUresult so the simulated and real devices report the same code for the
// same failure; [CodeContract] marks a caller's mistake caught before any
// work reached the device.
type Code int32

// The codes the backends report. The numbers are CUresult's.
const (
	CodeContract                 Code = -1
	CodeSuccess                  Code = 0
	CodeInvalidValue             Code = 1
	CodeOutOfMemory              Code = 2
	CodeNotInitialized           Code = 3
	CodeDeinitialized            Code = 4
	CodeInvalidContext           Code = 201
	CodeInvalidHandle            Code = 400
	CodeIllegalState             Code = 401
	CodeNotFound                 Code = 500
	CodeNotReady                 Code = 600
	CodeIllegalAddress           Code = 700
	CodeLaunchOutOfResources     Code = 701
	CodeLaunchTimeout            Code = 702
	CodeHardwareStackError       Code = 714
	CodeIllegalInstruction       Code = 715
	CodeMisalignedAddress        Code = 716
	CodeInvalidAddressSpace      Code = 717
	CodeInvalidPC                Code = 718
	CodeLaunchFailed             Code = 719
	CodeStreamCaptureUnsupported Code = 900
	CodeStreamCaptureInvalidated Code = 901
	CodeStreamCaptureMerge       Code = 902
	CodeStreamCaptureUnmatched   Code = 903
	CodeStreamCaptureUnjoined    Code = 904
	CodeStreamCaptureIsolation   Code = 905
	CodeStreamCaptureImplicit    Code = 906
	CodeStreamCaptureWrongThread Code = 908
	CodeGraphExecUpdateFailure   Code = 910
	CodeUnknown                  Code = 999
)

var codeNames = map[Code]string{
	CodeContract:                 "cuda_runtime_contract",
	CodeSuccess:                  "cuda_success",
	CodeInvalidValue:             "cuda_invalid_value",
	CodeOutOfMemory:              "cuda_out_of_memory",
	CodeNotInitialized:           "cuda_not_initialized",
	CodeDeinitialized:            "cuda_deinitialized",
	CodeInvalidContext:           "cuda_invalid_context",
	CodeInvalidHandle:            "cuda_invalid_handle",
	CodeIllegalState:             "cuda_illegal_state",
	CodeNotFound:                 "cuda_not_found",
	CodeNotReady:                 "cuda_not_ready",
	CodeIllegalAddress:           "cuda_illegal_address",
	CodeLaunchOutOfResources:     "cuda_launch_out_of_resources",
	CodeLaunchTimeout:            "cuda_launch_timeout",
	CodeHardwareStackError:       "cuda_hardware_stack_error",
	CodeIllegalInstruction:       "cuda_illegal_instruction",
	CodeMisalignedAddress:        "cuda_misaligned_address",
	CodeInvalidAddressSpace:      "cuda_invalid_address_space",
	CodeInvalidPC:                "cuda_invalid_pc",
	CodeLaunchFailed:             "cuda_launch_failed",
	CodeStreamCaptureUnsupported: "cuda_stream_capture_unsupported",
	CodeStreamCaptureInvalidated: "cuda_stream_capture_invalidated",
	CodeStreamCaptureMerge:       "cuda_stream_capture_merge",
	CodeStreamCaptureUnmatched:   "cuda_stream_capture_unmatched",
	CodeStreamCaptureUnjoined:    "cuda_stream_capture_unjoined",
	CodeStreamCaptureIsolation:   "cuda_stream_capture_isolation",
	CodeStreamCaptureImplicit:    "cuda_stream_capture_implicit",
	CodeStreamCaptureWrongThread: "cuda_stream_capture_wrong_thread",
	CodeGraphExecUpdateFailure:   "cuda_graph_exec_update_failure",
	CodeUnknown:                  "cuda_driver_error",
}

// String returns the stable snake_case name of the code, such as
// "cuda_out_of_memory"; codes without a name print as "cuda_driver_error_N".
func (c Code) String() string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return fmt.Sprintf("cuda_driver_error_%d", int32(c))
}

// Sticky reports whether the code poisons the device's context: after it,
// every call on every stream of the device fails, and only a new context
// (a new device instance) recovers.
func (c Code) Sticky() bool {
	switch c {
	case CodeIllegalAddress, CodeLaunchTimeout, CodeHardwareStackError, CodeIllegalInstruction,
		CodeMisalignedAddress, CodeInvalidAddressSpace, CodeInvalidPC, CodeLaunchFailed:
		return true
	}
	return false
}

// Retryable reports whether the same work may succeed if tried again later,
// with nothing changed but time (memory freed elsewhere, a queue drained).
func (c Code) Retryable() bool {
	return c == CodeOutOfMemory || c == CodeNotReady || c == CodeLaunchOutOfResources
}

// Error is every error a backend returns. Op names the operation that failed,
// Code classifies it. A contract violation (the caller's mistake, caught
// before anything was enqueued) has Code [CodeContract] and wraps one of the
// Err sentinels below, so errors.Is(err, cuda.ErrOutOfBounds) works. A driver
// error matches the code sentinels: errors.Is(err, cuda.ErrOutOfMemory).
type Error struct {
	Op        string // the operation that failed, e.g. "alloc", "enqueue", "end capture"
	Code      Code   // the stable code
	Sticky    bool   // the device's context is poisoned; every later call fails
	Retryable bool   // the same call may succeed later
	Detail    string // what was wrong and how to fix it
	Contract  error  // for CodeContract: the sentinel that names the violation
}

// Error formats the error as "cuda: op: code: detail".
func (e *Error) Error() string {
	msg := "cuda: " + e.Op + ": " + e.Code.String()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the contract sentinel, if any.
func (e *Error) Unwrap() error { return e.Contract }

// Is matches a code sentinel such as [ErrOutOfMemory] by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Code == e.Code && t.Code != CodeContract
}

// Contract sentinels: the caller's mistakes, caught at the boundary.
var (
	ErrOutOfBounds    = errors.New("cuda: region out of bounds")
	ErrEmptyRegion    = errors.New("cuda: empty region")
	ErrForeignHandle  = errors.New("cuda: handle belongs to another device instance")
	ErrStaleHandle    = errors.New("cuda: handle was freed or destroyed")
	ErrElementType    = errors.New("cuda: element type mismatch")
	ErrKernelArity    = errors.New("cuda: wrong number of kernel arguments")
	ErrUnknownKernel  = errors.New("cuda: unknown kernel")
	ErrLaunchConfig   = errors.New("cuda: invalid launch configuration")
	ErrInvalidCommand = errors.New("cuda: invalid command")
	ErrAlignment      = errors.New("cuda: invalid alignment")
	ErrEncoding       = errors.New("cuda: malformed command encoding")
	ErrDeviceClosed   = errors.New("cuda: device closed")
	ErrThreadNotBound = errors.New("cuda: calling thread is not bound to the device")
)

// Code sentinels: match driver errors by code with errors.Is.
var (
	ErrOutOfMemory        = &Error{Code: CodeOutOfMemory}
	ErrIllegalAddress     = &Error{Code: CodeIllegalAddress}
	ErrLaunchFailed       = &Error{Code: CodeLaunchFailed}
	ErrLaunchResources    = &Error{Code: CodeLaunchOutOfResources}
	ErrIllegalState       = &Error{Code: CodeIllegalState}
	ErrInvalidHandle      = &Error{Code: CodeInvalidHandle}
	ErrCaptureUnsupported = &Error{Code: CodeStreamCaptureUnsupported}
	ErrCaptureInvalidated = &Error{Code: CodeStreamCaptureInvalidated}
	ErrDeinitialized      = &Error{Code: CodeDeinitialized}
	ErrUpdateRefused      = &Error{Code: CodeGraphExecUpdateFailure}
)

// Contractf builds a contract error: sentinel names the violation, the
// formatted detail says what was wrong and how to fix it. Backends use it to
// reject bad input the same way this package does.
func Contractf(op string, sentinel error, format string, args ...any) *Error {
	return contractf(op, sentinel, format, args...)
}

func contractf(op string, sentinel error, format string, args ...any) *Error {
	return &Error{Op: op, Code: CodeContract, Contract: sentinel, Detail: fmt.Sprintf(format, args...)}
}

// DriverError builds the error for a failed device call, classifying the
// code as sticky and retryable from CUDA's documented behaviour.
func DriverError(op string, code Code, detail string) *Error {
	return &Error{Op: op, Code: code, Sticky: code.Sticky(), Retryable: code.Retryable(), Detail: detail}
}

// Report is an error described for callers, logs and spans, in the spirit of
// a runtime's describe_error: a stable code, the message, and what a caller
// may do about it.
type Report struct {
	Code      string // stable snake_case code, e.g. "cuda_out_of_memory"
	Message   string
	Retryable bool
	Sticky    bool
}

// Describe classifies any error. Errors that are not a [*Error] (a panic
// recovered in a provider, say) are reported as "cuda_unclassified", neither
// retryable nor sticky.
func Describe(err error) Report {
	if err == nil {
		return Report{Code: CodeSuccess.String()}
	}
	var e *Error
	if errors.As(err, &e) {
		return Report{Code: e.Code.String(), Message: err.Error(), Retryable: e.Retryable, Sticky: e.Sticky}
	}
	return Report{Code: "cuda_unclassified", Message: err.Error()}
}

// IsSticky reports whether err poisons the device it came from.
func IsSticky(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Sticky
}

// IsRetryable reports whether the call that returned err may succeed later.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Retryable
}
