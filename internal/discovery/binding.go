// A lane command as discovery sees it, and its binding to a replay key.

package discovery

import (
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
)

// Command is one command of a batch as replay sees it: the device command,
// its phase, its plan node, the replay key its provider declared (if any),
// and the scope of each region it names, in [cuda.Command.ForRegions] order.
// Replay is never inferred: a command without a key, or with a region
// without a scope, is always run eagerly.
type Command struct {
	Cmd    cuda.Command
	Phase  cache.Phase
	Node   int // plan node index, or NoNode
	Key    cache.ProviderKey
	HasKey bool
	Scopes []cache.Scope
}

// Binding is a command's replay contract once bound: its exact key and
// combined scope, or the reason it cannot be replayed.
type Binding struct {
	Key    cache.Key
	Scope  cache.Scope
	Reason cache.Reason // ReasonNone when the command is replayable
}

// Bind binds the command's provider key to its runtime payload and combines
// its regions' scopes.
func (c Command) Bind() Binding { return (*Memo)(nil).bindCommand(c) }

func (m *Memo) bindCommand(c Command) Binding {
	if !c.HasKey {
		return Binding{Reason: cache.ReasonProviderKeyMissing}
	}
	if len(c.Scopes) != backend.RegionCount(c.Cmd) {
		return Binding{Reason: cache.ReasonAddressScopeMissing}
	}
	scope := cache.PlanScope()
	for _, s := range c.Scopes {
		if s.Kind == cache.ScopeNone {
			return Binding{Reason: cache.ReasonAddressScopeMissing}
		}
		var ok bool
		if scope, ok = combine(scope, s); !ok {
			return Binding{Reason: cache.ReasonAddressScopeConflict}
		}
	}
	return Binding{Key: m.bind(c.Key, c.Cmd), Scope: scope}
}

// combine merges two scopes: plan joins anything, two lanes must agree.
func combine(a, b cache.Scope) (cache.Scope, bool) {
	switch {
	case a.Kind == cache.ScopePlan:
		return b, true
	case b.Kind == cache.ScopePlan:
		return a, true
	}
	return a, a == b
}
