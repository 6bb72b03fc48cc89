// A batch's commands as replay sees them: Command, its Phase, the address
// Scope of its regions and the Binding of a command to its key.

package cache

import (
	"fmt"
)

// ScopeKind says who owns the addresses a command touches.
type ScopeKind uint8

// Scope kinds. The zero value is no scope: a region nobody vouched for.
const (
	ScopeNone ScopeKind = iota
	ScopePlan           // owned by the plan: the same on every lane and every replay
	ScopeLane           // owned by one lane: valid only on that lane's stream
)

// Scope is the reusable address scope of a region or a command.
type Scope struct {
	Kind ScopeKind
	Lane int // for ScopeLane
}

// PlanScope is the scope of plan-owned memory.
func PlanScope() Scope { return Scope{Kind: ScopePlan} }

// LaneScope is the scope of memory owned by one lane.
func LaneScope(lane int) Scope { return Scope{Kind: ScopeLane, Lane: lane} }

// String prints "plan", "lane:N" or "none".
func (s Scope) String() string {
	switch s.Kind {
	case ScopePlan:
		return "plan"
	case ScopeLane:
		return fmt.Sprintf("lane:%d", s.Lane)
	}
	return "none"
}

// Phase is the phase of a batch entry, and of its command as discovery
// sees it. Only compute commands are ever replayed; the others run eagerly
// and are barriers between replay segments.
type Phase uint8

// Phases.
const (
	PhaseCompute        Phase = iota // the plan's device work
	PhaseInitialization              // one-time setup before compute (weights, zeroing)
	PhaseDynamicBinding              // per-request input and binding writes
	PhaseReadout                     // moving results out after compute
)

// String names the phase.
func (p Phase) String() string {
	return [...]string{"compute", "initialization", "dynamic_binding", "readout", "unknown"}[min(int(p), 4)]
}

// NoNode marks a command that belongs to no plan node.
const NoNode = -1
