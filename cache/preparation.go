// The preparation lifecycle: unconfigured, open (misses are captured),
// sealed (misses run eagerly).

package cache

import "github.com/lanesched/lanes/internal/codes"

// PrepState is the state of a cache's preparation lifecycle.
type PrepState uint8

// Preparation states: configure with a capacity opens capture; seal closes it
// and makes the catalog readable.
const (
	PrepUnconfigured PrepState = iota // no capacity yet: nothing is captured
	PrepOpen                          // capture is open: misses are captured while the stream is quiescent
	PrepSealed                        // sealed: residents replay, misses run eagerly
)

// String names the state.
func (s PrepState) String() string {
	switch s {
	case PrepUnconfigured:
		return "unconfigured"
	case PrepOpen:
		return "open"
	case PrepSealed:
		return "sealed"
	}
	return "unknown"
}

// Preparation is a snapshot of the lifecycle and its counters.
type Preparation struct {
	State            PrepState
	Capacity         int // most resident executables; 0 while unconfigured
	Resident         int
	Rejected         int // remembered capture rejections
	Batches          int // batches prepared while open with a miss to place (captured, rejected or capacity deferred)
	Captured         int
	Uploaded         int
	CapacityDeferred int
}

// Errors of the lifecycle, classified by [cuda.Classify].
var (
	ErrNotOpen       = codes.NewSentinel(codes.PreparationInvalid, "cache: preparation is not open")
	ErrAlreadyOpen   = codes.NewSentinel(codes.PreparationInvalid, "cache: preparation is already open")
	ErrCapacity      = codes.NewSentinel(codes.PreparationInvalid, "cache: invalid capacity")
	ErrNotQuiescent  = codes.NewSentinel(codes.LaneNotQuiescent, "cache: the stream has work in flight")
	ErrNoDisposition = codes.NewSentinel(codes.PreparationInvalid, "cache: a non-resident candidate has no typed disposition")
)

// TrimReport says what a trim released.
type TrimReport struct{ Executables, Rejections, Retired int }
