// What preparation did with each candidate (its Disposition) and with the
// batch (the PrepareReport).

package discovery

import "github.com/lanesched/lanes/cache"

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
func (d Disposition) Reason() cache.Reason {
	switch d {
	case DispositionCaptureRejected:
		return cache.ReasonCaptureRejected
	case DispositionCachedRejection:
		return cache.ReasonCachedRejection
	case DispositionQuiescenceDeferred:
		return cache.ReasonQuiescenceDeferred
	case DispositionCapacityDeferred:
		return cache.ReasonCapacityDeferred
	case DispositionOutsidePreparation:
		return cache.ReasonOutsidePreparation
	}
	return cache.ReasonNone
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
	// RebindRefusals are the refusals of an in-place parameter update
	// (backend.Exec.Rebind) before the candidate was captured instead: each
	// a *backend.RebindRefusedError saying why.
	RebindRefusals []error
	// Timings are the capture, instantiation, upload, update and rebind
	// it made, each timed by the cache's clock (SetClock; none without).
	Timings []cache.Timing
	// DeviceDeferred counts the candidates capacity deferred because the
	// device-byte bound (LimitDeviceBytes) left no room for them.
	DeviceDeferred int

	Hits, Captured, Updated, Uploaded, CaptureRejections, CachedRejections int
	QuiescenceDeferred, CapacityDeferred, OutsidePreparation               int
}

// Update is one in-place update: the executable that replayed From replays
// To now. The key changes with it: an updated executable is re-keyed,
// never shared between the two.
type Update struct {
	From, To SegmentKey
	// InPlace is how: UpdateByParameters (no capture) or UpdateByGraph.
	InPlace UpdateKind
}

// UpdateKind is how an executable was updated in place.
type UpdateKind uint8

// How an executable is updated in place.
const (
	// UpdateByGraph: the candidate was captured and the executable updated
	// from the graph (cuGraphExecUpdate).
	UpdateByGraph UpdateKind = iota + 1
	// UpdateByParameters: no capture; each kernel node took the
	// candidate's parameters (backend.Exec.Rebind), when only pointers,
	// scalars or launch shapes changed.
	UpdateByParameters
)

// String is "graph" or "parameters".
func (k UpdateKind) String() string {
	switch k {
	case UpdateByGraph:
		return "graph"
	case UpdateByParameters:
		return "parameters"
	}
	return "none"
}
