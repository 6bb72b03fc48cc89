// A receipt: how a submission ended, and its rows, segments and timing.

package lanes

import (
	"time"

	"github.com/lanesched/lanes/cuda"
)

// Outcome is how a submission ended.
type Outcome uint8

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case OutcomeSucceeded:
		return "succeeded"
	case OutcomeIndeterminate:
		return "indeterminate"
	case OutcomeRefused:
		return "refused"
	}
	return "unknown"
}

// SpanTiming is the device time of one replayed segment or eager command.
type SpanTiming struct {
	Index    int           // segment index in the attribution, or entry index for an eager command
	Segment  bool          // a replayed segment (else an eager command)
	Offset   time.Duration // from the submission's start event to the span's start
	Duration time.Duration
}

// Receipt is the terminal report of one submission.
type Receipt struct {
	Fence   uint64
	Outcome Outcome
	// Err is why the submission did not succeed: an [*Error], classified
	// (cuda.Classify); nil when it succeeded.
	Err error
	// Tenant and Lane say where it ran: the lane's id, and the tenant a
	// scheduler submitted it for.
	Tenant string
	Lane   int
	// DeviceTime is from the point of the stream where the submission
	// began (its start event, or the previous timed submission's fence
	// when that was still pending: the same point, one event fewer) to its
	// fence; 0 without timing.
	DeviceTime time.Duration
	Spans      []SpanTiming
	// HostStart is the host time (on the lane's clock) at which the
	// submission's start event was recorded: the anchor that places device
	// times on the host timeline. HostTimed is false without a lane clock or
	// without timing.
	HostStart   time.Duration
	HostTimed   bool
	Attribution Attribution
	// Released are the batch's retained buffers, now free to reuse. An
	// indeterminate submission releases nothing: its buffers stay
	// held until the stream is synchronized.
	Released []cuda.Buffer
}

// Outcomes. Every accepted submission ends with exactly one.
const (
	OutcomeSucceeded     Outcome = iota + 1 // the fence completed
	OutcomeIndeterminate                    // the device failed with the work in flight: its effect is unknown
	// OutcomeRefused: the batch was refused: by the caller's error partway (see
	// the lane's submit; what was enqueued before it ran to completion, the
	// rest never ran, and the lane is healthy), or, as a scheduler reports
	// it, before any of it ran (Err's class says NotSubmitted).
	OutcomeRefused
)
