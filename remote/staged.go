// Staged programs through a front: declared by their slots' device
// regions, held by a handle.

package remote

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote/internal/front"
)

// StagedSpec is a staged program as a front declares it (lanes.StagedSpec
// but the staging): the device region of each input and output slot, in
// slot order, the index maps that say which logical input or output each
// slot is (each a dense permutation of its slots), and the compute
// entries (each with a replay key). The host makes each slot's pinned
// staging itself, as long as its region: a front's process has no pinned
// memory the host can reach.
type StagedSpec struct {
	Inputs    []cuda.Region
	InputMap  []int
	Outputs   []cuda.Region
	OutputMap []int
	Compute   []lanes.Entry
}

// StagedProgram is a staged program prepared on a tenant's host
// (Front.PrepareStaged): it replays there, on the lane it was prepared on,
// until it is released, its tenant forgotten, or its host lost (then
// prepare it again). Its methods are safe on a nil program.
type StagedProgram struct {
	p *front.StagedProgram
}

// room is the front's program, nil for a nil one.
func (p *StagedProgram) room() *front.StagedProgram {
	if p == nil {
		return nil
	}
	return p.p
}

// Bytes is what one replay moves: its input slots' bytes and its output
// slots' (read back when collected).
func (p *StagedProgram) Bytes() (in, out uint64) {
	if p.room() == nil {
		return 0, 0
	}
	return p.p.Bytes()
}

// OutputSizes is each output's bytes, in logical order: what ReplayInto
// and Repeat fill.
func (p *StagedProgram) OutputSizes() []uint64 {
	if p.room() == nil {
		return nil
	}
	return p.p.OutputSizes()
}

// MakeOutputs allocates one buffer per output, in logical order and each
// of its length: buffers for ReplayInto and Repeat to fill, reused from
// one replay to the next.
func (p *StagedProgram) MakeOutputs() [][]byte {
	if p.room() == nil {
		return nil
	}
	return p.p.MakeOutputs()
}
