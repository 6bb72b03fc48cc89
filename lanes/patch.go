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
