// Error classification: every error's stable Code, its Blame, whether it
// is retryable and whether anything was submitted.

package cuda

// The one error vocabulary of lanes: every error any package returns is
// classified here, once, by a stable Code, who is to blame, whether trying
// again may help, and whether the work was submitted at all.

import (
	"context"
	"errors"
	"fmt"
)

// Code is the stable code of every error lanes reports, of every package.
// Codes from zero up are CUDA's CUresult numbers, so the simulated and real
// devices report the same code for the same failure; negative codes are
// lanes' own conditions, grouped by the layer that raises them. A code's
// [Code.String] is its stable snake_case name, the one spans, metrics and
// reports carry: an int and a string are one vocabulary.
type Code int32

// Driver codes: the numbers are CUresult's.
const (
	CodeOK                       Code = 0
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
	CodeHostMemoryRegistered     Code = 712
	CodeHostMemoryNotRegistered  Code = 713
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
	CodeDriverError              Code = 999
)

// lanes' own codes. The device boundary's: a contract violation, caught
// before any work reached the device.
const (
	CodeRuntimeContract Code = -1
	// CodeUninitializedRead: work read device memory that was never
	// written (reported by the simulated device under its InitCheck, as
	// compute-sanitizer's initcheck reports it; a GPU reads whatever the
	// memory holds). The work ran: a stream's error, not sticky.
	CodeUninitializedRead Code = -2
)

// The lane core's codes (package lanes and the cache and programs below it).
const (
	CodeBatchInvalid        Code = -100 // the batch is malformed
	CodeComputePathUnmet    Code = -101 // its compute-path requirement cannot be met
	CodeBindingPatchInvalid Code = -102 // a program-binding patch is malformed
	CodeProgramInvalid      Code = -103 // a program reference or registration is wrong
	CodePreparationInvalid  Code = -104 // the cache's preparation lifecycle forbids it
	CodeReadbackInvalid     Code = -105 // a readback's layout does not match
	CodeUnknownFence        Code = -106 // a fence that is not pending
	CodeStagedInputInvalid  Code = -107 // staged inputs or index maps are wrong
	CodeLaneNotQuiescent    Code = -110 // the lane has work in flight; retry once it drains
	CodeLaneFailed          Code = -111 // the lane had failed: nothing was submitted
	CodeCaptureFailed       Code = -112 // a capture left the stream untrustworthy
	CodeProviderPanic       Code = -113 // a provider's code panicked during an enqueue
	CodeLibrarySetupFailed  Code = -114 // a library's per-lane Setup failed: nothing was submitted
)

// The scheduler's codes (package actors).
const (
	CodeOverloaded      Code = -200 // admission is full; retry later
	CodeStopped         Code = -201 // the scheduler is stopping or stopped
	CodeNoHealthyLane   Code = -202 // no lane can take the batch now
	CodeLaneUnavailable Code = -203 // the lane left routing before taking the batch
	CodeLaneHung        Code = -204 // a lane's kernel did not finish in time
	CodeNotYours        Code = -205 // the batch names another tenant's buffer or program
	CodeTenantInvalid   Code = -206 // the tenant name is empty or absurd
	CodeTenantSuspended Code = -207 // the tenant keeps faulting lanes and is suspended
	CodeTenantBusy      Code = -208 // the tenant still has work in flight
	CodeUnknownLane     Code = -209 // no lane has that index
	CodeIndeterminate   Code = -210 // the work's effect is unknown
	CodeInvalidArgument Code = -211 // a call's argument or configuration is unusable
	CodeBatchTooLarge   Code = -212 // the batch exceeds the scheduler's bounds; split it
	CodeProgramLimit    Code = -213 // the tenant, or the scheduler, holds as many program names as allowed
)

// The lane hosts' codes (package remote): a front and its hosts.
const (
	CodeHostLost            Code = -400 // the lane host was lost with the work in flight: it may or may not have run
	CodeDeviceStateLost     Code = -401 // the tenant's device state went with its host: set up again
	CodeNoHost              Code = -402 // no lane host serves now; retry later
	CodeHostLeaving         Code = -403 // the tenant's host is leaving; move once it left
	CodeRegistrationRefused Code = -404 // a host and a front refused each other at registration
	CodeWireUnsupported     Code = -405 // what the batch carries does not cross to a lane host
	CodeUnauthenticated     Code = -406 // the peer did not hold the credential (token, certificate)
)

// Codes of errors from outside lanes.
const (
	CodeCanceled         Code = -300 // the caller's context was canceled
	CodeDeadlineExceeded Code = -301 // the caller's context expired
	// CodeWithdrawn: the batch was admitted, then its context ended before
	// a lane took it, so it never ran (not submitted). An admission refused
	// for a context already done is canceled or deadline_exceeded instead.
	CodeWithdrawn Code = -302
	// CodeDetached: the caller stopped waiting (its context ended) for a
	// batch that was admitted; the batch goes on and ends on its own
	// (actors.DetachedError.Pending), so whether it ran is not known yet.
	CodeDetached     Code = -303
	CodeUnclassified Code = -999 // an error lanes does not know (a bug: report it)
)

// Blame is whose failure an error is. It alone decides the consequence (the
// table is in package actors' documentation): a caller's error changes no
// lane's health; a stream's recovers the lane; a device's takes every lane
// of the device out.
type Blame uint8

// Blames.
const (
	// BlameNone: not a failure of anything (success, capacity, shutdown,
	// or the caller's own cancellation).
	BlameNone Blame = iota
	// BlameCaller: the request is wrong (a contract or validation error),
	// caught before any of its work reached the device. Fix it and retry.
	BlameCaller
	// BlameStream: a non-sticky device error after work began: the stream
	// that ran it is suspect, the device is fine.
	BlameStream
	// BlameDevice: a sticky error poisoned the device (on a real GPU, the
	// process's CUDA state): every stream of it fails from now on.
	BlameDevice
)

// String names the blame.
func (b Blame) String() string {
	return [...]string{"none", "caller", "stream", "device", "unknown"}[min(int(b), 4)]
}

// Class is an error classified: what every caller, log line and span needs.
type Class struct {
	Code  Code
	Blame Blame
	// Retryable: the same request may succeed later with nothing changed
	// but time (memory freed elsewhere, admission drained, a lane back).
	Retryable bool
	// Sticky: the device is poisoned.
	Sticky bool
	// NotSubmitted: nothing of the request reached a device ("definitely
	// not submitted"): it may be fixed and resubmitted, or sent elsewhere.
	// False means some of it may have run.
	NotSubmitted bool
}

type codeInfo struct {
	name      string
	blame     Blame
	retryable bool
	refused   bool // the request was refused before anything ran
}

var codes = map[Code]codeInfo{
	CodeOK:                       {"ok", BlameNone, false, false},
	CodeInvalidValue:             {"cuda_invalid_value", BlameStream, false, false},
	CodeOutOfMemory:              {"cuda_out_of_memory", BlameStream, true, false},
	CodeNotInitialized:           {"cuda_not_initialized", BlameStream, false, false},
	CodeDeinitialized:            {"cuda_deinitialized", BlameStream, false, false},
	CodeInvalidContext:           {"cuda_invalid_context", BlameStream, false, false},
	CodeInvalidHandle:            {"cuda_invalid_handle", BlameStream, false, false},
	CodeIllegalState:             {"cuda_illegal_state", BlameStream, false, false},
	CodeNotFound:                 {"cuda_not_found", BlameStream, false, false},
	CodeNotReady:                 {"cuda_not_ready", BlameStream, true, false},
	CodeIllegalAddress:           {"cuda_illegal_address", BlameDevice, false, false},
	CodeLaunchOutOfResources:     {"cuda_launch_out_of_resources", BlameStream, true, false},
	CodeLaunchTimeout:            {"cuda_launch_timeout", BlameDevice, false, false},
	CodeHardwareStackError:       {"cuda_hardware_stack_error", BlameDevice, false, false},
	CodeIllegalInstruction:       {"cuda_illegal_instruction", BlameDevice, false, false},
	CodeHostMemoryRegistered:     {"cuda_host_memory_already_registered", BlameCaller, false, true},
	CodeHostMemoryNotRegistered:  {"cuda_host_memory_not_registered", BlameCaller, false, true},
	CodeMisalignedAddress:        {"cuda_misaligned_address", BlameDevice, false, false},
	CodeInvalidAddressSpace:      {"cuda_invalid_address_space", BlameDevice, false, false},
	CodeInvalidPC:                {"cuda_invalid_pc", BlameDevice, false, false},
	CodeLaunchFailed:             {"cuda_launch_failed", BlameDevice, false, false},
	CodeStreamCaptureUnsupported: {"cuda_stream_capture_unsupported", BlameStream, false, false},
	CodeStreamCaptureInvalidated: {"cuda_stream_capture_invalidated", BlameStream, false, false},
	CodeStreamCaptureMerge:       {"cuda_stream_capture_merge", BlameStream, false, false},
	CodeStreamCaptureUnmatched:   {"cuda_stream_capture_unmatched", BlameStream, false, false},
	CodeStreamCaptureUnjoined:    {"cuda_stream_capture_unjoined", BlameStream, false, false},
	CodeStreamCaptureIsolation:   {"cuda_stream_capture_isolation", BlameStream, false, false},
	CodeStreamCaptureImplicit:    {"cuda_stream_capture_implicit", BlameStream, false, false},
	CodeStreamCaptureWrongThread: {"cuda_stream_capture_wrong_thread", BlameStream, false, false},
	CodeGraphExecUpdateFailure:   {"cuda_graph_exec_update_failure", BlameStream, false, false},
	CodeDriverError:              {"cuda_driver_error", BlameStream, false, false},

	CodeRuntimeContract: {"cuda_runtime_contract", BlameCaller, false, true},

	CodeBatchInvalid:        {"batch_invalid", BlameCaller, false, true},
	CodeComputePathUnmet:    {"compute_path_unmet", BlameCaller, false, true},
	CodeBindingPatchInvalid: {"binding_patch_invalid", BlameCaller, false, true},
	CodeProgramInvalid:      {"program_invalid", BlameCaller, false, true},
	CodePreparationInvalid:  {"preparation_invalid", BlameCaller, false, true},
	CodeReadbackInvalid:     {"readback_invalid", BlameCaller, false, true},
	CodeUnknownFence:        {"unknown_fence", BlameCaller, false, true},
	CodeStagedInputInvalid:  {"staged_input_invalid", BlameCaller, false, true},
	CodeLaneNotQuiescent:    {"lane_not_quiescent", BlameNone, true, true},
	CodeLaneFailed:          {"lane_failed", BlameStream, true, true},
	CodeCaptureFailed:       {"capture_failed", BlameStream, false, false},
	CodeProviderPanic:       {"provider_panic", BlameStream, false, false},
	CodeLibrarySetupFailed:  {"library_setup_failed", BlameCaller, true, true},

	CodeOverloaded:      {"overloaded", BlameNone, true, true},
	CodeStopped:         {"stopped", BlameNone, false, true},
	CodeNoHealthyLane:   {"no_healthy_lane", BlameNone, true, true},
	CodeLaneUnavailable: {"lane_unavailable", BlameNone, true, true},
	CodeLaneHung:        {"lane_hung", BlameStream, false, false},
	CodeNotYours:        {"not_yours", BlameCaller, false, true},
	CodeTenantInvalid:   {"tenant_invalid", BlameCaller, false, true},
	CodeTenantSuspended: {"tenant_suspended", BlameCaller, true, true},
	CodeTenantBusy:      {"tenant_busy", BlameNone, true, true},
	CodeUnknownLane:     {"unknown_lane", BlameCaller, false, true},
	CodeIndeterminate:   {"indeterminate", BlameStream, false, false},
	CodeInvalidArgument: {"invalid_argument", BlameCaller, false, true},
	CodeBatchTooLarge:   {"batch_too_large", BlameCaller, false, true},
	CodeProgramLimit:    {"program_limit", BlameCaller, false, true},

	CodeHostLost:            {"host_lost", BlameStream, false, false},
	CodeDeviceStateLost:     {"device_state_lost", BlameNone, false, true},
	CodeNoHost:              {"no_host", BlameNone, true, true},
	CodeHostLeaving:         {"host_leaving", BlameNone, true, true},
	CodeRegistrationRefused: {"registration_refused", BlameNone, false, true},
	CodeWireUnsupported:     {"wire_unsupported", BlameCaller, false, true},
	CodeUnauthenticated:     {"unauthenticated", BlameCaller, false, true},

	CodeUninitializedRead: {"uninitialized_read", BlameStream, false, false},

	CodeCanceled:         {"canceled", BlameNone, false, false},
	CodeDeadlineExceeded: {"deadline_exceeded", BlameNone, false, false},
	CodeWithdrawn:        {"withdrawn", BlameNone, false, true},
	CodeDetached:         {"detached", BlameNone, false, false},
	CodeUnclassified:     {"unclassified", BlameNone, false, false},
}

// String returns the stable snake_case name of the code, such as
// "cuda_out_of_memory" or "overloaded"; unknown driver codes print as
// "cuda_driver_error_N".
func (c Code) String() string {
	if info, ok := codes[c]; ok {
		return info.name
	}
	return fmt.Sprintf("cuda_driver_error_%d", int32(c))
}

// Sticky reports whether the code poisons the device's context: after it,
// every call on every stream of the device fails, and only a new context
// (a new device instance) recovers.
func (c Code) Sticky() bool { return c.Class().Sticky }

// Retryable reports whether the same request may succeed if tried again
// later, with nothing changed but time.
func (c Code) Retryable() bool { return codes[c].retryable }

// Class is the code's classification when nothing more is known: its
// blame, whether it is retryable and sticky, and whether an error of this
// code means the request was refused before anything ran. Unknown driver
// codes are the stream's.
func (c Code) Class() Class {
	info, ok := codes[c]
	if !ok {
		info.blame = BlameStream
	}
	return Class{Code: c, Blame: info.blame, Retryable: info.retryable, Sticky: info.blame == BlameDevice, NotSubmitted: info.refused}
}

// classifier is implemented by every error type of lanes that knows its
// class: [*Error], [*Sentinel] and the typed errors of the packages above.
type classifier interface{ Class() Class }

// Classify classifies any error, in one place for every package: the
// outermost error in the chain that knows its class decides (a lane's
// *lanes.Error, which says whether the batch was submitted, before the
// device's *Error it wraps). Context errors are the caller's cancellation;
// an error lanes does not know is [CodeUnclassified]. nil is success.
func Classify(err error) Class {
	if err == nil {
		return CodeOK.Class()
	}
	var c classifier
	if errors.As(err, &c) {
		return c.Class()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return CodeCanceled.Class()
	case errors.Is(err, context.DeadlineExceeded):
		return CodeDeadlineExceeded.Class()
	}
	return CodeUnclassified.Class()
}

// Sentinel is a named condition of lanes with a stable code, such as
// actors.ErrOverloaded: errors.Is matches it through any wrapping, and
// [Classify] reports its code's class.
type Sentinel struct {
	code Code
	msg  string
}

// NewSentinel makes a sentinel error of a code. msg carries the package
// prefix ("actors: overloaded").
func NewSentinel(code Code, msg string) *Sentinel { return &Sentinel{code: code, msg: msg} }

// Error returns the message.
func (s *Sentinel) Error() string { return s.msg }

// Class is the class of the sentinel's code.
func (s *Sentinel) Class() Class { return s.code.Class() }

// Code is the sentinel's code.
func (s *Sentinel) Code() Code { return s.code }
