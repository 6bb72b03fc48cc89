// Gaps: the plan nodes a program leaves eager, and the reason for each.

package catalog

import (
	"github.com/lanesched/lanes/cache"
	discovery "github.com/lanesched/lanes/internal/discovery"

	programs "github.com/lanesched/lanes/programs"
)

// gaps types every node that is neither resident nor an eager boundary.
func gaps(capture programs.Capture, segs []programs.Segment, batch []discovery.Command, disc discovery.Discovery, rep discovery.PrepareReport) []programs.Gap {
	covered := make([]bool, capture.Nodes)
	for _, s := range segs {
		for n := s.Start; n < s.End; n++ {
			covered[n] = true
		}
	}
	for _, n := range capture.EagerBoundaries {
		covered[n] = true
	}
	candidateOf := make([]int, len(batch))
	for i := range candidateOf {
		candidateOf[i] = -1
	}
	for ci, cand := range disc.Candidates {
		for i := cand.Start; i < cand.End; i++ {
			candidateOf[i] = ci
		}
	}
	first, next := nodeChains(batch)
	var out []programs.Gap
	for n := range capture.Nodes {
		if !covered[n] {
			out = append(out, programs.Gap{Node: n, Reason: gapReason(n, first, next, candidateOf, disc, rep)})
		}
	}
	return out
}

// nodeChains links the compute commands of each plan node, in batch
// order: first[node] is its first command, next[i] the command after i of
// the same node (-1 at the end). One pass over the batch, not one per node.
func nodeChains(batch []discovery.Command) (first map[int]int, next []int) {
	first = make(map[int]int, len(batch))
	next = make([]int, len(batch))
	last := map[int]int{}
	for i, cmd := range batch {
		next[i] = -1
		if cmd.Phase != cache.PhaseCompute || cmd.Node < 0 {
			continue
		}
		if j, ok := last[cmd.Node]; ok {
			next[j] = i
		} else {
			first[cmd.Node] = i
		}
		last[cmd.Node] = i
	}
	return first, next
}

// gapReason is why node n is not covered by a replayed segment: the first
// reason found among its commands' bindings, then discovery's scope
// conflicts, then preparation's dispositions; a node with no compute
// command is missing one, and one whose commands were all replayable, yet
// owned by no candidate, is a scope conflict.
func gapReason(n int, first map[int]int, next, candidateOf []int, disc discovery.Discovery, rep discovery.PrepareReport) cache.Reason {
	reason := cache.ReasonMissingComputeCommand
	var bindReason, discReason, prepReason cache.Reason
	i, ok := first[n]
	for ; ok && i >= 0; i = next[i] {
		reason = cache.ReasonAddressScopeConflict // every command replayable, yet no candidate owns the node
		if bindReason == cache.ReasonNone {
			bindReason = disc.Bindings[i].Reason
		}
		if discReason == cache.ReasonNone && disc.Reasons[i] == cache.ReasonAddressScopeConflict {
			discReason = disc.Reasons[i]
		}
		if ci := candidateOf[i]; ci >= 0 && prepReason == cache.ReasonNone {
			prepReason = rep.Dispositions[ci].Reason()
		}
	}
	for _, r := range []cache.Reason{bindReason, discReason, prepReason} {
		if r != cache.ReasonNone {
			return r
		}
	}
	return reason
}
