// Staged programs: replayable graphs whose inputs and outputs move through
// pinned host staging, and how one is built and checked.

package lanecore

import (
	"fmt"
	"sync/atomic"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"

	lanes "github.com/lanesched/lanes/lanes"
)

// Staged is a replayable program with host inputs and outputs, replayed as
// one CUDA graph that moves them too: inputs are copied into per-input pinned staging
// that lives as long as the program (never recycled under its executables),
// the captured graph copies them in, computes, and copies the outputs back
// into staging. Inputs and outputs are listed in descriptor order; the index
// maps say which logical input or output each slot is, and must be dense
// permutations.
//
// Replaying identical inputs is cheaper twice over: when the outputs of the
// last replay were collected, they are returned without a launch (device
// time exactly zero); when they were not, the resident-input variant (the
// same graph without the input copies) runs, unless the compute writes an
// input slot's device region (then the full graph runs again).
//
// A program serves one lane: the one it was prepared on (Lane.Prepare),
// which alone may replay it; a lane rebuilt under the same ID may prepare
// it again. Its replays run one at a time on that lane.
type Staged struct {
	inputs, outputs       []lanes.Slot
	inputMap, outputMap   []int // slot -> logical index
	full, resident        lanes.Batch
	compute               []lanes.Entry
	lastInputs            [][]byte // logical order: the lane's copy of the inputs Replay staged last, compared with the next
	initialized, outValid bool     // the staged and device inputs are lastInputs; the output cache holds their outputs
	known                 bool     // lastInputs are the last replay's inputs (Repeat may take them)
	outputsCache          [][]byte // logical order, reused
	// Uploads from the caller's pinned buffers (staged_pinned.go): the
	// batch and pins built for them, reused; none once the caller took
	// views of the staging (StagedInputs), which then keeps every input.
	viewsTaken   bool
	stagingStale bool // an upload from the caller's buffers left the staging behind lastInputs
	inPlace      []lanes.Entry
	pinScratch   []*pinnedInput
	// home is the lane the program was prepared on, the only one that may
	// replay it; writesInputs: its compute writes an input slot's device
	// region, so the resident-input variant would compute on changed
	// inputs; forget: ForgetOutputs was called, applied at the next replay.
	home         atomic.Pointer[Lane]
	writesInputs bool
	forget       atomic.Bool
}

// checkIndexMap validates a slot -> logical map as a dense permutation.
func checkIndexMap(kind string, slots int, m []int) error {
	if len(m) != slots {
		return fmt.Errorf("%w: Fix: the staged program has %d %s slot(s) but its index map has %d entr(ies); give one logical index per slot", lanes.ErrIndexMap, slots, kind, len(m))
	}
	seen := make([]int, slots)
	for i := range seen {
		seen[i] = -1
	}
	for slot, logical := range m {
		if logical < 0 || logical >= slots {
			return fmt.Errorf("%w: Fix: %s slot %d maps to logical %s %d, which is not dense over 0..%d; rebuild the map from the program's logical %s order", lanes.ErrIndexMap, kind, slot, kind, logical, slots-1, kind)
		}
		if prev := seen[logical]; prev >= 0 {
			return fmt.Errorf("%w: Fix: %s slots %d and %d both map to logical %s %d; duplicates alias one logical slot onto two copies. Rebuild the map so each logical %s appears once", lanes.ErrIndexMap, kind, prev, slot, kind, logical, kind)
		}
		seen[logical] = slot
	}
	return nil
}

// NewStaged builds a staged program around compute entries (each with a
// replay key) and checks its slots and index maps.
func NewStaged(inputs []lanes.Slot, inputMap []int, outputs []lanes.Slot, outputMap []int, compute []lanes.Entry) (*Staged, error) {
	if len(inputs) == 0 && len(outputs) == 0 && len(compute) == 0 {
		return nil, fmt.Errorf("%w: Fix: the staged program has no slots and no compute: give it input or output slots, compute entries, or both", lanes.ErrStagedInput)
	}
	if err := checkIndexMap("input", len(inputs), inputMap); err != nil {
		return nil, err
	}
	if err := checkIndexMap("output", len(outputs), outputMap); err != nil {
		return nil, err
	}
	st := &Staged{inputs: inputs, outputs: outputs, inputMap: inputMap, outputMap: outputMap, compute: append([]lanes.Entry(nil), compute...)}
	copyEntry := func(c cuda.Command, err error) (lanes.Entry, error) {
		if err != nil {
			return lanes.Entry{}, err
		}
		return lanes.Replayed("lanes.staged", cache.NoNode, c), nil
	}
	var ins, outs []lanes.Entry
	for i, s := range inputs {
		if s.Staging.Length != s.Device.Length {
			return nil, fmt.Errorf("%w: Fix: input slot %d stages %d bytes into a %d-byte device region; make them equal", lanes.ErrStagedInput, i, s.Staging.Length, s.Device.Length)
		}
		e, err := copyEntry(cuda.StageIn(s.Device, s.Staging))
		if err != nil {
			return nil, err
		}
		ins = append(ins, e)
	}
	for i, s := range outputs {
		if s.Staging.Length != s.Device.Length {
			return nil, fmt.Errorf("%w: Fix: output slot %d stages %d bytes from a %d-byte device region; make them equal", lanes.ErrStagedInput, i, s.Staging.Length, s.Device.Length)
		}
		e, err := copyEntry(cuda.StageOut(s.Staging, s.Device))
		if err != nil {
			return nil, err
		}
		outs = append(outs, e)
	}
	for _, e := range compute {
		if e.Replay == nil || e.Phase != cache.PhaseCompute {
			return nil, fmt.Errorf("%w: Fix: a staged program replays: every compute entry needs a replay key and the compute phase", lanes.ErrStagedInput)
		}
	}
	st.full = lanes.Batch{Path: lanes.PathReplayedOnly, Timing: lanes.TimingCompletion, Entries: append(append(append([]lanes.Entry{}, ins...), compute...), outs...)}
	st.resident = lanes.Batch{Path: lanes.PathReplayedOnly, Timing: lanes.TimingCompletion, Entries: append(append([]lanes.Entry{}, compute...), outs...)}
	return st, nil
}

// Bytes is what one replay moves: the bytes of its input slots (staged in
// whole, zero-padded) and of its output slots (read back when collected).
func (st *Staged) Bytes() (in, out uint64) {
	for _, s := range st.inputs {
		in += s.Staging.Length
	}
	for _, s := range st.outputs {
		out += s.Staging.Length
	}
	return in, out
}

// OutputSizes is the length of each output in bytes, in logical order:
// the length ReplayInto and Repeat want of each of their buffers.
func (st *Staged) OutputSizes() []uint64 {
	sizes := make([]uint64, len(st.outputs))
	for slot, s := range st.outputs {
		sizes[st.outputMap[slot]] = s.Staging.Length
	}
	return sizes
}

// MakeOutputs allocates one buffer per output, in logical order and each
// of its length: buffers for ReplayInto and Repeat to fill, reused from
// one replay to the next.
func (st *Staged) MakeOutputs() [][]byte {
	out := make([][]byte, len(st.outputs))
	for i, n := range st.OutputSizes() {
		out[i] = make([]byte, n)
	}
	return out
}

// CheckOutputs refuses buffers that do not fit the program's outputs (an
// error matching ErrStagedInput that says what to pass instead): what
// ReplayInto and Repeat check before they run.
func (st *Staged) CheckOutputs(outputs [][]byte) error {
	if err := checkBuilt(st); err != nil {
		return err
	}
	if len(outputs) != len(st.outputs) {
		return fmt.Errorf("%w: Fix: the staged program has %d output(s) but %d buffer(s) were passed for them; allocate them with MakeOutputs", lanes.ErrStagedInput, len(st.outputs), len(outputs))
	}
	for i, n := range st.OutputSizes() {
		if uint64(len(outputs[i])) != n {
			return fmt.Errorf("%w: Fix: output %d is %d bytes but its buffer holds %d; pass buffers of exactly OutputSizes (MakeOutputs allocates them)", lanes.ErrStagedInput, i, n, len(outputs[i]))
		}
	}
	return nil
}

// ForInputStaging visits the pinned host staging of each input slot, in
// slot order: what a replay writes its caller's bytes into.
func (st *Staged) ForInputStaging(visit func(slot int, r cuda.HostRegion) error) error {
	for i, s := range st.inputs {
		if err := visit(i, s.Staging); err != nil {
			return err
		}
	}
	return nil
}

// ForHandles visits every device buffer and pinned host buffer the program
// names (its slots and its compute entries), as [Batch.ForHandles] does.
func (st *Staged) ForHandles(buffer func(cuda.Buffer) error, host func(cuda.HostBuffer) error) error {
	return ForHandles(&st.full, buffer, host)
}

// StagedCounters returns the lane's staged-replay counters.
func (l *Lane) StagedCounters() lanes.StagedCounters { return l.staged }

// writesInputsOn reports whether any compute entry may write a region that
// overlaps an input slot's device region, by the kernels' declared access
// (a launch of a kernel the device does not know, or a parameter with no
// declared access, counts as writing), a library call's declared regions,
// and a transfer's destination.
func (st *Staged) writesInputsOn(ks cuda.Kernels) bool {
	overlaps := func(r cuda.Region) bool {
		for _, s := range st.inputs {
			d := s.Device
			if d.Buffer.ID == r.Buffer.ID && r.Offset < d.Offset+d.Length && d.Offset < r.Offset+r.Length {
				return true
			}
		}
		return false
	}
	for _, e := range st.compute {
		c := &e.Command
		switch c.Kind {
		case cuda.KindLaunch:
			spec, known := ks.Kernel(c.Kernel)
			for i, a := range c.Args {
				if a.Kind != cuda.ParamBuffer {
					continue
				}
				writes := !known || i >= len(spec.Params) || spec.Params[i].Access == 0 || spec.Params[i].Access.Writes()
				if writes && overlaps(a.Region) {
					return true
				}
			}
		case cuda.KindCall:
			if c.LibraryCall != nil {
				for _, t := range c.LibraryCall.Regions {
					if t.Access.Writes() && overlaps(t.Region) {
						return true
					}
				}
			}
		case cuda.KindStageOut:
		default:
			if overlaps(c.Dst) {
				return true
			}
		}
	}
	return false
}

// FullBatch is a copy of the batch a full replay submits (the input copies,
// the compute, the output copies): what a scheduler checks before it lets a
// tenant replay the program on its lanes.
func (st *Staged) FullBatch() lanes.Batch {
	b := st.full
	b.Entries = append([]lanes.Entry(nil), st.full.Entries...)
	return b
}
