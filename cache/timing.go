// The timed steps of preparing an executable, as a receipt reports them.

package cache

import "time"

// Stage is one timed step of preparing an executable.
type Stage uint8

// The timed steps of preparation.
const (
	StageCapture     Stage = iota + 1 // begin capture, enqueue the commands, end capture
	StageInstantiate                  // cuGraphInstantiate
	StageUpload                       // cuGraphUpload
	StageUpdate                       // cuGraphExecUpdate from a new capture
	StageRebind                       // in-place parameter update, no capture
)

var stageNames = [...]string{"", "capture", "instantiate", "upload", "update", "rebind"}

// String is the stage's snake_case name.
func (s Stage) String() string {
	if int(s) < len(stageNames) && s != 0 {
		return stageNames[s]
	}
	return "none"
}

// Stages lists every stage, in order.
func Stages() []Stage {
	return []Stage{StageCapture, StageInstantiate, StageUpload, StageUpdate, StageRebind}
}

// Timing is one timed step: its stage, the nodes it handled and how long
// it took by the cache's clock.
type Timing struct {
	Stage Stage
	Nodes int
	Took  time.Duration
}
