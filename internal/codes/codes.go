// Package codes is the one error vocabulary of lanes: every error any
// package returns is classified here, once, by a stable Code, who is to
// blame, whether trying again may help, and whether the work was
// submitted at all. A user sees Code, Class and Blame through package
// cuda (and the root package); a code is compared by its name
// (Code.String) or through the sentinel that carries it, never by a
// constant of this package.
package codes

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	OK                       Code = 0
	InvalidValue             Code = 1
	OutOfMemory              Code = 2
	NotInitialized           Code = 3
	Deinitialized            Code = 4
	InvalidContext           Code = 201
	InvalidHandle            Code = 400
	IllegalState             Code = 401
	NotFound                 Code = 500
	NotReady                 Code = 600
	IllegalAddress           Code = 700
	LaunchOutOfResources     Code = 701
	LaunchTimeout            Code = 702
	HostMemoryRegistered     Code = 712
	HostMemoryNotRegistered  Code = 713
	HardwareStackError       Code = 714
	IllegalInstruction       Code = 715
	MisalignedAddress        Code = 716
	InvalidAddressSpace      Code = 717
	InvalidPC                Code = 718
	LaunchFailed             Code = 719
	StreamCaptureUnsupported Code = 900
	StreamCaptureInvalidated Code = 901
	StreamCaptureMerge       Code = 902
	StreamCaptureUnmatched   Code = 903
	StreamCaptureUnjoined    Code = 904
	StreamCaptureIsolation   Code = 905
	StreamCaptureImplicit    Code = 906
	StreamCaptureWrongThread Code = 908
	GraphExecUpdateFailure   Code = 910
	DriverError              Code = 999
)

// lanes' own codes. The device boundary's: a contract violation, caught
// before any work reached the device.
const (
	RuntimeContract Code = -1
	// UninitializedRead: work read device memory that was never
	// written (reported by the simulated device under its InitCheck, as
	// compute-sanitizer's initcheck reports it; a GPU reads whatever the
	// memory holds). The work ran: a stream's error, not sticky.
	UninitializedRead Code = -2
)

// The lane core's codes (package lanes and the cache and programs below it).
const (
	BatchInvalid        Code = -100 // the batch is malformed
	ComputePathUnmet    Code = -101 // its compute-path requirement cannot be met
	BindingPatchInvalid Code = -102 // a program-binding patch is malformed
	ProgramInvalid      Code = -103 // a program reference or registration is wrong
	PreparationInvalid  Code = -104 // the cache's preparation lifecycle forbids it
	ReadbackInvalid     Code = -105 // a readback's layout does not match
	UnknownFence        Code = -106 // a fence that is not pending
	StagedInputInvalid  Code = -107 // staged inputs or index maps are wrong
	LaneNotQuiescent    Code = -110 // the lane has work in flight; retry once it drains
	LaneFailed          Code = -111 // the lane had failed: nothing was submitted
	CaptureFailed       Code = -112 // a capture left the stream untrustworthy
	ProviderPanic       Code = -113 // a provider's code panicked during an enqueue
	LibrarySetupFailed  Code = -114 // a library's per-lane Setup failed: nothing was submitted
)

// The scheduler's codes (package actors).
const (
	Overloaded      Code = -200 // admission is full; retry later
	Stopped         Code = -201 // the scheduler is stopping or stopped
	NoHealthyLane   Code = -202 // no lane can take the batch now
	LaneUnavailable Code = -203 // the lane left routing before taking the batch
	LaneHung        Code = -204 // a lane's kernel did not finish in time
	NotYours        Code = -205 // the batch names another tenant's buffer or program
	TenantInvalid   Code = -206 // the tenant name is empty or absurd
	TenantSuspended Code = -207 // the tenant keeps faulting lanes and is suspended
	TenantBusy      Code = -208 // the tenant still has work in flight
	UnknownLane     Code = -209 // no lane has that index
	Indeterminate   Code = -210 // the work's effect is unknown
	InvalidArgument Code = -211 // a call's argument or configuration is unusable
	BatchTooLarge   Code = -212 // the batch exceeds the scheduler's bounds; split it
	ProgramLimit    Code = -213 // the tenant, or the scheduler, holds as many program names as allowed
)

// The lane hosts' codes (package remote): a front and its hosts.
const (
	HostLost            Code = -400 // the lane host was lost with the work in flight: it may or may not have run
	DeviceStateLost     Code = -401 // the tenant's device state went with its host: set up again
	NoHost              Code = -402 // no lane host serves now; retry later
	HostLeaving         Code = -403 // the tenant's host is leaving; move once it left
	RegistrationRefused Code = -404 // a host and a front refused each other at registration
	WireUnsupported     Code = -405 // what the batch carries does not cross to a lane host
	Unauthenticated     Code = -406 // the peer did not hold the credential (token, certificate)
)

// Codes of errors from outside lanes.
const (
	Canceled         Code = -300 // the caller's context was canceled
	DeadlineExceeded Code = -301 // the caller's context expired
	// Withdrawn: the batch was admitted, then its context ended before
	// a lane took it, so it never ran (not submitted). An admission refused
	// for a context already done is canceled or deadline_exceeded instead.
	Withdrawn Code = -302
	// Detached: the caller stopped waiting (its context ended) for a
	// batch that was admitted; the batch goes on and ends on its own
	// (actors.DetachedError.Pending), so whether it ran is not known yet.
	Detached     Code = -303
	Unclassified Code = -999 // an error lanes does not know (a bug: report it)
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

var table = map[Code]codeInfo{
	OK:                       {"ok", BlameNone, false, false},
	InvalidValue:             {"cuda_invalid_value", BlameStream, false, false},
	OutOfMemory:              {"cuda_out_of_memory", BlameStream, true, false},
	NotInitialized:           {"cuda_not_initialized", BlameStream, false, false},
	Deinitialized:            {"cuda_deinitialized", BlameStream, false, false},
	InvalidContext:           {"cuda_invalid_context", BlameStream, false, false},
	InvalidHandle:            {"cuda_invalid_handle", BlameStream, false, false},
	IllegalState:             {"cuda_illegal_state", BlameStream, false, false},
	NotFound:                 {"cuda_not_found", BlameStream, false, false},
	NotReady:                 {"cuda_not_ready", BlameStream, true, false},
	IllegalAddress:           {"cuda_illegal_address", BlameDevice, false, false},
	LaunchOutOfResources:     {"cuda_launch_out_of_resources", BlameStream, true, false},
	LaunchTimeout:            {"cuda_launch_timeout", BlameDevice, false, false},
	HardwareStackError:       {"cuda_hardware_stack_error", BlameDevice, false, false},
	IllegalInstruction:       {"cuda_illegal_instruction", BlameDevice, false, false},
	HostMemoryRegistered:     {"cuda_host_memory_already_registered", BlameCaller, false, true},
	HostMemoryNotRegistered:  {"cuda_host_memory_not_registered", BlameCaller, false, true},
	MisalignedAddress:        {"cuda_misaligned_address", BlameDevice, false, false},
	InvalidAddressSpace:      {"cuda_invalid_address_space", BlameDevice, false, false},
	InvalidPC:                {"cuda_invalid_pc", BlameDevice, false, false},
	LaunchFailed:             {"cuda_launch_failed", BlameDevice, false, false},
	StreamCaptureUnsupported: {"cuda_stream_capture_unsupported", BlameStream, false, false},
	StreamCaptureInvalidated: {"cuda_stream_capture_invalidated", BlameStream, false, false},
	StreamCaptureMerge:       {"cuda_stream_capture_merge", BlameStream, false, false},
	StreamCaptureUnmatched:   {"cuda_stream_capture_unmatched", BlameStream, false, false},
	StreamCaptureUnjoined:    {"cuda_stream_capture_unjoined", BlameStream, false, false},
	StreamCaptureIsolation:   {"cuda_stream_capture_isolation", BlameStream, false, false},
	StreamCaptureImplicit:    {"cuda_stream_capture_implicit", BlameStream, false, false},
	StreamCaptureWrongThread: {"cuda_stream_capture_wrong_thread", BlameStream, false, false},
	GraphExecUpdateFailure:   {"cuda_graph_exec_update_failure", BlameStream, false, false},
	DriverError:              {"cuda_driver_error", BlameStream, false, false},

	RuntimeContract: {"cuda_runtime_contract", BlameCaller, false, true},

	BatchInvalid:        {"batch_invalid", BlameCaller, false, true},
	ComputePathUnmet:    {"compute_path_unmet", BlameCaller, false, true},
	BindingPatchInvalid: {"binding_patch_invalid", BlameCaller, false, true},
	ProgramInvalid:      {"program_invalid", BlameCaller, false, true},
	PreparationInvalid:  {"preparation_invalid", BlameCaller, false, true},
	ReadbackInvalid:     {"readback_invalid", BlameCaller, false, true},
	UnknownFence:        {"unknown_fence", BlameCaller, false, true},
	StagedInputInvalid:  {"staged_input_invalid", BlameCaller, false, true},
	LaneNotQuiescent:    {"lane_not_quiescent", BlameNone, true, true},
	LaneFailed:          {"lane_failed", BlameStream, true, true},
	CaptureFailed:       {"capture_failed", BlameStream, false, false},
	ProviderPanic:       {"provider_panic", BlameStream, false, false},
	LibrarySetupFailed:  {"library_setup_failed", BlameCaller, true, true},

	Overloaded:      {"overloaded", BlameNone, true, true},
	Stopped:         {"stopped", BlameNone, false, true},
	NoHealthyLane:   {"no_healthy_lane", BlameNone, true, true},
	LaneUnavailable: {"lane_unavailable", BlameNone, true, true},
	LaneHung:        {"lane_hung", BlameStream, false, false},
	NotYours:        {"not_yours", BlameCaller, false, true},
	TenantInvalid:   {"tenant_invalid", BlameCaller, false, true},
	TenantSuspended: {"tenant_suspended", BlameCaller, true, true},
	TenantBusy:      {"tenant_busy", BlameNone, true, true},
	UnknownLane:     {"unknown_lane", BlameCaller, false, true},
	Indeterminate:   {"indeterminate", BlameStream, false, false},
	InvalidArgument: {"invalid_argument", BlameCaller, false, true},
	BatchTooLarge:   {"batch_too_large", BlameCaller, false, true},
	ProgramLimit:    {"program_limit", BlameCaller, false, true},

	HostLost:            {"host_lost", BlameStream, false, false},
	DeviceStateLost:     {"device_state_lost", BlameNone, false, true},
	NoHost:              {"no_host", BlameNone, true, true},
	HostLeaving:         {"host_leaving", BlameNone, true, true},
	RegistrationRefused: {"registration_refused", BlameNone, false, true},
	WireUnsupported:     {"wire_unsupported", BlameCaller, false, true},
	Unauthenticated:     {"unauthenticated", BlameCaller, false, true},

	UninitializedRead: {"uninitialized_read", BlameStream, false, false},

	Canceled:         {"canceled", BlameNone, false, false},
	DeadlineExceeded: {"deadline_exceeded", BlameNone, false, false},
	Withdrawn:        {"withdrawn", BlameNone, false, true},
	Detached:         {"detached", BlameNone, false, false},
	Unclassified:     {"unclassified", BlameNone, false, false},
}

// String returns the stable snake_case name of the code, such as
// "cuda_out_of_memory" or "overloaded"; unknown driver codes print as
// "cuda_driver_error_N".
func (c Code) String() string {
	if info, ok := table[c]; ok {
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
func (c Code) Retryable() bool { return table[c].retryable }

// Class is the code's classification when nothing more is known: its
// blame, whether it is retryable and sticky, and whether an error of this
// code means the request was refused before anything ran. Unknown driver
// codes are the stream's.
func (c Code) Class() Class {
	info, ok := table[c]
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
// an error lanes does not know is [Unclassified]. nil is success.
func Classify(err error) Class {
	if err == nil {
		return OK.Class()
	}
	var c classifier
	if errors.As(err, &c) {
		return c.Class()
	}
	switch {
	case errors.Is(err, context.Canceled):
		return Canceled.Class()
	case errors.Is(err, context.DeadlineExceeded):
		return DeadlineExceeded.Class()
	}
	return Unclassified.Class()
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

// All is every code lanes defines, in numeric order.
func All() []Code {
	out := make([]Code, 0, len(table))
	for c := range table {
		out = append(out, c)
	}
	slices.Sort(out)
	return out
}
