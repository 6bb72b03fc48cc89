// What a submission did, entry by entry: rows, replayed segments, cache
// events, and how an entry's row is built.

package lanes

import (
	"errors"
	"slices"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
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
	// Reason is, for "updated", how (cache.UpdateKind: "parameters" or
	// "graph"); for "rebind_refused", why (cuda.RebindRefusal).
	Reason string
}

// Submission is an accepted batch: its fence and what it did.
type Submission struct {
	Fence       uint64
	Attribution Attribution
	Preparation cache.PrepareReport
}

// events lists what preparation did to the cache.
func (p *plan) events() []CacheEvent {
	var out []CacheEvent
	rej := 0
	for ci, d := range p.rep.Dispositions {
		key := p.disc.Candidates[ci].Key
		var ev CacheEvent
		switch d {
		case cache.DispositionCaptured:
			ev.Kind = "captured"
		case cache.DispositionUpdated:
			ev.Kind = "updated"
			for _, u := range p.rep.Updates {
				if u.To == key {
					ev.Detail, ev.Reason = "in place of "+u.From.String(), u.InPlace.String()
				}
			}
		case cache.DispositionCaptureRejected:
			ev.Kind = "capture_rejected"
			if rej < len(p.rep.Rejections) {
				ev.Detail = p.rep.Rejections[rej].Error()
				rej++
			}
		default:
			continue // a hit or a deferral: nothing happened to the cache
		}
		ev.Key = key.String()
		out = append(out, ev)
	}
	for _, k := range p.rep.Evicted {
		if !slices.ContainsFunc(p.rep.Updates, func(u cache.Update) bool { return u.From == k }) { // an update re-keys, it evicts nothing
			out = append(out, CacheEvent{Kind: "evicted", Key: k.String()})
		}
	}
	for _, err := range p.rep.UpdateRefusals {
		out = append(out, CacheEvent{Kind: "update_refused", Detail: err.Error()})
	}
	for _, err := range p.rep.RebindRefusals {
		ev := CacheEvent{Kind: "rebind_refused", Detail: err.Error()}
		var refused *cuda.RebindRefusedError
		if errors.As(err, &refused) {
			ev.Reason = string(refused.Refusal)
		}
		out = append(out, ev)
	}
	return out
}

// launchOp is a launch's operation id, built once per kernel name.
func (l *Lane) launchOp(kernel string) string { return memoOp(&l.ops, "launch:", kernel) }

// callOp is a library call's operation id, built once per call name.
func (l *Lane) callOp(name string) string { return memoOp(&l.callOps, "call:", name) }

// memoOp returns prefix+name, built once per name in *memo (bounded).
func memoOp(memo *map[string]string, prefix, name string) string {
	op, ok := (*memo)[name]
	if !ok {
		if *memo == nil || len(*memo) >= keyMemoLimit {
			*memo = map[string]string{}
		}
		op = prefix + name
		(*memo)[name] = op
	}
	return op
}

// row attributes entry i.
func (l *Lane) row(i int, e Entry, replayed bool, reason cache.Reason) Row {
	r := Row{Index: i, Node: e.Node, Phase: e.Phase, Replayed: replayed, Reason: reason, Work: e.Work}
	switch {
	case e.Invoke != nil:
		r.Op, r.Dispatches = "invoke", e.Invoke.Segment.Commands
	case e.Command.Kind == cuda.KindLaunch:
		r.Op, r.Dispatches = l.launchOp(e.Command.Kernel), 1
	case e.Command.Kind == cuda.KindCall:
		r.Op, r.Dispatches = l.callOp(e.Command.LibraryCall.Name), 1
	default:
		r.Op, r.Transfers = e.Command.Kind.String(), 1
	}
	return r
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
