// The Catalog: programs registered from captured batches, their segments,
// invocation by reference, and the gaps a program leaves eager.

package catalog

import (
	"fmt"
	"slices"
	"sort"

	"github.com/lanesched/lanes/cache"
	discovery "github.com/lanesched/lanes/internal/discovery"

	programs "github.com/lanesched/lanes/programs"

	execcache "github.com/lanesched/lanes/internal/execcache"
)

type segment struct {
	desc        programs.Segment
	key         discovery.SegmentKey
	fingerprint string
	logical     []programs.LogicalCommand // nil when the capture could not attribute graph nodes
}

type program struct {
	desc     programs.Descriptor
	segments []segment
}

// Catalog is the program catalog of one lane: the programs registered while
// its cache's preparation was open, readable once the cache is sealed. Like
// the cache it is owned by the lane and not safe for concurrent use.
type Catalog struct {
	runtime  string
	cache    *execcache.Cache
	programs map[programs.ID]*program
}

// New returns an empty catalog for a runtime implementation fingerprint,
// backed by the lane's cache.
func New(runtime string, c *execcache.Cache) *Catalog {
	return &Catalog{runtime: runtime, cache: c, programs: map[programs.ID]*program{}}
}

// Runtime is the runtime implementation fingerprint programs must carry.
func (c *Catalog) Runtime() string { return c.runtime }

// Register records the program a batch declared, from what discovery and
// preparation did with it: its resident candidates become segments over
// their plan nodes, and every node that is neither resident nor an eager
// boundary becomes a typed gap. Registration happens only while the cache's
// preparation is open (it reports false otherwise). An update of a known
// program must be monotonic: it may keep resident segments and fill gaps,
// never change a segment's identity, topology or bindings, and a
// determinism-ready program may not change at all.
func (c *Catalog) Register(capture programs.Capture, batch []discovery.Command, disc discovery.Discovery, rep discovery.PrepareReport) (bool, error) {
	if c.cache.Preparation().State != cache.PrepOpen {
		return false, nil
	}
	if err := capture.Validate(); err != nil {
		return false, err
	}
	if capture.ID.Runtime != c.runtime {
		return false, fmt.Errorf("%w: program %s was declared for runtime %q; this lane runs %q", programs.ErrForeignRuntime, capture.ID, capture.ID.Runtime, c.runtime)
	}
	if len(disc.Reasons) != len(batch) || len(disc.Bindings) != len(batch) || len(rep.Dispositions) != len(disc.Candidates) {
		return false, fmt.Errorf("%w: %d commands, %d discovery reasons, %d candidates, %d dispositions: attribution lengths differ",
			programs.ErrRegistration, len(batch), len(disc.Reasons), len(disc.Candidates), len(rep.Dispositions))
	}
	for i, cmd := range batch {
		if cmd.Node >= capture.Nodes {
			return false, fmt.Errorf("%w: command %d names node %d of a %d-node program", programs.ErrRegistration, i, cmd.Node, capture.Nodes)
		}
	}
	if len(capture.EagerBoundaries) == capture.Nodes {
		return false, nil
	}
	var segs []segment
	for ci, cand := range disc.Candidates {
		exe, resident := c.cache.Lookup(cand.Key)
		if !rep.Dispositions[ci].Resident() || !resident {
			continue
		}
		s, err := newSegment(len(segs), cand, batch, exe)
		if err != nil {
			return false, err
		}
		segs = append(segs, s)
	}
	desc := programs.Descriptor{Capture: capture}
	for _, s := range segs {
		desc.Segments = append(desc.Segments, s.desc)
	}
	desc.SegmentBindings = segmentBindings(capture.Bindings, desc.Segments)
	desc.Gaps = gaps(capture, desc.Segments, batch, disc, rep)
	if err := validateDescriptor(desc); err != nil {
		return false, err
	}
	next := &program{desc: desc, segments: segs}
	if cur, ok := c.programs[capture.ID]; ok {
		if err := cur.validateUpdate(next); err != nil {
			return false, err
		}
	}
	c.programs[capture.ID] = next
	return true, nil
}

// newSegment makes the segment of a resident candidate: its commands must
// cover one contiguous range of plan nodes, one command per node.
func newSegment(ordinal int, cand discovery.Candidate, batch []discovery.Command, exe *execcache.Executable) (segment, error) {
	start := batch[cand.Start].Node
	if start == cache.NoNode {
		return segment{}, fmt.Errorf("%w: resident segment at commands %d..%d has no first plan node", programs.ErrRegistration, cand.Start, cand.End)
	}
	s := segment{desc: programs.Segment{Ordinal: ordinal, Start: start, End: start + cand.Len(), Commands: cand.Len()}, key: cand.Key, fingerprint: cand.Key.String()}
	for i := cand.Start; i < cand.End; i++ {
		if batch[i].Node != start+(i-cand.Start) {
			return segment{}, fmt.Errorf("%w: resident segment at commands %d..%d does not cover one contiguous plan-node range (command %d is node %d)",
				programs.ErrRegistration, cand.Start, cand.End, i, batch[i].Node)
		}
	}
	if len(exe.NodeCounts) == cand.Len() {
		for k, n := range exe.NodeCounts {
			s.logical = append(s.logical, programs.LogicalCommand{Ordinal: k, Node: start + k, GraphNodes: n})
		}
	}
	return s, nil
}

func (p *program) equal(o *program) bool {
	return equalDescriptors(p.desc, o.desc) && slices.EqualFunc(p.segments, o.segments, func(a, b segment) bool {
		return a.desc == b.desc && a.key == b.key && a.fingerprint == b.fingerprint && slices.Equal(a.logical, b.logical)
	})
}

// validateUpdate checks that next is a monotonic update of p.
func (p *program) validateUpdate(next *program) error {
	cur, nd := p.desc, next.desc
	if cur.ID != nd.ID || cur.Nodes != nd.Nodes || !slices.Equal(cur.EagerBoundaries, nd.EagerBoundaries) {
		return fmt.Errorf("%w: program %s changed its logical topology (nodes %d -> %d, eager boundaries %v -> %v); register it under a new name",
			programs.ErrMonotonic, cur.ID, cur.Nodes, nd.Nodes, cur.EagerBoundaries, nd.EagerBoundaries)
	}
	for _, s := range p.segments {
		i := slices.IndexFunc(next.segments, func(o segment) bool { return o.desc.Start == s.desc.Start && o.desc.End == s.desc.End })
		if i < 0 {
			return fmt.Errorf("%w: program %s: resident segment over nodes %d..%d disappeared without an explicit eviction", programs.ErrMonotonic, cur.ID, s.desc.Start, s.desc.End)
		}
		o := next.segments[i]
		if s.key != o.key || s.desc.Commands != o.desc.Commands || s.fingerprint != o.fingerprint || !slices.Equal(s.logical, o.logical) {
			return fmt.Errorf("%w: program %s: resident segment over nodes %d..%d changed its executable (%s -> %s) or logical attribution",
				programs.ErrMonotonic, cur.ID, s.desc.Start, s.desc.End, s.key.Short(), o.key.Short())
		}
		if !slices.Equal(bindingsIn(cur.SegmentBindings, s.desc), bindingsIn(nd.SegmentBindings, o.desc)) {
			return fmt.Errorf("%w: program %s: resident segment over nodes %d..%d changed its per-wave binding nodes", programs.ErrMonotonic, cur.ID, s.desc.Start, s.desc.End)
		}
	}
	if cur.DeterminismReady() && !p.equal(next) {
		return fmt.Errorf("%w: program %s is determinism-ready and changed without an explicit eviction", programs.ErrMonotonic, cur.ID)
	}
	return nil
}

func bindingsIn(b []int, s programs.Segment) []int {
	var out []int
	for _, n := range b {
		if s.Contains(n) {
			out = append(out, n)
		}
	}
	return out
}

// Evict rewrites every program that used an evicted executable: its segments
// become gaps with ReasonEvicted and the remaining segments are renumbered;
// a program left with no segment is forgotten (an invocation of it is then
// ErrUnknownProgram), so the catalog holds no more programs than the cache
// holds executables. It returns how many programs changed. Call it with every key a cache
// preparation or explicit eviction reports.
func (c *Catalog) Evict(key discovery.SegmentKey) (int, error) {
	changed := 0
	for id, p := range c.programs {
		if !slices.ContainsFunc(p.segments, func(s segment) bool { return s.key == key }) {
			continue
		}
		np := &program{desc: programs.Descriptor{Capture: p.desc.Capture, Gaps: slices.Clone(p.desc.Gaps)}}
		for _, s := range p.segments {
			if s.key == key {
				for n := s.desc.Start; n < s.desc.End; n++ {
					np.desc.Gaps = append(np.desc.Gaps, programs.Gap{Node: n, Reason: cache.ReasonEvicted})
				}
				continue
			}
			s.desc.Ordinal = len(np.segments)
			np.segments = append(np.segments, s)
			np.desc.Segments = append(np.desc.Segments, s.desc)
		}
		if len(np.segments) == 0 {
			delete(c.programs, id)
			changed++
			continue
		}
		sort.Slice(np.desc.Gaps, func(i, j int) bool { return np.desc.Gaps[i].Node < np.desc.Gaps[j].Node })
		np.desc.SegmentBindings = segmentBindings(p.desc.Bindings, np.desc.Segments)
		if err := validateDescriptor(np.desc); err != nil {
			return changed, err
		}
		c.programs[id] = np
		changed++
	}
	return changed, nil
}

// Remove forgets a program and returns the keys of its segments'
// executables, for the caller to evict (and to Evict from the catalog, so
// that any other program using one of them turns it into a gap).
func (c *Catalog) Remove(id programs.ID) []discovery.SegmentKey {
	p, ok := c.programs[id]
	if !ok {
		return nil
	}
	delete(c.programs, id)
	keys := make([]discovery.SegmentKey, len(p.segments))
	for i, s := range p.segments {
		keys[i] = s.key
	}
	return keys
}

// Trim forgets every program; call it when the cache is trimmed.
func (c *Catalog) Trim() int {
	n := len(c.programs)
	c.programs = map[programs.ID]*program{}
	return n
}

// Programs returns the sealed catalog, sorted by program id. It refuses
// before the cache is sealed, and if any segment's executable is no longer
// resident.
func (c *Catalog) Programs() ([]programs.Descriptor, error) {
	if st := c.cache.Preparation().State; st != cache.PrepSealed {
		return nil, fmt.Errorf("%w: the cache is %v; seal it first", programs.ErrNotSealed, st)
	}
	if err := c.residency(); err != nil {
		return nil, err
	}
	out := make([]programs.Descriptor, 0, len(c.programs))
	for _, p := range c.programs {
		out = append(out, p.desc)
	}
	sort.Slice(out, func(i, j int) bool { return compareIDs(out[i].ID, out[j].ID) < 0 })
	return out, nil
}

func (c *Catalog) residency() error {
	for _, p := range c.programs {
		for _, s := range p.segments {
			if _, ok := c.cache.Lookup(s.key); !ok {
				return fmt.Errorf("%w: program %s segment %d (%s)", programs.ErrNotResident, p.desc.ID, s.desc.Ordinal, s.key.Short())
			}
		}
	}
	return nil
}

// Resolved is a validated invocation: the executable to launch and, when
// recorded, the logical commands it stands for.
type Resolved struct {
	Key     discovery.SegmentKey
	Logical []programs.LogicalCommand
}

// Resolve validates an invocation against the sealed catalog before
// anything is enqueued: the runtime, the program, the segment ordinal, the
// descriptor's equality with the catalog's, residency, and, when
// needAttribution, the logical attribution.
func (c *Catalog) Resolve(inv programs.Invocation, needAttribution bool) (Resolved, error) {
	if inv.Program.Runtime != c.runtime {
		return Resolved{}, fmt.Errorf("%w: invocation of %s on a lane running %q", programs.ErrForeignRuntime, inv.Program, c.runtime)
	}
	if st := c.cache.Preparation().State; st != cache.PrepSealed {
		return Resolved{}, fmt.Errorf("%w: the cache is %v", programs.ErrNotSealed, st)
	}
	p, ok := c.programs[inv.Program]
	if !ok {
		return Resolved{}, fmt.Errorf("%w: %s is not in the sealed catalog (never registered on this lane, or every segment of it was evicted)", programs.ErrUnknownProgram, inv.Program)
	}
	o := inv.Segment.Ordinal
	if o < 0 || o >= len(p.segments) {
		return Resolved{}, fmt.Errorf("%w: %s has %d segments; ordinal %d is outside them", programs.ErrSegmentMismatch, inv.Program, len(p.segments), o)
	}
	s := p.segments[o]
	if s.desc != inv.Segment {
		return Resolved{}, fmt.Errorf("%w: %s segment %d is %+v in the catalog, the invocation says %+v", programs.ErrSegmentMismatch, inv.Program, o, s.desc, inv.Segment)
	}
	if _, ok := c.cache.Lookup(s.key); !ok {
		return Resolved{}, fmt.Errorf("%w: %s segment %d (%s)", programs.ErrNotResident, inv.Program, o, s.key.Short())
	}
	if needAttribution && s.logical == nil {
		return Resolved{}, fmt.Errorf("%w: %s segment %d", programs.ErrNoAttribution, inv.Program, o)
	}
	return Resolved{Key: s.key, Logical: s.logical}, nil
}

// CheckInvariants verifies that every program's nodes are each in exactly
// one of a segment, an eager boundary or a gap, and that every segment's
// executable is resident. Tests call it after every operation.
func (c *Catalog) CheckInvariants() error {
	for _, p := range c.programs {
		if err := validateDescriptor(p.desc); err != nil {
			return err
		}
		if len(p.segments) != len(p.desc.Segments) {
			return fmt.Errorf("programs: %s has %d segments and %d descriptors", p.desc.ID, len(p.segments), len(p.desc.Segments))
		}
	}
	return c.residency()
}
