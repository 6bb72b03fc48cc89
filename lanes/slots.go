// The slots of a staged program, its counters and a replay's result.

package lanes

import (
	"time"

	"github.com/lanesched/lanes/cuda"
)

// Slot is one staged input or output: the pinned host staging a captured
// copy reads or writes, and the device region on the other side.
type Slot struct {
	Staging cuda.HostRegion
	Device  cuda.Region
}

// StagedCounters are the data-movement counters of staged replays.
type StagedCounters struct {
	HostToDeviceBytes, DeviceToHostBytes  uint64
	Uploads, Readbacks, GraphLaunches     uint64
	OutputCacheHits, ResidentInputReplays uint64
	// PinnedUploads are inputs copied to the device straight from the
	// caller's buffer, pinned where it is, with no copy into the staging
	// (docs/replays.md, "Staged programs").
	PinnedUploads uint64
}

// StagedResult is one staged replay's outcome.
type StagedResult struct {
	Outputs     [][]byte // logical order
	DeviceTime  time.Duration
	TimeKnown   bool // DeviceTime is a measurement (exactly 0 for an output-cache hit)
	OutputCache bool
	Resident    bool // the resident-input variant ran (no input copies)
	Receipt     Receipt
}

// StagedSpec declares a staged program (actors.Scheduler.PrepareStaged):
// the slots its inputs and outputs move through, in slot order; the index
// maps that say which logical input or output each slot is (each a dense
// permutation of its slots); and the compute entries, each with a replay
// key.
type StagedSpec struct {
	Inputs    []Slot
	InputMap  []int
	Outputs   []Slot
	OutputMap []int
	Compute   []Entry
}
