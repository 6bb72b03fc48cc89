// The lane's errors: one *Error type wrapping a classified cause, and the
// sentinels it wraps.

package lanes

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
)

// Sentinels of the lane; every error the lane returns is an [*Error] that
// wraps one of these, a cache or programs sentinel, or a device error, so
// errors.Is reaches each of them and [cuda.Classify] classifies it.
var (
	ErrFailed        = codes.NewSentinel(codes.LaneFailed, "lanes: lane failed")
	ErrNotQuiescent  = codes.NewSentinel(codes.LaneNotQuiescent, "lanes: lane is not quiescent")
	ErrInvalidBatch  = codes.NewSentinel(codes.BatchInvalid, "lanes: invalid batch")
	ErrPathRequired  = codes.NewSentinel(codes.ComputePathUnmet, "lanes: compute path requirement not met")
	ErrPatch         = codes.NewSentinel(codes.BindingPatchInvalid, "lanes: invalid program-binding patch")
	ErrUnknownFence  = codes.NewSentinel(codes.UnknownFence, "lanes: unknown fence")
	ErrReadback      = codes.NewSentinel(codes.ReadbackInvalid, "lanes: invalid readback")
	ErrProviderPanic = codes.NewSentinel(codes.ProviderPanic, "lanes: provider panicked")
	ErrCaptureFailed = codes.NewSentinel(codes.CaptureFailed, "lanes: capture failed and left the stream untrustworthy")
	ErrIndexMap      = codes.NewSentinel(codes.StagedInputInvalid, "lanes: invalid index map")
	ErrStagedInput   = codes.NewSentinel(codes.StagedInputInvalid, "lanes: invalid staged input")
	ErrLibrarySetup  = codes.NewSentinel(codes.LibrarySetupFailed, "lanes: a library's per-lane setup failed")
	// ErrStagedLost is a staged program whose lane was rebuilt after a
	// hang: its staging and executables went with the old lane, through no
	// fault of the caller's. Prepare it again (code device_state_lost, as a
	// lane host's program whose host was lost).
	ErrStagedLost = codes.NewSentinel(codes.DeviceStateLost, "lanes: staged program lost with its lane")
)

// Error is every error a lane returns: its cause, classified once when the
// lane made it ([cuda.Class] fields), and what the lane did with the batch.
//
// NotSubmitted is "definitely not submitted": nothing of the batch reached
// the stream, so the caller may fix and resubmit, or send it elsewhere.
// When false, some of the batch may have run. Blame says whose failure it
// is: a caller's error leaves the lane healthy; a stream's or a device's
// error failed the lane.
type Error struct {
	Op           string // "submit", "fence", "configure", ...
	Code         cuda.Code
	Blame        cuda.Blame
	NotSubmitted bool
	Retryable    bool
	Sticky       bool // the device itself is poisoned
	Err          error
}

// Error is the cause's message ("lanes: invalid batch: entry 3 ...",
// "cuda: enqueue launch: cuda_launch_out_of_resources: ..."), marked when
// nothing was submitted. The operation is in Op, not repeated here.
func (e *Error) Error() string {
	s := "lanes: " + e.Code.String() + " with no cause"
	if e.Err != nil {
		s = e.Err.Error()
	}
	if e.NotSubmitted {
		s += " (definitely not submitted)"
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Class is the error's classification.
func (e *Error) Class() cuda.Class {
	return cuda.Class{Code: e.Code, Blame: e.Blame, Retryable: e.Retryable, Sticky: e.Sticky, NotSubmitted: e.NotSubmitted}
}
