// Checking a program's descriptor: its nodes claimed once each, its
// bindings within segments, two descriptors the same.

package catalog

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lanesched/lanes/cache"
	programs "github.com/lanesched/lanes/programs"
)

// compareIDs orders ids by runtime, then name.
func compareIDs(id, o programs.ID) int {
	if c := strings.Compare(id.Runtime, o.Runtime); c != 0 {
		return c
	}
	return strings.Compare(id.Name, o.Name)
}

// validateDescriptor checks that every node is in exactly one of a segment, the eager
// boundaries, or the gaps, and that segments are ordered by ordinal.
func validateDescriptor(d programs.Descriptor) error {
	if err := d.Capture.Validate(); err != nil {
		return err
	}
	owner := make([]string, d.Nodes)
	claim := func(n int, what string) error {
		if n < 0 || n >= d.Nodes {
			return fmt.Errorf("%w: %s names node %d outside 0..%d", programs.ErrTopology, what, n, d.Nodes-1)
		}
		if owner[n] != "" {
			return fmt.Errorf("%w: node %d is both %s and %s", programs.ErrTopology, n, owner[n], what)
		}
		owner[n] = what
		return nil
	}
	for i, s := range d.Segments {
		if s.Ordinal != i || s.Start >= s.End || s.Commands <= 0 {
			return fmt.Errorf("%w: segment %+v at position %d", programs.ErrTopology, s, i)
		}
		for n := s.Start; n < s.End; n++ {
			if err := claim(n, fmt.Sprintf("segment %d", i)); err != nil {
				return err
			}
		}
	}
	for _, n := range d.EagerBoundaries {
		if err := claim(n, "an eager boundary"); err != nil {
			return err
		}
	}
	for i, g := range d.Gaps {
		if i > 0 && d.Gaps[i-1].Node >= g.Node {
			return fmt.Errorf("%w: gaps are not sorted by node", programs.ErrTopology)
		}
		if g.Reason == cache.ReasonNone {
			return fmt.Errorf("%w: gap at node %d has no reason", programs.ErrTopology, g.Node)
		}
		if err := claim(g.Node, "a gap"); err != nil {
			return err
		}
	}
	for n, o := range owner {
		if o == "" {
			return fmt.Errorf("%w: node %d is in no segment, boundary or gap", programs.ErrTopology, n)
		}
	}
	return nil
}

// segmentBindings keeps the binding nodes that lie inside some segment.
func segmentBindings(bindings []int, segs []programs.Segment) []int {
	var out []int
	for _, b := range bindings {
		for _, s := range segs {
			if s.Contains(b) {
				out = append(out, b)
				break
			}
		}
	}
	return out
}

// equalDescriptors reports whether two descriptors are the same.
func equalDescriptors(d, o programs.Descriptor) bool {
	return d.ID == o.ID && d.Nodes == o.Nodes && slices.Equal(d.EagerBoundaries, o.EagerBoundaries) &&
		slices.Equal(d.Bindings, o.Bindings) && slices.Equal(d.Segments, o.Segments) &&
		slices.Equal(d.SegmentBindings, o.SegmentBindings) && slices.Equal(d.Gaps, o.Gaps)
}
