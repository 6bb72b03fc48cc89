// Programs on the wire: a batch's program declaration, its invocations of
// sealed program segments and its binding patches, each checked as it is
// decoded; and the scoping of program names to a host's registration.

package wire

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// Wire limits of programs: a decoder refuses more than these.
const (
	// MaxProgramName is the longest program name a front takes, in bytes:
	// a host scopes each to the registration it came under (as it does a
	// tenant's name), within programs.MaxIDBytes.
	MaxProgramName = programs.MaxIDBytes - 16
	// MaxPatches bounds a batch's binding patches, and MaxLayoutFields a
	// patch layout's fields.
	MaxPatches      = 1 << 12
	MaxLayoutFields = 1 << 12
	// MaxCatalogPrograms bounds the programs a catalog answer carries (a
	// lane holds at most as many programs as executables).
	MaxCatalogPrograms = 1 << 14
)

func programIDToWire(id programs.ID) *wirepb.ProgramID {
	return &wirepb.ProgramID{Runtime: id.Runtime, Name: id.Name}
}

// programIDFromWire decodes a program id as a front names it: its name at
// most MaxProgramName bytes, so that the host can scope it.
func programIDFromWire(w *wirepb.ProgramID) (programs.ID, error) {
	switch {
	case w == nil:
		return programs.ID{}, WireErr("a program with no id")
	case len(w.Runtime) > programs.MaxIDBytes || len(w.Name) > MaxProgramName:
		return programs.ID{}, WireErr("program id of %d and %d bytes; at most %d and %d", len(w.Runtime), len(w.Name), programs.MaxIDBytes, MaxProgramName)
	case !utf8.ValidString(w.Runtime) || !utf8.ValidString(w.Name):
		return programs.ID{}, WireErr("program id %.40q/%.40q is not UTF-8", w.Runtime, w.Name)
	}
	return programs.ID{Runtime: w.Runtime, Name: w.Name}, nil
}

// checkProgramID refuses, before encoding, a program id a host would
// refuse: too long to scope, or not UTF-8.
func checkProgramID(id programs.ID, what string) error {
	if _, err := programIDFromWire(programIDToWire(id)); err != nil {
		return fmt.Errorf("%s: %w (a front's program names are at most lanes.MaxProgramName bytes)", what, err)
	}
	return nil
}

func segmentToWire(s programs.Segment) *wirepb.ProgramSegment {
	return &wirepb.ProgramSegment{Ordinal: int64(s.Ordinal), Start: int64(s.Start), End: int64(s.End), Commands: int64(s.Commands)}
}

func segmentFromWire(w *wirepb.ProgramSegment) (programs.Segment, error) {
	if w == nil {
		return programs.Segment{}, nil // the zero segment: the catalog refuses it unless it is one
	}
	var s programs.Segment
	for _, f := range []struct {
		v   int64
		dst *int
	}{{w.Ordinal, &s.Ordinal}, {w.Start, &s.Start}, {w.End, &s.End}, {w.Commands, &s.Commands}} {
		if f.v < 0 || f.v > programs.MaxNodes {
			return programs.Segment{}, WireErr("program segment field %d out of range 0 to %d", f.v, programs.MaxNodes)
		}
		*f.dst = int(f.v)
	}
	return s, nil
}

// NodesToWire is node indices (or any ints) in wire form; nil for none.
func NodesToWire(ns []int) []int64 {
	if len(ns) == 0 {
		return nil
	}
	out := make([]int64, len(ns))
	for i, n := range ns {
		out[i] = int64(n)
	}
	return out
}

func nodesFromWire(ns []int64, what string) ([]int, error) {
	if len(ns) > programs.MaxNodes {
		return nil, WireErr("%d %s; a program has at most %d nodes", len(ns), what, programs.MaxNodes)
	}
	var out []int
	for _, n := range ns {
		if n < 0 || n > programs.MaxNodes {
			return nil, WireErr("%s node %d out of range", what, n)
		}
		out = append(out, int(n))
	}
	return out, nil
}

func captureToWire(c programs.Capture) *wirepb.ProgramCapture {
	return &wirepb.ProgramCapture{Id: programIDToWire(c.ID), Nodes: int64(c.Nodes), EagerBoundaries: NodesToWire(c.EagerBoundaries), Bindings: NodesToWire(c.Bindings)}
}

// captureFromWire decodes a program declaration; the lane validates its
// topology (programs.Capture.Validate) as it does any batch's.
func captureFromWire(w *wirepb.ProgramCapture) (programs.Capture, error) {
	id, err := programIDFromWire(w.Id)
	if err != nil {
		return programs.Capture{}, err
	}
	if w.Nodes < 0 || w.Nodes > programs.MaxNodes {
		return programs.Capture{}, WireErr("a program of %d nodes; at most %d", w.Nodes, programs.MaxNodes)
	}
	c := programs.Capture{ID: id, Nodes: int(w.Nodes)}
	if c.EagerBoundaries, err = nodesFromWire(w.EagerBoundaries, "eager boundaries"); err != nil {
		return programs.Capture{}, err
	}
	if c.Bindings, err = nodesFromWire(w.Bindings, "bindings"); err != nil {
		return programs.Capture{}, err
	}
	return c, nil
}

// programsToWire encodes a batch's declaration and patches onto w, and
// refuses what a host would: a name too long to scope, too many patches,
// a patch past the wire's byte bound.
func programsToWire(w *wirepb.Batch, b lanes.Batch) error {
	if b.Program != nil {
		if err := b.Program.Validate(); err != nil {
			return laneerr.Wrap("submit", true, err) // as the lane says
		}
		if err := checkProgramID(b.Program.ID, "the batch's program"); err != nil {
			return err
		}
		w.Program = captureToWire(*b.Program)
	}
	if len(b.Patches) > MaxPatches {
		return TooLarge("%d patches; at most %d cross the wire in one batch", len(b.Patches), MaxPatches)
	}
	for i, p := range b.Patches {
		if len(p.Bytes) > MaxHostBytes {
			return TooLarge("patch %d writes %d bytes; at most %d cross the wire in one patch", i, len(p.Bytes), MaxHostBytes)
		}
		wp := &wirepb.Patch{Field: int64(p.Field), Dst: RegionToWire(p.Dst), Bytes: p.Bytes}
		if l := p.Layout; l != nil {
			if len(l.Fields) > MaxLayoutFields {
				return TooLarge("patch %d: a layout of %d fields; at most %d cross the wire", i, len(l.Fields), MaxLayoutFields)
			}
			if !utf8.ValidString(l.ID) {
				return WireErr("patch %d: layout id %.40q is not UTF-8", i, l.ID)
			}
			if l.Region == (cuda.Region{}) {
				return WireErr("patch %d: layout %.40q names no region: set Layout.Region to the buffer's bytes it lays out", i, l.ID)
			}
			wp.Layout = &wirepb.Layout{Id: l.ID, Region: RegionToWire(l.Region)}
			for _, f := range l.Fields {
				wp.Layout.Fields = append(wp.Layout.Fields, &wirepb.Field{Offset: f.Offset, Length: f.Length})
			}
		}
		w.Patches = append(w.Patches, wp)
	}
	return nil
}

// programsFromWire decodes a batch's declaration and patches onto b. A
// typed patch's layout is decoded once per layout id and shared by its
// patches, as a front's batch shares one *lanes.Layout.
func programsFromWire(w *wirepb.Batch, b *lanes.Batch) error {
	if w.Program != nil {
		c, err := captureFromWire(w.Program)
		if err != nil {
			return err
		}
		if err := c.Validate(); err != nil {
			return fmt.Errorf("%w: %w", ErrWire, err) // no front sends one (batchToWire refuses it)
		}
		b.Program = &c
	}
	if len(w.Patches) > MaxPatches {
		return WireErr("%d patches; at most %d", len(w.Patches), MaxPatches)
	}
	layouts := map[string]*lanes.Layout{}
	for i, wp := range w.Patches {
		if wp == nil || len(wp.Bytes) > MaxHostBytes {
			return WireErr("patch %d: malformed", i)
		}
		field, err := toInt(wp.Field, "patch field")
		if err != nil {
			return fmt.Errorf("patch %d: %w", i, err)
		}
		p := lanes.Patch{Field: field, Bytes: wp.Bytes}
		if wp.Dst != nil {
			dst, err := RegionFromWire(wp.Dst)
			if err != nil {
				return fmt.Errorf("patch %d: %w", i, err)
			}
			p.Dst = dst
		}
		if wl := wp.Layout; wl != nil {
			l, err := layoutFromWire(wl, layouts)
			if err != nil {
				return fmt.Errorf("patch %d: %w", i, err)
			}
			p.Layout = l
		}
		b.Patches = append(b.Patches, p)
	}
	return nil
}

func layoutFromWire(wl *wirepb.Layout, seen map[string]*lanes.Layout) (*lanes.Layout, error) {
	if len(wl.Fields) > MaxLayoutFields || !utf8.ValidString(wl.Id) || wl.Region == nil {
		return nil, WireErr("a malformed layout")
	}
	r, err := RegionFromWire(wl.Region)
	if err != nil {
		return nil, err
	}
	if r == (cuda.Region{}) {
		return nil, WireErr("a layout of no region") // no front sends one (programsToWire refuses it)
	}
	l := &lanes.Layout{ID: wl.Id, Region: r}
	for _, f := range wl.Fields {
		if f == nil {
			return nil, WireErr("a layout with a missing field")
		}
		l.Fields = append(l.Fields, lanes.Field{Offset: f.Offset, Length: f.Length})
	}
	if prev, ok := seen[wl.Id]; ok && sameLayout(prev, l) {
		return prev, nil
	}
	seen[wl.Id] = l
	return l, nil
}

func sameLayout(a, b *lanes.Layout) bool {
	return a.ID == b.ID && a.Region == b.Region && slices.Equal(a.Fields, b.Fields)
}

func invocationToWire(inv programs.Invocation) *wirepb.Invocation {
	return &wirepb.Invocation{Program: programIDToWire(inv.Program), Segment: segmentToWire(inv.Segment)}
}

func invocationFromWire(w *wirepb.Invocation) (*programs.Invocation, error) {
	id, err := programIDFromWire(w.Program)
	if err != nil {
		return nil, err
	}
	seg, err := segmentFromWire(w.Segment)
	if err != nil {
		return nil, err
	}
	return &programs.Invocation{Program: id, Segment: seg}, nil
}

// programScope is the suffix a host gives the program names of a
// registration (epoch): as its tenants, a front's programs are its own,
// and another front naming the same program has one of its own.
func RegistrationScope(epoch uint64) string { return "@" + strconv.FormatUint(epoch, 36) }

// scopePrograms puts the program names a freshly decoded batch declares
// and invokes in a registration's namespace (its programScope).
func scopePrograms(b *lanes.Batch, scope string) {
	if b.Program != nil && b.Program.ID.Name != "" { // an empty name stays empty: the lane refuses it
		b.Program.ID.Name += scope
	}
	for i := range b.Entries {
		if inv := b.Entries[i].Invoke; inv != nil && inv.Program.Name != "" {
			inv.Program.Name += scope
		}
	}
}

// UnscopeSegments names the programs of a receipt's segments as the front
// of the registration (epoch) named them.
func UnscopeSegments(ws []*wirepb.Segment, epoch uint64) {
	scope := ""
	for _, seg := range ws {
		if seg.ProgramName == "" {
			continue // most segments are of no program: nothing to build
		}
		if scope == "" {
			scope = RegistrationScope(epoch)
		}
		seg.ProgramName, _ = strings.CutSuffix(seg.ProgramName, scope)
	}
}

// unscopeProgram is a program's id as its front named it, and whether it
// is of the registration at all.
func unscopeProgram(id programs.ID, epoch uint64) (programs.ID, bool) {
	name, ok := strings.CutSuffix(id.Name, RegistrationScope(epoch))
	id.Name = name
	return id, ok
}

// PreparationToWire is a lane's preparation on the wire.
func PreparationToWire(p cache.Preparation) *wirepb.Preparation {
	return &wirepb.Preparation{State: uint32(p.State), Capacity: int64(p.Capacity), Resident: int64(p.Resident), Rejected: int64(p.Rejected),
		Batches: int64(p.Batches), Captured: int64(p.Captured), Uploaded: int64(p.Uploaded), CapacityDeferred: int64(p.CapacityDeferred)}
}

// PreparationFromWire is a lane's preparation from the wire, checked.
func PreparationFromWire(w *wirepb.Preparation) (cache.Preparation, error) {
	if w == nil {
		return cache.Preparation{}, WireErr("an answer with no preparation")
	}
	if w.State > uint32(cache.PrepSealed) {
		return cache.Preparation{}, WireErr("preparation state %d out of range", w.State)
	}
	p := cache.Preparation{State: cache.PrepState(w.State)}
	for _, f := range []struct {
		v   int64
		dst *int
	}{{w.Capacity, &p.Capacity}, {w.Resident, &p.Resident}, {w.Rejected, &p.Rejected}, {w.Batches, &p.Batches},
		{w.Captured, &p.Captured}, {w.Uploaded, &p.Uploaded}, {w.CapacityDeferred, &p.CapacityDeferred}} {
		v, err := toInt(f.v, "preparation count")
		if err != nil || v < 0 {
			return cache.Preparation{}, WireErr("preparation count %d out of range", f.v)
		}
		*f.dst = v
	}
	return p, nil
}

// CatalogToWire encodes the registration's programs of a lane's catalog,
// named as its front named them.
func CatalogToWire(ds []programs.Descriptor, epoch uint64) []*wirepb.ProgramDescriptor {
	var out []*wirepb.ProgramDescriptor
	for _, d := range ds {
		id, ours := unscopeProgram(d.ID, epoch)
		if !ours || len(out) == MaxCatalogPrograms {
			continue
		}
		c := d.Capture
		c.ID = id
		w := &wirepb.ProgramDescriptor{Capture: captureToWire(c), SegmentBindings: NodesToWire(d.SegmentBindings)}
		for _, s := range d.Segments {
			w.Segments = append(w.Segments, segmentToWire(s))
		}
		for _, g := range d.Gaps {
			w.Gaps = append(w.Gaps, &wirepb.Gap{Node: int64(g.Node), Reason: uint32(g.Reason)})
		}
		out = append(out, w)
	}
	return out
}

// CatalogFromWire decodes a catalog answer.
func CatalogFromWire(ws []*wirepb.ProgramDescriptor) ([]programs.Descriptor, error) {
	if len(ws) > MaxCatalogPrograms {
		return nil, WireErr("a catalog of %d programs; at most %d", len(ws), MaxCatalogPrograms)
	}
	out := make([]programs.Descriptor, 0, len(ws))
	for _, w := range ws {
		if w == nil || w.Capture == nil || len(w.Segments) > programs.MaxNodes || len(w.Gaps) > programs.MaxNodes {
			return nil, WireErr("a malformed catalog entry")
		}
		c, err := captureFromWire(w.Capture)
		if err != nil {
			return nil, err
		}
		d := programs.Descriptor{Capture: c}
		if d.SegmentBindings, err = nodesFromWire(w.SegmentBindings, "segment bindings"); err != nil {
			return nil, err
		}
		for _, ws := range w.Segments {
			s, err := segmentFromWire(ws)
			if err != nil {
				return nil, err
			}
			d.Segments = append(d.Segments, s)
		}
		for _, g := range w.Gaps {
			if g == nil || g.Node < 0 || g.Node > programs.MaxNodes || g.Reason > uint32(cache.ReasonEagerPath) {
				return nil, WireErr("a malformed catalog gap")
			}
			d.Gaps = append(d.Gaps, programs.Gap{Node: int(g.Node), Reason: cache.Reason(g.Reason)})
		}
		out = append(out, d)
	}
	return out, nil
}
