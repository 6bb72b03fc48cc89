// The scheduler's errors: sentinels, and the typed errors a caller can act
// on (BatchTooLargeError, SuspendedError, DetachedError).

package actors

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/lanes"
)

// Errors of the scheduler. Each is a sentinel: errors.Is finds it
// through every wrapping, and cuda.Classify reports its code, blame and
// whether retrying helps. Every error Submit returns is a *lanes.Error
// (or a [*DetachedError]) that wraps one of these or the lane's own cause.
var (
	// ErrOverloaded: admission is full (the tenant's, or its lane's);
	// nothing was submitted; retry later.
	ErrOverloaded = codes.NewSentinel(codes.Overloaded, "actors: overloaded")
	// ErrStopped: the scheduler is stopping or stopped. It is the one
	// ErrStopped: a front to lane hosts that was stopped answers it too
	// (remote.ErrStopped is this value).
	ErrStopped = codes.NewSentinel(codes.Stopped, "actors: stopped (the scheduler, or the front to lane hosts, was stopped)")
	// ErrWithdrawn: the batch was admitted, then its context ended before
	// its lane took it, so it never ran (not submitted); errors.Is finds
	// the context's error too. Its code (withdrawn) tells it from an
	// admission refused for a context already done (canceled,
	// deadline_exceeded) and from a caller that stopped waiting for a
	// batch that goes on ([*DetachedError], detached).
	ErrWithdrawn = codes.NewSentinel(codes.Withdrawn, "actors: withdrawn before it ran (its context ended while it waited for its lane)")
	// ErrNoHealthyLane: no lane of the batch's device can take work now
	// (lanes recovering come back; retry later).
	ErrNoHealthyLane = codes.NewSentinel(codes.NoHealthyLane, "actors: no healthy lane")
	// ErrLaneUnavailable: the lane left routing before it took the batch,
	// and the batch could not be moved; nothing was submitted.
	ErrLaneUnavailable = codes.NewSentinel(codes.LaneUnavailable, "actors: lane unavailable")
	// ErrIndeterminate: the device failed with the submission in flight;
	// its effect is unknown. The error also wraps the device's cause.
	ErrIndeterminate = codes.NewSentinel(codes.Indeterminate, "actors: submission indeterminate")
	// ErrUnknownLane: no lane has the index an administrative call named.
	ErrUnknownLane = codes.NewSentinel(codes.UnknownLane, "actors: unknown lane")
	// ErrHung: a lane's oldest submission did not end within
	// Config.HangTimeout; its stream is abandoned.
	ErrHung = codes.NewSentinel(codes.LaneHung, "actors: lane hung")
	// ErrNotYours: the batch names a buffer, host staging or program that
	// another tenant owns (or, with StrictOwnership, that no one owns).
	ErrNotYours = codes.NewSentinel(codes.NotYours, "actors: tenant names what another tenant owns")
	// ErrInvalidTenant: the tenant name is empty, longer than MaxTenantName
	// bytes, not UTF-8, holds a non-printable character, or begins or ends
	// with a space.
	ErrInvalidTenant = codes.NewSentinel(codes.TenantInvalid, "actors: invalid tenant name")
	// ErrSuspended: the tenant's submissions kept failing lanes; it is
	// refused for a while ([*SuspendedError] says how long).
	ErrSuspended = codes.NewSentinel(codes.TenantSuspended, "actors: tenant suspended")
	// ErrTenantBusy: Forget found the tenant with submissions in flight.
	ErrTenantBusy = codes.NewSentinel(codes.TenantBusy, "actors: tenant has submissions in flight")
	// ErrInvalidArgument: a call's argument or Config is unusable (a nil
	// context, no devices). A nil or malformed staged program is
	// lanes.ErrStagedInput.
	ErrInvalidArgument = codes.NewSentinel(codes.InvalidArgument, "actors: invalid argument")
	// ErrBatchTooLarge: the batch has more entries or upload bytes than
	// Config allows ([*BatchTooLargeError] says which and how to split).
	ErrBatchTooLarge = codes.NewSentinel(codes.BatchTooLarge, "actors: batch too large")
	// ErrProgramLimit: the batch declares a new program name, and its
	// tenant (Config.MaxProgramsPerTenant) or the scheduler
	// (Config.MaxPrograms) already holds as many as allowed.
	ErrProgramLimit = codes.NewSentinel(codes.ProgramLimit, "actors: program limit")
)

// BatchTooLargeError is the refusal of a batch beyond Config's bounds:
// nothing was submitted. Split it into batches within both bounds (each
// tenant's batches run in order, so the pieces keep their sequence). It
// wraps [ErrBatchTooLarge].
type BatchTooLargeError struct {
	Entries, MaxEntries int   // its commands: entries (an invocation counts its segment's commands) and patches
	Bytes, MaxBytes     int64 // the host bytes its uploads and patches carry
	Largest             int64 // the largest single upload or patch
	Staged              bool  // a staged replay's: Bytes are what its slots move
}

func (e *BatchTooLargeError) Error() string {
	if e.Staged {
		return fmt.Sprintf("%v: one replay of the staged program moves %d bytes through its staging slots (inputs, and outputs when collected), more than a batch may (%d); build it with smaller slots",
			ErrBatchTooLarge, e.Bytes, e.MaxBytes)
	}
	if e.Largest > e.MaxBytes {
		return fmt.Sprintf("%v: one upload or patch carries %d bytes, more than a batch may (%d); split that upload into smaller regions, at most %d bytes each, in batches of their own",
			ErrBatchTooLarge, e.Largest, e.MaxBytes, e.MaxBytes)
	}
	return fmt.Sprintf("%v: %d entries (at most %d) and %d upload bytes (at most %d); split it into at least %d batches, which run in order",
		ErrBatchTooLarge, e.Entries, e.MaxEntries, e.Bytes, e.MaxBytes, e.Pieces())
}

// Pieces is the fewest batches the refused one splits into within both
// bounds, were its bytes spread evenly over its entries.
func (e *BatchTooLargeError) Pieces() int {
	n := (e.Entries + e.MaxEntries - 1) / max(e.MaxEntries, 1)
	if b := int((e.Bytes + e.MaxBytes - 1) / max(e.MaxBytes, 1)); b > n {
		n = b
	}
	return max(n, 1)
}

// Unwrap makes errors.Is find [ErrBatchTooLarge].
func (e *BatchTooLargeError) Unwrap() error { return ErrBatchTooLarge }

var errNilContext = fmt.Errorf("%w: a nil context.Context; pass context.Background() or a real context", ErrInvalidArgument)

// SuspendedError is the refusal of a suspended tenant: its submissions
// failed lanes Faults times inside the suspension window, far more often
// than the other tenants' did, so it is refused until RetryAfter has
// passed, and only it. It wraps [ErrSuspended].
type SuspendedError struct {
	Tenant     string
	RetryAfter time.Duration // from the refusal
	Faults     int           // the faults that suspended it
}

// Error says who is suspended, why and for how long.
func (e *SuspendedError) Error() string {
	return fmt.Sprintf("%v: tenant %q: %d of its submissions failed lanes in a short time; retry after %v", ErrSuspended, e.Tenant, e.Faults, e.RetryAfter.Round(time.Millisecond))
}

// Unwrap returns ErrSuspended.
func (e *SuspendedError) Unwrap() error { return ErrSuspended }

// DetachedError is Submit's error when its context ended after the batch
// was admitted: the submission was not abandoned with the wait. It still
// ends exactly once; Pending observes that end (a batch whose lane had not
// taken it yet ends not submitted, with the context's error). errors.Is
// finds the context's error.
type DetachedError struct {
	Pending lanes.Pending
	Err     error // the context's error
}

// Error says that the submission lives on.
func (e *DetachedError) Error() string {
	msg := "actors: stopped waiting for an admitted submission, which ends on its own (DetachedError.Pending)"
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the context's error.
func (e *DetachedError) Unwrap() error { return e.Err }

// Class classifies the error as detached: the submission's fate is still
// open (not known to be unsubmitted), and nothing failed.
func (e *DetachedError) Class() cuda.Class { return codes.Detached.Class() }

// withdrawn is the error of an admitted batch whose context ended before
// its lane took it: ErrWithdrawn, and the context's error.
func withdrawn(ctxErr error) error { return fmt.Errorf("%w: %w", ErrWithdrawn, ctxErr) }
