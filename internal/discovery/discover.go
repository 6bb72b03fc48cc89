// Discovery: a batch's replayable runs of commands become candidates, and
// every other command gets the reason it runs eagerly.

package discovery

import (
	"fmt"
	"sort"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// Candidate is a contiguous run of replayable compute commands, [Start,
// End) in the batch, that may be captured and replayed as one executable.
type Candidate struct {
	Start, End int
	Key        SegmentKey
	Shape      ShapeKey // what it does, regardless of addresses and scalars
	Scope      cache.Scope
	Keys       []cache.Key // the command keys, in order
	Bytes      int64       // host bytes its uploads carry, which its executable retains
}

// hostBytes is the host bytes commands carry.
func hostBytes(cmds []Command) int64 {
	var n int64
	for _, c := range cmds {
		n += int64(len(c.Cmd.Host))
	}
	return n
}

// Len is the number of commands in the candidate.
func (c Candidate) Len() int { return c.End - c.Start }

// Discovery is the result of [Discover]: the candidates, and for every
// command that joins none, why.
type Discovery struct {
	Candidates []Candidate
	Bindings   []Binding // one per command
	// Reasons holds, per command, why it joins no candidate: ReasonNone for
	// candidate members, ReasonEagerBoundary, ReasonNotCompute, a binding
	// reason, or ReasonAddressScopeConflict when its run mixed two lanes.
	Reasons []cache.Reason
}

// StableTransfer reports whether commands of kind k move bytes between
// addresses that stay put (pinned staging and device memory: stage in,
// stage out, device-to-device copy, zero), so that a graph node made of one
// does at every replay what the command does: a copy from pinned staging
// reads the staging when it runs. An upload is not one: its host bytes
// would be baked into the graph.
func StableTransfer(k cuda.CommandKind) bool {
	switch k {
	case cuda.KindStageIn, cuda.KindStageOut, cuda.KindCopy, cuda.KindZero:
		return true
	}
	return false
}

// Discover finds the replay candidates of a batch: maximal contiguous runs
// of compute-phase commands that are replayable (a key and a scope for every
// region) and not on a declared eager-boundary node. A transfer of another
// phase (a step's input staged in, its readout copied out) joins the run
// beside it when it carries a key and is a [StableTransfer]: the replayed
// graph then moves the step's bytes too, so a step is one graph launch. A run whose commands'
// scopes name two different lanes is no candidate, and each of its commands
// gets ReasonAddressScopeConflict.
//
// eagerBoundaries lists plan nodes that must run eagerly. Declaring any
// requires the batch to carry node attribution (some command with a node;
// transfers may have none); a batch without it, or naming a negative node
// other than NoNode, is rejected with an error.
func Discover(cmds []Command, eagerBoundaries []int) (Discovery, error) {
	return (*Memo)(nil).Discover(cmds, eagerBoundaries)
}

// Discover is [Discover] with the memo's keys: the same discovery, without
// hashing again what the memo has seen. A memo also reuses the discovery's
// slices: what it returns is valid until its next Discover, so a caller
// keeps copies of what it needs longer (the lane plans one batch at a
// time; the cache and the catalog keep keys and reasons by value).
func (m *Memo) Discover(cmds []Command, eagerBoundaries []int) (Discovery, error) {
	if err := checkNodes(cmds, eagerBoundaries); err != nil {
		return Discovery{}, err
	}
	boundary := make(map[int]bool, len(eagerBoundaries))
	for _, n := range eagerBoundaries {
		boundary[n] = true
	}
	d, keys := m.discovery(len(cmds))
	for i, c := range cmds {
		b := m.bindCommand(c)
		d.Bindings[i] = b
		switch {
		case c.Phase != cache.PhaseCompute && !(c.HasKey && StableTransfer(c.Cmd.Kind)):
			d.Reasons[i] = cache.ReasonNotCompute
		case c.Node != cache.NoNode && boundary[c.Node]:
			d.Reasons[i] = cache.ReasonEagerBoundary
		default:
			d.Reasons[i] = b.Reason
		}
	}
	for i := 0; i < len(cmds); {
		if d.Reasons[i] != cache.ReasonNone {
			i++
			continue
		}
		j := i
		for j < len(cmds) && d.Reasons[j] == cache.ReasonNone {
			j++
		}
		keys = m.segment(&d, keys, cmds, i, j)
		i = j
	}
	m.keep(d, keys)
	if len(d.Candidates) == 0 {
		d.Candidates = nil // as without a memo
	}
	return d, nil
}

// checkNodes refuses negative eager boundaries and plan nodes below NoNode,
// and eager boundaries in a batch that attributes no command to a node.
func checkNodes(cmds []Command, eagerBoundaries []int) error {
	for _, n := range eagerBoundaries {
		if n < 0 {
			return fmt.Errorf("cache: eager boundary node %d is negative", n)
		}
	}
	attributed := false
	for i, c := range cmds {
		if c.Node < cache.NoNode {
			return fmt.Errorf("cache: command %d names plan node %d; use a node index >= 0 or NoNode", i, c.Node)
		}
		attributed = attributed || c.Node != cache.NoNode
	}
	if len(eagerBoundaries) > 0 && len(cmds) > 0 && !attributed {
		return fmt.Errorf("cache: the batch declares eager boundaries %v but attributes no command to a plan node; set Command.Node", sortedInts(eagerBoundaries))
	}
	return nil
}

// segment makes the replayable run cmds[i:j] a candidate, or marks it a
// scope conflict when its regions' scopes do not combine. It appends the
// run's keys to keys and returns it.
func (m *Memo) segment(d *Discovery, keys []cache.Key, cmds []Command, i, j int) []cache.Key {
	scope, ok := cache.PlanScope(), true
	for k := i; k < j && ok; k++ {
		scope, ok = combine(scope, d.Bindings[k].Scope)
	}
	if !ok {
		for k := i; k < j; k++ {
			d.Reasons[k] = cache.ReasonAddressScopeConflict
		}
		return keys
	}
	from := len(keys)
	for k := i; k < j; k++ {
		keys = append(keys, d.Bindings[k].Key)
	}
	own := keys[from:len(keys):len(keys)] // appending to one candidate's keys never writes the next's
	d.Candidates = append(d.Candidates, Candidate{Start: i, End: j, Key: m.segmentKey(own), Shape: m.shapeOf(cmds[i:j]), Scope: scope, Keys: own, Bytes: hostBytes(cmds[i:j])})
	return keys
}

// discovery returns an empty discovery for n commands and the array the
// candidates' keys are appended to: fresh without a memo, else the memo's
// from its last Discover.
func (m *Memo) discovery(n int) (Discovery, []cache.Key) {
	if m == nil {
		return Discovery{Bindings: make([]Binding, n), Reasons: make([]cache.Reason, n)}, make([]cache.Key, 0, n)
	}
	d := m.last
	d.Bindings = resize(d.Bindings, n)
	d.Reasons = resize(d.Reasons, n)
	d.Candidates = d.Candidates[:0]
	return d, m.keys[:0]
}

// keep remembers the slices of a discovery for the memo's next one.
func (m *Memo) keep(d Discovery, keys []cache.Key) {
	if m == nil {
		return
	}
	m.last, m.keys = d, keys
}

// resize returns s with length n and zero elements, reusing its array when
// it is large enough.
func resize[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

func sortedInts(v []int) []int {
	out := append([]int(nil), v...)
	sort.Ints(out)
	return out
}
