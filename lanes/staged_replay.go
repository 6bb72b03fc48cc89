// Running staged programs: Prepare and Replay, composed of Submit and
// Wait, so both block.

package lanes

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/lanesched/lanes/cuda"
)

// Prepare captures both variants of a staged program (the lane's cache must
// be open and quiescent): the full graph and the resident-input graph. It
// runs each once; the staging's current bytes are the inputs.
func (l *Lane) Prepare(st *Staged) error {
	for _, b := range []Batch{st.full, st.resident} {
		b.Path = PathAdaptive
		sub, err := l.Submit(b)
		if err != nil {
			return err
		}
		if _, err := l.Wait(sub.Fence); err != nil {
			return err
		}
	}
	st.initialized, st.outValid = false, false
	return nil
}

// inputKey is the exact key over the inputs' bytes, in logical order.
func inputKey(inputs [][]byte) [32]byte {
	h := sha256.New()
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(inputs)))
	h.Write(n[:])
	for _, in := range inputs {
		binary.LittleEndian.PutUint64(n[:], uint64(len(in)))
		h.Write(n[:])
		h.Write(in)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// Replay runs a staged program with inputs in logical order and waits for
// it: it blocks (see Wait). With collect, the outputs are read back
// (logical order) and kept for the output cache. The inputs are staged with
// zero padding up to each slot's length.
func (l *Lane) Replay(st *Staged, inputs [][]byte, collect bool) (StagedResult, error) {
	const op = "staged replay"
	hm, err := l.checkReplay(st, inputs)
	if err != nil {
		return StagedResult{}, rejected(op, err)
	}
	// Identical inputs are recognized by their bytes (a memcmp, cheaper than
	// hashing them again); the exact input key is computed when new inputs
	// are staged, and a stored key never stands in for the bytes.
	same := st.initialized && equalInputs(st.lastInputs, inputs)
	if same && st.outValid && collect {
		l.staged.OutputCacheHits++
		return StagedResult{Outputs: cloneAll(st.outputsCache), TimeKnown: true, OutputCache: true, InputKey: st.key}, nil
	}
	batch := st.full
	if same {
		batch = st.resident
		l.staged.ResidentInputReplays++
	} else if err := l.stageInputs(hm, st, inputs); err != nil {
		return StagedResult{}, rejected(op, err)
	}
	st.initialized, st.outValid = false, false // until this replay ends well
	sub, err := l.Submit(batch)
	if err != nil {
		return StagedResult{}, err
	}
	l.staged.GraphLaunches += uint64(len(sub.Attribution.Segments))
	r, err := l.Wait(sub.Fence)
	if err != nil {
		return StagedResult{}, err
	}
	if r.Outcome != OutcomeSucceeded {
		return StagedResult{Receipt: r}, failed(op, r.Err)
	}
	res := StagedResult{DeviceTime: r.DeviceTime, TimeKnown: r.DeviceTime > 0, Resident: same, Receipt: r}
	if !same {
		st.key = inputKey(inputs)
		st.lastInputs = cloneAll(inputs)
	}
	st.initialized = true
	res.InputKey = st.key
	if collect {
		if res.Outputs, err = l.collectOutputs(hm, st); err != nil {
			return res, failed(op, err)
		}
		st.outputsCache, st.outValid = res.Outputs, true
		res.Outputs = cloneAll(res.Outputs)
	}
	return res, nil
}

// checkReplay refuses a replay the device cannot stage or whose inputs do
// not fit the program's slots.
func (l *Lane) checkReplay(st *Staged, inputs [][]byte) (cuda.HostMemory, error) {
	hm := cuda.HostMemory(l.dev)
	if len(inputs) != len(st.inputs) {
		return nil, fmt.Errorf("%w: Fix: the staged program expects %d input(s) but received %d", ErrStagedInput, len(st.inputs), len(inputs))
	}
	for slot, s := range st.inputs {
		logical := st.inputMap[slot]
		if n := uint64(len(inputs[logical])); n > s.Staging.Length {
			return nil, fmt.Errorf("%w: Fix: input %d holds %d bytes but its staging slot %d holds %d; pass at most %d bytes or rebuild the program with a larger slot",
				ErrStagedInput, logical, n, slot, s.Staging.Length, s.Staging.Length)
		}
	}
	return hm, nil
}

// stageInputs writes new inputs into their pinned staging slots, zero
// padded.
func (l *Lane) stageInputs(hm cuda.HostMemory, st *Staged, inputs [][]byte) error {
	for slot, s := range st.inputs {
		padded := make([]byte, s.Staging.Length)
		copy(padded, inputs[st.inputMap[slot]])
		if err := hm.WriteHost(s.Staging, padded); err != nil {
			return err
		}
		l.staged.HostToDeviceBytes += s.Staging.Length
		l.staged.Uploads++
	}
	return nil
}

// collectOutputs reads the outputs back from their staging slots, in
// logical order; on an error, it returns those read before it.
func (l *Lane) collectOutputs(hm cuda.HostMemory, st *Staged) ([][]byte, error) {
	outputs := make([][]byte, len(st.outputs))
	for slot, s := range st.outputs {
		b := make([]byte, s.Staging.Length)
		if err := hm.ReadHost(s.Staging, b); err != nil {
			return outputs, err // those read so far, as the caller may use them
		}
		outputs[st.outputMap[slot]] = b
		l.staged.DeviceToHostBytes += s.Staging.Length
		l.staged.Readbacks++
	}
	return outputs, nil
}

func equalInputs(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func cloneAll(in [][]byte) [][]byte {
	out := make([][]byte, len(in))
	for i, b := range in {
		out[i] = bytes.Clone(b)
	}
	return out
}
