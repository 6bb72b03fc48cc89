// Program descriptors: a program's ID, its capture, segments and gaps, and
// their validation.

package programs

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// ID names a program. It carries the runtime implementation
// fingerprint it was registered under, so a reference made against another
// runtime (another build, another device backend) is rejected rather than
// replayed.
type ID struct {
	Runtime string // runtime implementation fingerprint
	Name    string // the plan's name for the program
}

// MaxIDBytes is the longest runtime fingerprint, and the longest name, of
// a program id.
const MaxIDBytes = 256

// String prints "runtime/name".
func (id ID) String() string { return id.Runtime + "/" + id.Name }

func (id ID) compare(o ID) int {
	if c := strings.Compare(id.Runtime, o.Runtime); c != 0 {
		return c
	}
	return strings.Compare(id.Name, o.Name)
}

// Capture describes a plan's topology as a batch declares it while
// preparation is open: how many nodes, which must run eagerly, and which are
// per-wave binding nodes (written before every replay of their segment).
type Capture struct {
	ID              ID
	Nodes           int
	EagerBoundaries []int // sorted, unique, < Nodes
	Bindings        []int // sorted, unique, < Nodes, not eager boundaries
}

// MaxNodes is the most plan nodes a program may declare: more than any
// inference plan has, few enough that the catalog's per-node records of
// one registration stay small.
const MaxNodes = 1 << 16

// Errors of programs, each wrapped with what was wrong and classified by
// [cuda.Classify] as program_invalid.
var (
	ErrTopology        = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: invalid program topology")
	ErrForeignRuntime  = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: program of another runtime")
	ErrNotSealed       = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: the catalog needs a sealed cache")
	ErrUnknownProgram  = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: no such program")
	ErrSegmentMismatch = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: segment reference differs from the sealed catalog")
	ErrNotResident     = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: segment executable is not resident")
	ErrNoAttribution   = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: segment lacks logical graph-node attribution")
	ErrMonotonic       = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: update is not monotonic")
	ErrRegistration    = cuda.NewSentinel(cuda.CodeProgramInvalid, "programs: batch does not match its capture")
)

func sortedUnique(name string, v []int, n int) error {
	for i, x := range v {
		if x < 0 || x >= n {
			return fmt.Errorf("%w: %s node %d is outside 0..%d", ErrTopology, name, x, n-1)
		}
		if i > 0 && v[i-1] >= x {
			return fmt.Errorf("%w: %s nodes %v are not sorted and unique", ErrTopology, name, v)
		}
	}
	return nil
}

// Validate checks the capture's topology.
func (c Capture) Validate() error {
	if c.ID.Runtime == "" || c.ID.Name == "" {
		return fmt.Errorf("%w: program id %q needs a runtime fingerprint and a name", ErrTopology, c.ID)
	}
	if len(c.ID.Runtime) > MaxIDBytes || len(c.ID.Name) > MaxIDBytes {
		return fmt.Errorf("%w: program id of %d+%d bytes; a runtime fingerprint and a name have at most %d bytes each", ErrTopology, len(c.ID.Runtime), len(c.ID.Name), MaxIDBytes)
	}
	if !utf8.ValidString(c.ID.Runtime) || !utf8.ValidString(c.ID.Name) {
		return fmt.Errorf("%w: program id %.40q: a runtime fingerprint and a name are UTF-8 (reports, spans and the wire carry them as text)", ErrTopology, c.ID.String())
	}
	if c.Nodes <= 0 || c.Nodes > MaxNodes {
		return fmt.Errorf("%w: program %s has %d nodes; it needs between 1 and %d", ErrTopology, c.ID, c.Nodes, MaxNodes)
	}
	if err := sortedUnique("eager boundary", c.EagerBoundaries, c.Nodes); err != nil {
		return err
	}
	if err := sortedUnique("binding", c.Bindings, c.Nodes); err != nil {
		return err
	}
	for _, b := range c.Bindings {
		if _, eager := slices.BinarySearch(c.EagerBoundaries, b); eager {
			return fmt.Errorf("%w: node %d is both a binding node and an eager boundary", ErrTopology, b)
		}
	}
	return nil
}

// Segment is one resident segment of a program: the plan nodes [Start, End)
// replayed by one executable, its ordinal among the program's segments, and
// the logical commands it stands for.
type Segment struct {
	Ordinal  int
	Start    int
	End      int
	Commands int
}

// Contains reports whether node n is in the segment.
func (s Segment) Contains(n int) bool { return s.Start <= n && n < s.End }

// Gap is a plan node that is neither in a resident segment nor an eager
// boundary, with the typed reason it is not replayed.
type Gap struct {
	Node   int
	Reason cache.Reason
}

// Descriptor is a program as the catalog shows it.
type Descriptor struct {
	Capture
	Segments        []Segment
	SegmentBindings []int // the capture's binding nodes that lie inside segments
	Gaps            []Gap
}

// DeterminismReady reports whether every node is resident or an eager
// boundary: such a program replays the same way every time, and changes only
// through an explicit eviction.
func (d Descriptor) DeterminismReady() bool { return len(d.Gaps) == 0 }

// validate checks that every node is in exactly one of a segment, the eager
// boundaries, or the gaps, and that segments are ordered by ordinal.
func (d Descriptor) validate() error {
	if err := d.Capture.Validate(); err != nil {
		return err
	}
	owner := make([]string, d.Nodes)
	claim := func(n int, what string) error {
		if n < 0 || n >= d.Nodes {
			return fmt.Errorf("%w: %s names node %d outside 0..%d", ErrTopology, what, n, d.Nodes-1)
		}
		if owner[n] != "" {
			return fmt.Errorf("%w: node %d is both %s and %s", ErrTopology, n, owner[n], what)
		}
		owner[n] = what
		return nil
	}
	for i, s := range d.Segments {
		if s.Ordinal != i || s.Start >= s.End || s.Commands <= 0 {
			return fmt.Errorf("%w: segment %+v at position %d", ErrTopology, s, i)
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
			return fmt.Errorf("%w: gaps are not sorted by node", ErrTopology)
		}
		if g.Reason == cache.ReasonNone {
			return fmt.Errorf("%w: gap at node %d has no reason", ErrTopology, g.Node)
		}
		if err := claim(g.Node, "a gap"); err != nil {
			return err
		}
	}
	for n, o := range owner {
		if o == "" {
			return fmt.Errorf("%w: node %d is in no segment, boundary or gap", ErrTopology, n)
		}
	}
	return nil
}

// segmentBindings keeps the binding nodes that lie inside some segment.
func segmentBindings(bindings []int, segs []Segment) []int {
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

func (d Descriptor) equal(o Descriptor) bool {
	return d.ID == o.ID && d.Nodes == o.Nodes && slices.Equal(d.EagerBoundaries, o.EagerBoundaries) &&
		slices.Equal(d.Bindings, o.Bindings) && slices.Equal(d.Segments, o.Segments) &&
		slices.Equal(d.SegmentBindings, o.SegmentBindings) && slices.Equal(d.Gaps, o.Gaps)
}

// Invocation is a reference to one segment of a sealed program: plain data
// that can cross a wire. A submission that carries one is validated against
// the catalog before anything is enqueued.
type Invocation struct {
	Program ID
	Segment Segment
}
