// Program descriptors: a program's ID, its capture, segments and gaps, and
// their validation.

package programs

import (
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/internal/codes"
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
	ErrTopology        = codes.NewSentinel(codes.ProgramInvalid, "programs: invalid program topology")
	ErrForeignRuntime  = codes.NewSentinel(codes.ProgramInvalid, "programs: program of another runtime")
	ErrNotSealed       = codes.NewSentinel(codes.ProgramInvalid, "programs: the catalog needs a sealed cache")
	ErrUnknownProgram  = codes.NewSentinel(codes.ProgramInvalid, "programs: no such program")
	ErrSegmentMismatch = codes.NewSentinel(codes.ProgramInvalid, "programs: segment reference differs from the sealed catalog")
	ErrNotResident     = codes.NewSentinel(codes.ProgramInvalid, "programs: segment executable is not resident")
	ErrNoAttribution   = codes.NewSentinel(codes.ProgramInvalid, "programs: segment lacks logical graph-node attribution")
	ErrMonotonic       = codes.NewSentinel(codes.ProgramInvalid, "programs: update is not monotonic")
	ErrRegistration    = codes.NewSentinel(codes.ProgramInvalid, "programs: batch does not match its capture")
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

// Invocation is a reference to one segment of a sealed program: plain data
// that can cross a wire. A submission that carries one is validated against
// the catalog before anything is enqueued.
type Invocation struct {
	Program ID
	Segment Segment
}

// LogicalCommand attributes one command of a resident segment: its ordinal
// within the segment, its plan node and the graph nodes it captured.
type LogicalCommand struct {
	Ordinal    int
	Node       int
	GraphNodes int
}
