package lanes

import (
	"errors"
	"fmt"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/programs"
)

// Sentinels of the lane; every error the lane returns wraps one of these or
// a device error, so errors.Is works through an [*Error].
var (
	ErrFailed        = errors.New("lanes: lane failed")
	ErrNotQuiescent  = errors.New("lanes: lane is not quiescent")
	ErrInvalidBatch  = errors.New("lanes: invalid batch")
	ErrPathRequired  = errors.New("lanes: compute path requirement not met")
	ErrPatch         = errors.New("lanes: invalid program-binding patch")
	ErrUnknownFence  = errors.New("lanes: unknown fence")
	ErrReadback      = errors.New("lanes: invalid readback")
	ErrProviderPanic = errors.New("lanes: provider panicked")
)

// Error is every error a lane returns. NotSubmitted is the seed's
// "definitely not submitted": nothing of the batch reached the stream, so the
// caller may fix and resubmit, or send it elsewhere. When false, work may
// have been enqueued and the lane has failed: the submission is quarantined.
type Error struct {
	Op           string // "submit", "poll", "configure", ...
	Code         string // stable snake_case code
	NotSubmitted bool
	Retryable    bool
	Sticky       bool // the device itself is poisoned
	Err          error
}

// Error formats "lanes: op: message".
func (e *Error) Error() string {
	s := "lanes: " + e.Op + ": " + e.Err.Error()
	if e.NotSubmitted {
		s += " (definitely not submitted)"
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Report is an error described for callers, logs and spans: a stable code,
// the message, and whether retrying may help.
type Report struct {
	Code         string
	Message      string
	Retryable    bool
	Sticky       bool
	NotSubmitted bool
}

// Describe reports any error a lane returned.
func Describe(err error) Report {
	if err == nil {
		return Report{Code: "ok"}
	}
	var e *Error
	if errors.As(err, &e) {
		return Report{Code: e.Code, Message: err.Error(), Retryable: e.Retryable, Sticky: e.Sticky, NotSubmitted: e.NotSubmitted}
	}
	r := cuda.Describe(err)
	return Report{Code: r.Code, Message: r.Message, Retryable: r.Retryable, Sticky: r.Sticky}
}

// rejected wraps an error caught before anything was enqueued.
func rejected(op string, err error) *Error {
	e := &Error{Op: op, NotSubmitted: true, Err: err}
	e.Code, e.Retryable, e.Sticky = classify(err)
	return e
}

// failed wraps an error after enqueue began, which fails the lane.
func failed(op string, err error) *Error {
	e := &Error{Op: op, Err: err}
	e.Code, e.Retryable, e.Sticky = classify(err)
	e.Retryable = false
	return e
}

func classify(err error) (code string, retryable, sticky bool) {
	var ce *cuda.Error
	switch {
	case errors.As(err, &ce) && ce.Code != cuda.CodeContract:
		return ce.Code.String(), ce.Retryable, ce.Sticky
	case errors.Is(err, ErrNotQuiescent):
		return "lane_not_quiescent", true, false
	case errors.Is(err, ErrFailed):
		return "lane_failed", false, false
	case errors.Is(err, ErrPathRequired):
		return "compute_path_unmet", false, false
	case errors.Is(err, ErrPatch):
		return "binding_patch_invalid", false, false
	case errors.Is(err, ErrProviderPanic):
		return "provider_panic", false, false
	case errors.Is(err, ErrUnknownFence):
		return "unknown_fence", false, false
	case errors.Is(err, ErrReadback):
		return "readback_invalid", false, false
	case errors.Is(err, cache.ErrNotOpen), errors.Is(err, cache.ErrAlreadyOpen), errors.Is(err, cache.ErrCapacity), errors.Is(err, cache.ErrNotQuiescent):
		return "preparation_invalid", false, false
	case isProgramError(err):
		return "program_invalid", false, false
	case errors.As(err, &ce):
		return "batch_invalid", false, false
	}
	return "batch_invalid", false, false
}

func isProgramError(err error) bool {
	for _, s := range []error{programs.ErrTopology, programs.ErrForeignRuntime, programs.ErrNotSealed, programs.ErrUnknownProgram,
		programs.ErrSegmentMismatch, programs.ErrNotResident, programs.ErrNoAttribution, programs.ErrMonotonic, programs.ErrRegistration} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidBatch}, args...)...)
}
