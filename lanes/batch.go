// The batch a caller submits: entries, replay contracts, compute paths,
// timing modes, and the validation every batch passes before anything runs.

package lanes

import (
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/programs"
)

// Form is how an entry's logical work is batched.
type Form uint8

// Batching forms.
const (
	FormNone    Form = iota // not batched work (setup, transfers)
	FormSingle              // one participant
	FormBatched             // several participants side by side
	FormWave                // one wave of a persistent batch
)

// String names the form.
func (f Form) String() string {
	return [...]string{"none", "single", "batched", "wave", "unknown"}[min(int(f), 4)]
}

// Work is the logical work an entry stands for: who it serves. The lane
// attributes it to the entry's command without overwriting what the
// provider declared about the command itself.
type Work struct {
	Form             Form
	ParticipantStart uint32
	ParticipantCount uint32
	Tokens           uint64
}

// ReplayContract is the replay contract a provider attaches to a command: its exact
// provider key and the address scope of each region it names, in
// [cuda.Command.ForRegions] order. A command without one always runs eagerly.
type ReplayContract struct {
	Key    cache.ProviderKey
	Scopes []cache.Scope
}

// Replayable is a replay contract that gives every region of cmd the same
// scope.
func Replayable(cmd cuda.Command, key cache.ProviderKey, scope cache.Scope) *ReplayContract {
	r := &ReplayContract{Key: key}
	_ = backend.ForRegions(cmd, func(cuda.Region) error { r.Scopes = append(r.Scopes, scope); return nil })
	return r
}

// Entry is one item of a batch: a command, or a direct invocation of a
// sealed program segment.
type Entry struct {
	Phase   cache.Phase
	Node    int // plan node index, or cache.NoNode
	Work    Work
	Command cuda.Command
	Replay  *ReplayContract
	// Invoke, when set, replays a segment of a sealed program by reference
	// instead of running Command; Command must be zero.
	Invoke *programs.Invocation
}

// Path is a batch's compute-path requirement.
type Path uint8

// Compute paths.
const (
	// PathAdaptive replays what is resident and runs the rest eagerly.
	PathAdaptive Path = iota
	// PathEagerOnly never replays.
	PathEagerOnly
	// PathReplayedOnly requires every compute entry to be replayed; a batch
	// with any compute entry not resident after preparation is refused.
	PathReplayedOnly
	// PathReplayedWithBoundaries requires every compute entry to be replayed
	// except those on the declared eager-boundary nodes, and those to run
	// eagerly: exactly the declared shape.
	PathReplayedWithBoundaries
)

// String names the path.
func (p Path) String() string {
	return [...]string{"adaptive", "eager_only", "replayed_only", "replayed_with_boundaries", "unknown"}[min(int(p), 4)]
}

// TimingMode says what device timing a submission records.
type TimingMode uint8

// Timing modes, each including the one before.
const (
	TimingOff          TimingMode = iota // no events beyond the fence
	TimingCompletion                     // device time of the whole submission
	TimingReplay                         // plus an event pair per replayed segment
	TimingKernel                         // plus an event pair per eager command
	TimingVerification                   // plus: replayed segments must carry logical attribution
)

// String names the mode.
func (m TimingMode) String() string {
	return [...]string{"off", "completion", "replay", "kernel", "verification", "unknown"}[min(int(m), 5)]
}

// Batch is one submission.
type Batch struct {
	// Tenant is whose batch it is: the lane's executable cache gives each
	// tenant an equal share of its room (a scheduler sets it; a lane
	// driven by hand may leave it empty).
	Tenant  string
	Entries []Entry
	Path    Path
	Timing  TimingMode
	// EagerBoundaries are plan nodes that must run eagerly.
	EagerBoundaries []int
	// Program, when set, declares the plan topology this batch runs, so the
	// lane registers it as a reusable program while preparation is open.
	Program *programs.Capture
	// Patches are program-binding patches written before compute.
	Patches []Patch
	// Retain lists buffers the submission uses beyond its commands' own
	// (per-request scratch, say): the lane holds them until the fence is
	// terminal, or, after a failure, until the stream is synchronized, and
	// then hands them back in the receipt.
	Retain []cuda.Buffer
}
