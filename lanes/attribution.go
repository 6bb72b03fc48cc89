// What a submission did, entry by entry: rows, replayed segments, cache
// events, and how an entry's row is built.

package lanes

import (
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/programs"
)

// Row attributes one entry of a submitted batch. The one-byte fields sit
// together, so a row packs into 88 bytes (96 with them apart).
type Row struct {
	Index      int
	Node       int
	Op         string // portable operation id: "launch:gemv_f32", "call:sgemm", "upload", "copy", "zero", "invoke"
	Work       Work
	Dispatches int // kernel launches the entry stands for
	Transfers  int // copies and memsets
	GraphNodes int // graph nodes it replayed as; 0 when eager or unknown
	Phase      cache.Phase
	Replayed   bool
	Reason     cache.Reason // why the entry was not replayed (ReasonNone when it was)
}

// SegmentRecord attributes one replayed segment.
type SegmentRecord struct {
	Start, End  int          // entries [Start, End)
	Fingerprint string       // the executable's segment key
	Program     *programs.ID // set when the segment belongs to a registered program
	Ordinal     int          // its segment ordinal in that program, or -1
	Commands    int
	GraphNodes  int
	Logical     []programs.LogicalCommand
}

// Attribution is what a submission did, row by row. Its slices are
// read-only: a lane hands receipts that attribute identically (a tenant's
// steady steps) one shared copy of their rows and logical commands.
type Attribution struct {
	Rows     []Row
	Segments []SegmentRecord
	Prelude  int          // binding-patch commands enqueued before the entries
	Events   []CacheEvent // what preparation did to the cache for this batch
	// Preparation times each capture, instantiation, upload, update and
	// rebind the batch's preparation made (by the lane's clock).
	Preparation []cache.Timing
	// Launches is how many launches the submission enqueued: graph
	// launches, eager kernel launches and eager library calls (each
	// counts one, whatever it enqueued; a fault rate per launch compares
	// tenants whose batches differ in size and shape).
	Launches int
}

// CacheEvent is a cache event of a submission's preparation.
type CacheEvent struct {
	Kind   string // "captured", "updated", "update_refused", "rebind_refused", "capture_rejected" or "evicted"
	Key    string // the segment fingerprint
	Detail string // for capture_rejected, update_refused and rebind_refused: the device's answer
	// Reason is, for "updated", how ("parameters" or "graph"); for
	// "rebind_refused", why ("node_count", "node_kind", "not_a_chain" or
	// "device_refused").
	Reason string
}

// ReplayCount is how many of a submission's entries replayed, and why
// each of the others ran eagerly.
type ReplayCount struct {
	Entries  int
	Replayed int
	// Eager counts the entries that did not replay, by reason: the
	// reason's name (cache.Reason's String: "not_compute" for an Input or
	// Output entry, "outside_preparation", "capacity_deferred", ...).
	Eager map[string]int
}

// Replays counts the receipt's entries that replayed and, by reason, the
// ones that did not (from Attribution.Rows). A receipt of a submission
// that never ran counts no entries.
func (r Receipt) Replays() ReplayCount {
	c := ReplayCount{Entries: len(r.Attribution.Rows)}
	for _, row := range r.Attribution.Rows {
		if row.Replayed {
			c.Replayed++
			continue
		}
		if c.Eager == nil {
			c.Eager = map[string]int{}
		}
		c.Eager[row.Reason.String()]++
	}
	return c
}
