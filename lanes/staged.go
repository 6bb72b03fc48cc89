package lanes

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// Slot is one staged input or output: the pinned host staging a captured
// copy reads or writes, and the device region on the other side.
type Slot struct {
	Staging cuda.HostRegion
	Device  cuda.Region
}

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
// same graph without the input copies) runs.
type Staged struct {
	inputs, outputs       []Slot
	inputMap, outputMap   []int // slot -> logical index
	full, resident        Batch
	key                   [32]byte
	lastInputs            [][]byte // logical order, as staged
	initialized, outValid bool
	outputsCache          [][]byte
}

// StagedCounters are the data-movement counters of staged replays.
type StagedCounters struct {
	HostToDeviceBytes, DeviceToHostBytes  uint64
	Uploads, Readbacks, GraphLaunches     uint64
	OutputCacheHits, ResidentInputReplays uint64
}

// StagedResult is one staged replay's outcome.
type StagedResult struct {
	Outputs     [][]byte // logical order
	DeviceTime  time.Duration
	TimeKnown   bool // DeviceTime is a measurement (exactly 0 for an output-cache hit)
	OutputCache bool
	Resident    bool     // the resident-input variant ran (no input copies)
	InputKey    [32]byte // the exact key over the inputs' bytes
	Receipt     Receipt
}

// checkIndexMap validates a slot -> logical map as a dense permutation.
func checkIndexMap(kind string, slots int, m []int) error {
	if len(m) != slots {
		return fmt.Errorf("%w: Fix: the staged program has %d %s slot(s) but its index map has %d entr(ies); give one logical index per slot", ErrIndexMap, slots, kind, len(m))
	}
	seen := make([]int, slots)
	for i := range seen {
		seen[i] = -1
	}
	for slot, logical := range m {
		if logical < 0 || logical >= slots {
			return fmt.Errorf("%w: Fix: %s slot %d maps to logical %s %d, which is not dense over 0..%d; rebuild the map from the program's logical %s order", ErrIndexMap, kind, slot, kind, logical, slots-1, kind)
		}
		if prev := seen[logical]; prev >= 0 {
			return fmt.Errorf("%w: Fix: %s slots %d and %d both map to logical %s %d; duplicates alias one logical slot onto two copies. Rebuild the map so each logical %s appears once", ErrIndexMap, kind, prev, slot, kind, logical, kind)
		}
		seen[logical] = slot
	}
	return nil
}

// NewStaged builds a staged program around compute entries (each with a
// replay key) and checks its slots and index maps.
func NewStaged(inputs []Slot, inputMap []int, outputs []Slot, outputMap []int, compute []Entry) (*Staged, error) {
	if err := checkIndexMap("input", len(inputs), inputMap); err != nil {
		return nil, err
	}
	if err := checkIndexMap("output", len(outputs), outputMap); err != nil {
		return nil, err
	}
	st := &Staged{inputs: inputs, outputs: outputs, inputMap: inputMap, outputMap: outputMap}
	copyEntry := func(c cuda.Command, err error) (Entry, error) {
		if err != nil {
			return Entry{}, err
		}
		return Entry{Phase: cache.PhaseCompute, Node: cache.NoNode, Command: c, Replay: Replayable(c, cache.NewKey("lanes.staged", c.Kind.String()).Finish(), cache.PlanScope())}, nil
	}
	var ins, outs []Entry
	for i, s := range inputs {
		if s.Staging.Length != s.Device.Length {
			return nil, fmt.Errorf("%w: Fix: input slot %d stages %d bytes into a %d-byte device region; make them equal", ErrStagedInput, i, s.Staging.Length, s.Device.Length)
		}
		e, err := copyEntry(cuda.StageIn(s.Device, s.Staging))
		if err != nil {
			return nil, err
		}
		ins = append(ins, e)
	}
	for i, s := range outputs {
		if s.Staging.Length != s.Device.Length {
			return nil, fmt.Errorf("%w: Fix: output slot %d stages %d bytes from a %d-byte device region; make them equal", ErrStagedInput, i, s.Staging.Length, s.Device.Length)
		}
		e, err := copyEntry(cuda.StageOut(s.Staging, s.Device))
		if err != nil {
			return nil, err
		}
		outs = append(outs, e)
	}
	for _, e := range compute {
		if e.Replay == nil || e.Phase != cache.PhaseCompute {
			return nil, fmt.Errorf("%w: Fix: a staged program replays: every compute entry needs a replay key and the compute phase", ErrStagedInput)
		}
	}
	st.full = Batch{Path: PathReplayedOnly, Timing: TimingCompletion, Entries: append(append(append([]Entry{}, ins...), compute...), outs...)}
	st.resident = Batch{Path: PathReplayedOnly, Timing: TimingCompletion, Entries: append(append([]Entry{}, compute...), outs...)}
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

// ForHandles visits every device buffer and pinned host buffer the program
// names (its slots and its compute entries), as [Batch.ForHandles] does.
func (st *Staged) ForHandles(buffer func(cuda.Buffer) error, host func(cuda.HostBuffer) error) error {
	return st.full.ForHandles(buffer, host)
}

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
// it. With collect, the outputs are read back (logical order) and kept for
// the output cache. The inputs are staged with zero padding up to each
// slot's length.
func (l *Lane) Replay(st *Staged, inputs [][]byte, collect bool) (StagedResult, error) {
	const op = "staged replay"
	hm, ok := l.dev.(cuda.HostMemory)
	if !ok {
		return StagedResult{}, rejected(op, fmt.Errorf("%w: the device offers no pinned host staging", ErrStagedInput))
	}
	if len(inputs) != len(st.inputs) {
		return StagedResult{}, rejected(op, fmt.Errorf("%w: Fix: the staged program expects %d input(s) but received %d", ErrStagedInput, len(st.inputs), len(inputs)))
	}
	for slot, s := range st.inputs {
		logical := st.inputMap[slot]
		if n := uint64(len(inputs[logical])); n > s.Staging.Length {
			return StagedResult{}, rejected(op, fmt.Errorf("%w: Fix: input %d holds %d bytes but its staging slot %d holds %d; pass at most %d bytes or rebuild the program with a larger slot",
				ErrStagedInput, logical, n, slot, s.Staging.Length, s.Staging.Length))
		}
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
	} else {
		for slot, s := range st.inputs {
			padded := make([]byte, s.Staging.Length)
			copy(padded, inputs[st.inputMap[slot]])
			if err := hm.WriteHost(s.Staging, padded); err != nil {
				return StagedResult{}, rejected(op, err)
			}
			l.staged.HostToDeviceBytes += s.Staging.Length
			l.staged.Uploads++
		}
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
		st.lastInputs = make([][]byte, len(inputs))
		for i, in := range inputs {
			st.lastInputs[i] = bytes.Clone(in)
		}
	}
	st.initialized = true
	res.InputKey = st.key
	if collect {
		res.Outputs = make([][]byte, len(st.outputs))
		for slot, s := range st.outputs {
			b := make([]byte, s.Staging.Length)
			if err := hm.ReadHost(s.Staging, b); err != nil {
				return res, failed(op, err)
			}
			res.Outputs[st.outputMap[slot]] = b
			l.staged.DeviceToHostBytes += s.Staging.Length
			l.staged.Readbacks++
		}
		st.outputsCache, st.outValid = res.Outputs, true
		res.Outputs = cloneAll(res.Outputs)
	}
	return res, nil
}

// StagedCounters returns the lane's staged-replay counters.
func (l *Lane) StagedCounters() StagedCounters { return l.staged }

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
