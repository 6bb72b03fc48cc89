// The common entries in one call each: a compute command keyed for replay,
// and a command that always runs eagerly.

package lanes

import (
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// Replayed is the common compute entry: cmd, the work of plan node node,
// keyed for replay by its provider (the provider's fingerprint: a name and
// version that changes whenever what its commands compute does), every
// region plan-scoped (the same buffers mean the same thing on every lane).
// A launch is keyed by cache.LaunchKey (kernel, launch shape, scalar
// arguments), a library call by cache.CallKey (name, parameters, accesses),
// another command by its kind. Build an Entry yourself for
// lane-scoped memory, a key of your own, or logical work to attribute.
func Replayed(provider string, node int, cmd cuda.Command) Entry {
	var key cache.ProviderKey
	switch cmd.Kind {
	case cuda.KindLaunch:
		key = cache.LaunchKey(provider, cmd)
	case cuda.KindCall:
		key = cache.CallKey(provider, cmd)
	default:
		key = cache.NewKey(provider, cmd.Kind.String()).Finish()
	}
	return Entry{Phase: cache.PhaseCompute, Node: node, Command: cmd, Replay: Replayable(cmd, key, cache.PlanScope())}
}

// Eager is an entry that always runs eagerly: cmd in phase (initialization
// or dynamic binding before compute, readout after it), on no plan node.
func Eager(phase cache.Phase, cmd cuda.Command) Entry {
	return Entry{Phase: phase, Node: cache.NoNode, Command: cmd}
}

// Input is an eager entry of per-request input or binding, before compute
// (phase dynamic binding): an upload of a step's input, say.
func Input(cmd cuda.Command) Entry { return Eager(cache.PhaseDynamicBinding, cmd) }

// Output is an eager entry that moves results out after compute (phase
// readout).
func Output(cmd cuda.Command) Entry { return Eager(cache.PhaseReadout, cmd) }

// Pending is a submission in flight, whichever side runs it: the one type
// an in-process scheduler's, a front's and a lanes.Server's SubmitAsync
// return.
type Pending interface {
	// Done is closed when the submission has ended.
	Done() <-chan struct{}
	// Result waits for the end and returns the receipt and error.
	Result() (Receipt, error)
}
