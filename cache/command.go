// A batch's commands as replay sees them: Command, its Phase, the address
// Scope of its regions and the Binding of a command to its key.

package cache

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
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

// combine merges two scopes: plan joins anything, two lanes must agree.
func combine(a, b Scope) (Scope, bool) {
	switch {
	case a.Kind == ScopePlan:
		return b, true
	case b.Kind == ScopePlan:
		return a, true
	}
	return a, a == b
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

// Command is one command of a batch as replay sees it: the device command,
// its phase, its plan node, the replay key its provider declared (if any),
// and the scope of each region it names, in [cuda.Command.ForRegions] order.
// Replay is never inferred: a command without a key, or with a region
// without a scope, is always run eagerly.
type Command struct {
	Cmd    cuda.Command
	Phase  Phase
	Node   int // plan node index, or NoNode
	Key    ProviderKey
	HasKey bool
	Scopes []Scope
}

// Binding is a command's replay contract once bound: its exact key and
// combined scope, or the reason it cannot be replayed.
type Binding struct {
	Key    Key
	Scope  Scope
	Reason Reason // ReasonNone when the command is replayable
}

// Bind binds the command's provider key to its runtime payload and combines
// its regions' scopes.
func (c Command) Bind() Binding { return (*Memo)(nil).bindCommand(c) }

func (m *Memo) bindCommand(c Command) Binding {
	if !c.HasKey {
		return Binding{Reason: ReasonProviderKeyMissing}
	}
	if len(c.Scopes) != c.Cmd.RegionCount() {
		return Binding{Reason: ReasonAddressScopeMissing}
	}
	scope := PlanScope()
	for _, s := range c.Scopes {
		if s.Kind == ScopeNone {
			return Binding{Reason: ReasonAddressScopeMissing}
		}
		var ok bool
		if scope, ok = combine(scope, s); !ok {
			return Binding{Reason: ReasonAddressScopeConflict}
		}
	}
	return Binding{Key: m.bind(c.Key, c.Cmd), Scope: scope}
}
