// The rest of a receipt on the wire: its replayed segments, timed spans,
// prelude, cache events, released buffers and host start, so that a
// receipt through a front is the receipt one process gets.

package remote

import (
	"time"

	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote/wirepb"
)

// Bounds of the rest of a receipt a front takes.
const (
	maxReceiptSpans  = 2 * MaxEntries
	maxReceiptEvents = MaxEntries
	maxReceiptString = 1024
)

// restToWire puts the rest of r on w (its segments too: a host's
// templated receipts send theirs as encodeAttribution says).
func restToWire(w *wirepb.Receipt, r lanes.Receipt) {
	w.Segments = segmentsToWire(r.Attribution.Segments)
	for _, s := range r.Spans {
		w.Spans = append(w.Spans, &wirepb.SpanTiming{Index: uint32(max(s.Index, 0)), Segment: s.Segment, OffsetNs: s.Offset.Nanoseconds(), DurationNs: s.Duration.Nanoseconds()})
	}
	w.Prelude = uint32(max(r.Attribution.Prelude, 0))
	for _, e := range r.Attribution.Events {
		w.Events = append(w.Events, &wirepb.CacheEvent{Kind: e.Kind, Key: e.Key, Detail: e.Detail})
	}
	for _, b := range r.Released {
		w.Released = append(w.Released, bufferToWire(b))
	}
}

// segmentsToWire encodes a receipt's replayed segments (their logical
// commands stay on the host).
func segmentsToWire(segs []lanes.SegmentRecord) []*wirepb.Segment {
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
		out[i] = w
	}
	return out
}

// sameSegments reports whether two receipts' segments say the same (a
// host leaves a template's segments out when they do).
func sameSegments(a, b []lanes.SegmentRecord) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Start != y.Start || x.End != y.End || x.Fingerprint != y.Fingerprint || x.Ordinal != y.Ordinal || x.Commands != y.Commands ||
			x.GraphNodes != y.GraphNodes || (x.Program == nil) != (y.Program == nil) || x.Program != nil && *x.Program != *y.Program {
			return false
		}
	}
	return true
}

// restFromWire decodes the rest of a receipt onto r, checking its bounds.
func restFromWire(w *wirepb.Receipt, r *lanes.Receipt) error {
	switch {
	case len(w.Segments) > MaxEntries:
		return wireErr("%d segments; at most %d", len(w.Segments), MaxEntries)
	case len(w.Spans) > maxReceiptSpans:
		return wireErr("%d spans; at most %d", len(w.Spans), maxReceiptSpans)
	case len(w.Events) > maxReceiptEvents:
		return wireErr("%d cache events; at most %d", len(w.Events), maxReceiptEvents)
	case len(w.Released) > MaxRetain:
		return wireErr("%d released buffers; at most %d", len(w.Released), MaxRetain)
	case w.Prelude > MaxEntries:
		return wireErr("a prelude of %d commands", w.Prelude)
	}
	for _, s := range w.Segments {
		if s == nil || s.End < s.Start || s.End > MaxEntries || len(s.Fingerprint) > maxReceiptString ||
			len(s.ProgramRuntime) > programs.MaxIDBytes || len(s.ProgramName) > programs.MaxIDBytes || s.Ordinal < -1 {
			return wireErr("bad segment")
		}
		seg := lanes.SegmentRecord{Start: int(s.Start), End: int(s.End), Fingerprint: s.Fingerprint, Ordinal: int(s.Ordinal),
			Commands: int(s.Commands), GraphNodes: int(s.GraphNodes)}
		if s.ProgramRuntime != "" || s.ProgramName != "" {
			seg.Program = &programs.ID{Runtime: s.ProgramRuntime, Name: s.ProgramName}
		}
		r.Attribution.Segments = append(r.Attribution.Segments, seg)
	}
	for _, s := range w.Spans {
		if s == nil || s.OffsetNs < 0 || s.DurationNs < 0 || s.Index > 2*MaxEntries {
			return wireErr("bad span")
		}
		r.Spans = append(r.Spans, lanes.SpanTiming{Index: int(s.Index), Segment: s.Segment, Offset: time.Duration(s.OffsetNs), Duration: time.Duration(s.DurationNs)})
	}
	r.Attribution.Prelude = int(w.Prelude)
	for _, e := range w.Events {
		if e == nil || len(e.Kind) > maxReceiptString || len(e.Key) > maxReceiptString || len(e.Detail) > maxReceiptString {
			return wireErr("bad cache event")
		}
		r.Attribution.Events = append(r.Attribution.Events, lanes.CacheEvent{Kind: e.Kind, Key: e.Key, Detail: e.Detail})
	}
	for _, b := range w.Released {
		buf, err := bufferFromWire(b)
		if err != nil {
			return err
		}
		r.Released = append(r.Released, buf)
	}
	if w.HostTimed {
		if w.HostStartUnixNano <= 0 {
			return wireErr("a timed receipt with no start")
		}
		r.HostStart, r.HostTimed = time.Duration(w.HostStartUnixNano), true
	}
	return nil
}
