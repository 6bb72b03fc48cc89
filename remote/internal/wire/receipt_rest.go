// The rest of a receipt on the wire: its replayed segments (with their
// logical commands), timed spans, prelude, cache events, preparation
// timings, released buffers and host start, so that a receipt through a
// front is the receipt one process gets.

package wire

import (
	"math"
	"slices"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// Bounds of the rest of a receipt a front takes.
const (
	maxReceiptSpans  = 2 * MaxEntries
	maxReceiptEvents = MaxEntries
	maxReceiptString = 1024
	// maxReceiptTimings bounds a receipt's preparation timings (a few per
	// executable its batch prepared).
	maxReceiptTimings = 4 * MaxEntries
)

// restToWire puts the rest of r on w (its segments too: a host's
// templated receipts send theirs as encodeAttribution says).
func restToWire(w *wirepb.Receipt, r lanes.Receipt) {
	w.Segments = SegmentsToWire(r.Attribution.Segments)
	for _, s := range r.Spans {
		w.Spans = append(w.Spans, &wirepb.SpanTiming{Index: uint32(max(s.Index, 0)), Segment: s.Segment, OffsetNs: s.Offset.Nanoseconds(), DurationNs: s.Duration.Nanoseconds()})
	}
	w.Prelude = uint32(max(r.Attribution.Prelude, 0))
	for _, e := range r.Attribution.Events {
		w.Events = append(w.Events, &wirepb.CacheEvent{Kind: e.Kind, Key: e.Key, Detail: e.Detail, Reason: e.Reason})
	}
	if len(r.Attribution.Preparation) > 0 {
		w.Preparation = &wirepb.StageTimings{}
		for _, t := range r.Attribution.Preparation {
			w.Preparation.Timings = append(w.Preparation.Timings, &wirepb.StageTiming{Stage: uint32(t.Stage), Nodes: int64(t.Nodes), TookNs: t.Took.Nanoseconds()})
		}
	}
	for _, b := range r.Released {
		w.Released = append(w.Released, BufferToWire(b))
	}
}

// SegmentsToWire encodes a receipt's replayed segments, each with its
// logical commands.
func SegmentsToWire(segs []lanes.SegmentRecord) []*wirepb.Segment {
	if len(segs) == 0 {
		return nil
	}
	out := make([]*wirepb.Segment, len(segs))
	for i, s := range segs {
		w := &wirepb.Segment{Start: uint32(max(s.Start, 0)), End: uint32(max(s.End, 0)), Fingerprint: s.Fingerprint, Ordinal: int32(s.Ordinal),
			Commands: uint32(max(s.Commands, 0)), GraphNodes: uint32(max(s.GraphNodes, 0))}
		if s.Program != nil {
			w.ProgramRuntime, w.ProgramName = s.Program.Runtime, s.Program.Name
		}
		if len(s.Logical) > 0 {
			w.Logical = make([]int64, 0, 3*len(s.Logical))
			for _, c := range s.Logical {
				w.Logical = append(w.Logical, int64(c.Ordinal), int64(c.Node), int64(c.GraphNodes))
			}
		}
		out[i] = w
	}
	return out
}

// SameSegments reports whether two receipts' segments say the same (a
// host leaves a template's segments out when they do).
func SameSegments(a, b []lanes.SegmentRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Start != y.Start || x.End != y.End || x.Fingerprint != y.Fingerprint || x.Ordinal != y.Ordinal || x.Commands != y.Commands ||
			x.GraphNodes != y.GraphNodes || (x.Program == nil) != (y.Program == nil) || x.Program != nil && *x.Program != *y.Program ||
			!slices.Equal(x.Logical, y.Logical) {
			return false
		}
	}
	return true
}

// restFromWire decodes the rest of a receipt onto r, checking its bounds.
func restFromWire(w *wirepb.Receipt, r *lanes.Receipt) error {
	switch {
	case len(w.Segments) > MaxEntries:
		return WireErr("%d segments; at most %d", len(w.Segments), MaxEntries)
	case len(w.Spans) > maxReceiptSpans:
		return WireErr("%d spans; at most %d", len(w.Spans), maxReceiptSpans)
	case len(w.Events) > maxReceiptEvents:
		return WireErr("%d cache events; at most %d", len(w.Events), maxReceiptEvents)
	case len(w.GetPreparation().GetTimings()) > maxReceiptTimings:
		return WireErr("%d preparation timings; at most %d", len(w.GetPreparation().GetTimings()), maxReceiptTimings)
	case len(w.Released) > MaxRetain:
		return WireErr("%d released buffers; at most %d", len(w.Released), MaxRetain)
	case w.Prelude > MaxEntries:
		return WireErr("a prelude of %d commands", w.Prelude)
	}
	for _, s := range w.Segments {
		if s == nil || s.End < s.Start || s.End > MaxEntries || len(s.Fingerprint) > maxReceiptString ||
			len(s.ProgramRuntime) > programs.MaxIDBytes || len(s.ProgramName) > programs.MaxIDBytes || s.Ordinal < -1 {
			return WireErr("bad segment")
		}
		seg := lanes.SegmentRecord{Start: int(s.Start), End: int(s.End), Fingerprint: s.Fingerprint, Ordinal: int(s.Ordinal),
			Commands: int(s.Commands), GraphNodes: int(s.GraphNodes)}
		if s.ProgramRuntime != "" || s.ProgramName != "" {
			seg.Program = &programs.ID{Runtime: s.ProgramRuntime, Name: s.ProgramName}
		}
		logical, err := logicalFromWire(s.Logical)
		if err != nil {
			return err
		}
		seg.Logical = logical
		r.Attribution.Segments = append(r.Attribution.Segments, seg)
	}
	for _, s := range w.Spans {
		if s == nil || s.OffsetNs < 0 || s.DurationNs < 0 || s.Index > 2*MaxEntries {
			return WireErr("bad span")
		}
		r.Spans = append(r.Spans, lanes.SpanTiming{Index: int(s.Index), Segment: s.Segment, Offset: time.Duration(s.OffsetNs), Duration: time.Duration(s.DurationNs)})
	}
	r.Attribution.Prelude = int(w.Prelude)
	for _, e := range w.Events {
		if e == nil || len(e.Kind) > maxReceiptString || len(e.Key) > maxReceiptString || len(e.Detail) > maxReceiptString || len(e.Reason) > maxReceiptString {
			return WireErr("bad cache event")
		}
		r.Attribution.Events = append(r.Attribution.Events, lanes.CacheEvent{Kind: e.Kind, Key: e.Key, Detail: e.Detail, Reason: e.Reason})
	}
	for _, t := range w.GetPreparation().GetTimings() {
		if t == nil || t.Stage == 0 || t.Stage > math.MaxUint8 || t.Nodes < 0 || t.Nodes > math.MaxInt32 || t.TookNs < 0 {
			return WireErr("bad preparation timing")
		}
		r.Attribution.Preparation = append(r.Attribution.Preparation, cache.Timing{Stage: cache.Stage(t.Stage), Nodes: int(t.Nodes), Took: time.Duration(t.TookNs)})
	}
	for _, b := range w.Released {
		buf, err := BufferFromWire(b)
		if err != nil {
			return err
		}
		r.Released = append(r.Released, buf)
	}
	if w.HostTimed {
		if w.HostStartUnixNano <= 0 {
			return WireErr("a timed receipt with no start")
		}
		r.HostStart, r.HostTimed = time.Duration(w.HostStartUnixNano), true
	}
	return nil
}

// logicalFromWire decodes a segment's logical commands (three numbers
// each), at most MaxEntries of them: a segment holds no more commands
// than the batch that captured it.
func logicalFromWire(vs []int64) ([]programs.LogicalCommand, error) {
	if len(vs) == 0 {
		return nil, nil
	}
	if len(vs)%3 != 0 || len(vs) > 3*MaxEntries {
		return nil, WireErr("a segment's logical commands of %d numbers: three each, at most %d commands", len(vs), MaxEntries)
	}
	out := make([]programs.LogicalCommand, len(vs)/3)
	for i := range out {
		ordinal, node, nodes := vs[3*i], vs[3*i+1], vs[3*i+2]
		if ordinal < 0 || ordinal > math.MaxInt32 || node < math.MinInt32 || node > math.MaxInt32 || nodes < 0 || nodes > math.MaxInt32 {
			return nil, WireErr("a logical command out of range")
		}
		out[i] = programs.LogicalCommand{Ordinal: int(ordinal), Node: int(node), GraphNodes: int(nodes)}
	}
	return out, nil
}
