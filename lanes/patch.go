// Binding patches: small host writes coalesced into the prelude enqueued
// before a batch's entries.

package lanes

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
)

// Layout is a compiled program-binding layout: the device region a program's
// per-wave binding nodes read, divided into fields that cover it exactly, in
// order. A replayed segment reads its bindings from here, so changing them
// needs no new capture.
type Layout struct {
	ID     string
	Region cuda.Region
	Fields []Field
}

// Field is one field of a layout: a byte range of its region.
type Field struct{ Offset, Length uint64 }

// Validate checks that the fields tile the region exactly.
func (l *Layout) Validate() error {
	if l.ID == "" {
		return fmt.Errorf("%w: layout has no id", ErrPatch)
	}
	if err := l.Region.Validate(); err != nil {
		return fmt.Errorf("%w: layout %s: %w", ErrPatch, l.ID, err)
	}
	var at uint64
	for i, f := range l.Fields {
		if f.Offset != at || f.Length == 0 {
			return fmt.Errorf("%w: layout %s field %d is [%d,+%d); fields must tile the region from 0 without gaps", ErrPatch, l.ID, i, f.Offset, f.Length)
		}
		at += f.Length
	}
	if at != l.Region.Length {
		return fmt.Errorf("%w: layout %s fields cover %d of %d bytes", ErrPatch, l.ID, at, l.Region.Length)
	}
	return nil
}

// Patch is a program-binding write. A typed patch names a layout and one of
// its fields; an opaque patch names a destination region directly.
type Patch struct {
	Layout *Layout // typed: the layout
	Field  int     // typed: the field index
	Dst    cuda.Region
	Bytes  []byte
}

// coalesce turns a batch's patches into commands: every typed patch of one
// layout into one aggregate upload that covers the layout exactly (each
// field written exactly once), and the opaque patches into one eager prelude
// of uploads. Any mismatch is rejected.
func coalesce(patches []Patch) (prelude []cuda.Command, err error) {
	var layout *Layout
	var payload []byte
	var written []bool
	for i, p := range patches {
		if p.Layout == nil {
			if len(p.Bytes) == 0 {
				return nil, fmt.Errorf("%w: opaque patch %d is empty", ErrPatch, i)
			}
			up, err := cuda.Upload(p.Dst, p.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: opaque patch %d: %w", ErrPatch, i, err)
			}
			prelude = append(prelude, up)
			continue
		}
		if layout == nil {
			if err := p.Layout.Validate(); err != nil {
				return nil, err
			}
			layout, payload, written = p.Layout, make([]byte, p.Layout.Region.Length), make([]bool, len(p.Layout.Fields))
		} else if p.Layout.ID != layout.ID || p.Layout.Region != layout.Region {
			return nil, fmt.Errorf("%w: patch %d writes layout %s, the batch already patches %s; one aggregate covers one layout", ErrPatch, i, p.Layout.ID, layout.ID)
		}
		if p.Field < 0 || p.Field >= len(layout.Fields) {
			return nil, fmt.Errorf("%w: patch %d names field %d of layout %s, which has %d", ErrPatch, i, p.Field, layout.ID, len(layout.Fields))
		}
		f := layout.Fields[p.Field]
		if uint64(len(p.Bytes)) != f.Length {
			return nil, fmt.Errorf("%w: patch %d writes %d bytes into field %d of %d bytes", ErrPatch, i, len(p.Bytes), p.Field, f.Length)
		}
		if written[p.Field] {
			return nil, fmt.Errorf("%w: field %d of layout %s is patched twice", ErrPatch, p.Field, layout.ID)
		}
		written[p.Field] = true
		copy(payload[f.Offset:], p.Bytes)
	}
	if layout == nil {
		return prelude, nil
	}
	for i, w := range written {
		if !w {
			return nil, fmt.Errorf("%w: field %d of layout %s is not patched; the aggregate must cover the layout exactly", ErrPatch, i, layout.ID)
		}
	}
	for _, up := range prelude {
		if up.Dst.Overlaps(layout.Region) {
			return nil, fmt.Errorf("%w: an opaque patch overlaps layout %s", ErrPatch, layout.ID)
		}
	}
	agg, err := cuda.Upload(layout.Region, payload)
	if err != nil {
		return nil, fmt.Errorf("%w: layout %s: %w", ErrPatch, layout.ID, err)
	}
	return append([]cuda.Command{agg}, prelude...), nil
}
