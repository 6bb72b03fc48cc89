// Reasons: why a command or candidate runs eagerly instead of replayed.

package cache

// Reason is the typed reason a command or plan node is not replayed. Every
// segment that is not replayed carries one: in the attribution, the spans and
// the demo report.
type Reason uint8

// The reasons. ReasonNone means replayed (or replayable).
const (
	ReasonNone Reason = iota
	// ReasonMissingComputeCommand: the plan node has no compute command in
	// the batch.
	ReasonMissingComputeCommand
	// ReasonProviderKeyMissing: the command's provider declared no replay
	// key.
	ReasonProviderKeyMissing
	// ReasonAddressScopeMissing: a region of the command has no reusable address
	// scope.
	ReasonAddressScopeMissing
	// ReasonAddressScopeConflict: the command, or its run, touches memory of two
	// different lanes.
	ReasonAddressScopeConflict
	// ReasonCaptureRejected: capturing the segment failed; eager fallback
	// was safe and was used.
	ReasonCaptureRejected
	// ReasonCachedRejection: the segment failed to capture before; the
	// cache remembers and does not try again.
	ReasonCachedRejection
	// ReasonQuiescenceDeferred: the segment would be captured, but the
	// stream had work in flight.
	ReasonQuiescenceDeferred
	// ReasonCapacityDeferred: the segment does not fit: the cache is full
	// of executables this batch also needs, or of other owners' within
	// their share.
	ReasonCapacityDeferred
	// ReasonOutsidePreparation: the segment is not resident and the cache
	// is not open for preparation.
	ReasonOutsidePreparation
	// ReasonEvicted: the segment's executable was evicted.
	ReasonEvicted
	// ReasonEagerBoundary: the plan declared the node eager.
	ReasonEagerBoundary
	// ReasonNotCompute: the command is an input or output transfer, an
	// eager barrier between compute segments (a keyed StableTransfer joins
	// the segment instead).
	ReasonNotCompute
	// ReasonEagerPath: the batch's compute path (eager only) asked for
	// eager execution.
	ReasonEagerPath
)

var reasonNames = [...]string{
	"replayed", "missing_compute_command", "provider_key_missing", "address_scope_missing",
	"address_scope_conflict", "capture_rejected", "cached_rejection", "quiescence_deferred",
	"capacity_deferred", "outside_preparation", "evicted", "eager_boundary", "not_compute", "eager_path",
}

// String is the reason's stable snake_case name, as spans and reports show it.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every reason but ReasonNone, in order.
func Reasons() []Reason {
	out := make([]Reason, 0, len(reasonNames)-1)
	for r := ReasonMissingComputeCommand; int(r) < len(reasonNames); r++ {
		out = append(out, r)
	}
	return out
}
