// What preparation did with each candidate (its Disposition) and with the
// batch (the PrepareReport).

package cache

// Disposition is what preparation did with one candidate.
type Disposition uint8

// Dispositions. Every candidate of a batch gets exactly one.
const (
	DispositionHit                Disposition = iota + 1 // already resident
	DispositionCaptured                                  // captured, instantiated and uploaded now
	DispositionUpdated                                   // captured and written into a resident executable of the same shape, in place
	DispositionCaptureRejected                           // capture failed; eager fallback was safe
	DispositionCachedRejection                           // capture failed before; not tried again
	DispositionQuiescenceDeferred                        // a miss, but the stream had work in flight
	DispositionCapacityDeferred                          // a miss that does not fit: the cache is full of executables this batch needs, or of others' within their share
	DispositionOutsidePreparation                        // a miss, and the cache is not open for preparation
)

var dispositionNames = [...]string{"", "hit", "captured", "updated", "capture_rejected", "cached_rejection", "quiescence_deferred", "capacity_deferred", "outside_preparation"}

// String is the disposition's snake_case name.
func (d Disposition) String() string {
	if int(d) < len(dispositionNames) && d != 0 {
		return dispositionNames[d]
	}
	return "none"
}

// Resident reports whether the candidate is resident after preparation.
func (d Disposition) Resident() bool {
	return d == DispositionHit || d == DispositionCaptured || d == DispositionUpdated
}

// Reason is the gap reason of a non-resident disposition.
func (d Disposition) Reason() Reason {
	switch d {
	case DispositionCaptureRejected:
		return ReasonCaptureRejected
	case DispositionCachedRejection:
		return ReasonCachedRejection
	case DispositionQuiescenceDeferred:
		return ReasonQuiescenceDeferred
	case DispositionCapacityDeferred:
		return ReasonCapacityDeferred
	case DispositionOutsidePreparation:
		return ReasonOutsidePreparation
	}
	return ReasonNone
}

// PrepareReport is what one Prepare did.
type PrepareReport struct {
	Dispositions []Disposition // one per candidate, in order
	Rejections   []error       // the capture errors behind DispositionCaptureRejected, in order
	Evicted      []SegmentKey  // residents evicted to make room, or re-keyed by an update
	// Updates are the in-place updates made: each resident executable of
	// the candidate's shape that now replays the candidate instead.
	Updates []Update
	// UpdateRefusals are the device's answers when an in-place update was
	// refused and the candidate was instantiated instead.
	UpdateRefusals []error

	Hits, Captured, Updated, Uploaded, CaptureRejections, CachedRejections int
	QuiescenceDeferred, CapacityDeferred, OutsidePreparation               int
}

// Update is one in-place update: the executable that replayed From replays
// To now. The key changes with it: an updated executable is re-keyed,
// never shared between the two.
type Update struct{ From, To SegmentKey }
