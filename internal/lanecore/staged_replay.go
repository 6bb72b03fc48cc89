// Running staged programs: Prepare and Replay, composed of Submit and
// Wait, so both block.

package lanecore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/bulk"

	lanes "github.com/lanesched/lanes/lanes"
)

// Prepare captures both variants of a staged program (the lane's cache must
// be open and quiescent): the full graph and the resident-input graph. It
// runs each once; the staging's current bytes are the inputs. It makes
// this lane the program's home: a program prepared on another lane is
// refused (build one per lane with NewStaged), unless that lane had this
// one's ID (the same lane, rebuilt).
func (l *Lane) Prepare(st *Staged) error {
	const op = "staged prepare"
	if err := checkBuilt(st); err != nil {
		return rejected(op, err)
	}
	if home := st.home.Load(); home != nil && home != l && home.id != l.id {
		return rejected(op, fmt.Errorf("%w: Fix: the staged program was prepared on lane %d and serves that lane alone; build another with lanes.NewStaged for lane %d", lanes.ErrStagedInput, home.id, l.id))
	}
	if p := l.cache.Preparation(); p.State != cache.PrepOpen {
		return rejected(op, fmt.Errorf("%w: Fix: lane %d's preparation is %v, so nothing would be captured; open it (Configure) before Prepare", lanes.ErrStagedInput, l.id, p.State))
	}
	st.home.Store(l)
	st.writesInputs = st.writesInputsOn(l.dev.Kernels())
	for _, b := range []lanes.Batch{st.full, st.resident} {
		b.Path = lanes.PathAdaptive
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

// Replay runs a staged program with inputs in logical order and waits for
// it: it blocks (see Wait). With collect, the outputs are read back
// (logical order) and kept for the output cache; the result's Outputs are
// copies the caller owns (ReplayInto copies into the caller's buffers
// instead, and allocates nothing). The inputs are staged with zero
// padding up to each slot's length.
//
// An input of MinPinnedInput bytes or more, in a buffer a recent replay
// had, is copied to the device straight from it (the lane pins it, up to
// Config.PinBytes, until UnpinInputs); an output-cache hit launches
// nothing. docs/replays.md, "What a staged replay costs on the host", says
// what each path copies and compares.
func (l *Lane) Replay(st *Staged, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
	return l.replay(st, inputs, false, collect, nil)
}

// ReplayInto is Replay with collect, copying the outputs into the
// caller's buffers, in logical order, one per output and each exactly its
// length (MakeOutputs allocates them): the result's Outputs are those
// buffers. A replay that fails leaves their contents unspecified.
func (l *Lane) ReplayInto(st *Staged, inputs, outputs [][]byte) (lanes.StagedResult, error) {
	if err := st.CheckOutputs(outputs); err != nil {
		return lanes.StagedResult{}, rejected("staged replay", err)
	}
	return l.replay(st, inputs, false, true, outputs)
}

// Repeat runs a staged program again on the inputs of its last replay
// through Replay, ReplayInto or Repeat (the lane keeps its own copy of
// them), and waits for it. It is exact without looking at any input:
// while the outputs of those inputs are cached (the last replay collected
// them, and neither ForgetOutputs nor a failure dropped them), it copies
// them into outputs and launches nothing, at the cost of that copy alone;
// otherwise it runs the resident-input graph (or stages the kept inputs
// again). With nil outputs it collects nothing and always runs. A replay
// that failed on the device counts: Repeat runs its inputs again. One
// refused before it ran (bad input) does not: the inputs before it stay.
// Repeat is refused when the last replay's inputs were written in place
// (ReplayWritten), when its launch failed before the lane kept them, and
// when no inputs were ever passed: it never runs older inputs than the
// last replay's.
func (l *Lane) Repeat(st *Staged, outputs [][]byte) (lanes.StagedResult, error) {
	if outputs != nil {
		if err := st.CheckOutputs(outputs); err != nil {
			return lanes.StagedResult{}, rejected("staged repeat", err)
		}
	}
	return l.replay(st, nil, true, outputs != nil, outputs)
}

// replay is Replay, ReplayInto and Repeat: repeat takes the kept inputs
// for inputs, and into (when not nil) receives the outputs.
func (l *Lane) replay(st *Staged, inputs [][]byte, repeat, collect bool, into [][]byte) (lanes.StagedResult, error) {
	op := "staged replay"
	if repeat {
		op = "staged repeat"
	}
	if err := l.checkHome(st); err != nil {
		return lanes.StagedResult{}, rejected(op, err)
	}
	st.takeForget()
	if repeat {
		if !st.known {
			return lanes.StagedResult{}, rejected(op, fmt.Errorf("%w: Fix: the lane holds no inputs of the program's last replay to repeat (none was passed yet, the last replay's inputs were written in place, or its launch failed before the lane kept them); pass them to Replay or ReplayInto", lanes.ErrStagedInput))
		}
		inputs = st.lastInputs
	}
	hm, err := l.checkReplay(st, inputs)
	if err != nil {
		return lanes.StagedResult{}, rejected(op, err)
	}
	// The lane's own copy decides, never the staging: a caller's view, or
	// another program's output copy into the same pinned memory, may have
	// changed that.
	same := st.initialized && (repeat || equalInputs(st.lastInputs, inputs))
	if same && st.outValid && collect {
		l.staged.OutputCacheHits++
		return lanes.StagedResult{Outputs: st.handOver(into), TimeKnown: true, OutputCache: true}, nil
	}
	resident := same && !st.writesInputs
	var remember [][]byte
	if !same && !repeat {
		remember = inputs
	}
	if resident {
		l.staged.ResidentInputReplays++
	} else if batch, ok, err := l.uploadInPlace(hm, st, inputs, !repeat); err != nil {
		return lanes.StagedResult{}, rejected(op, err)
	} else if ok {
		return l.runBatch(st, batch, false, collect, remember, into)
	} else if err := l.stageInputs(hm, st, inputs); err != nil {
		return lanes.StagedResult{}, rejected(op, err)
	}
	return l.runStaged(st, resident, collect, remember, into)
}

// StagedInputs returns the program's input staging in logical order, to
// fill in place: the zero-copy way to stage inputs, then ReplayWritten.
// Each slice is the slot's whole pinned staging (bytes past an input's own
// length are the caller's to zero). Write them only between replays: no
// replay of the program may be in flight, which a lane's blocking Replay
// and ReplayWritten guarantee. The device must let the host address its
// pinned memory (backend.HostView; both backends do).
func (l *Lane) StagedInputs(st *Staged) ([][]byte, error) {
	if err := l.checkHome(st); err != nil {
		return nil, rejected("staged inputs", err)
	}
	hv, ok := l.dev.(backend.HostView)
	if !ok {
		return nil, rejected("staged inputs", fmt.Errorf("%w: Fix: this device does not let the host address its pinned memory (backend.HostView); pass the inputs to Replay", lanes.ErrStagedInput))
	}
	st.viewsTaken = true
	if st.stagingStale && st.known {
		// The last inputs went up from the caller's buffers: the staging
		// holds them again before the caller sees it.
		for slot, s := range st.inputs {
			if err := stageSlot(cuda.HostMemory(l.dev), s, st.lastInputs[st.inputMap[slot]]); err != nil {
				return nil, rejected("staged inputs", err)
			}
		}
	}
	st.stagingStale = false
	views := make([][]byte, len(st.inputs))
	for slot, s := range st.inputs {
		b, err := hv.HostBytes(s.Staging)
		if err != nil {
			return nil, rejected("staged inputs", err)
		}
		views[st.inputMap[slot]] = b
	}
	return views, nil
}

// checkBuilt refuses a nil program or one not built by NewStaged.
func checkBuilt(st *Staged) error {
	if st == nil || len(st.full.Entries) == 0 {
		return fmt.Errorf("%w: Fix: the staged program is nil or empty; prepare one from a lanes.StagedSpec with slots or compute (actors.Scheduler.PrepareStaged)", lanes.ErrStagedInput)
	}
	return nil
}

// checkHome refuses a program this lane did not prepare.
func (l *Lane) checkHome(st *Staged) error {
	if err := checkBuilt(st); err != nil {
		return err
	}
	switch home := st.home.Load(); {
	case home == nil:
		return fmt.Errorf("%w: Fix: the staged program was never prepared; call Prepare on this lane (%d) first", lanes.ErrStagedInput, l.id)
	case home != l && home.id == l.id:
		return fmt.Errorf("%w: lane %d was rebuilt after a hang since the staged program was prepared on it; prepare it again", lanes.ErrStagedLost, l.id)
	case home != l:
		return fmt.Errorf("%w: Fix: the staged program was prepared on lane %d, which alone replays it; replay it there, or prepare its spec again on lane %d", lanes.ErrStagedInput, home.id, l.id)
	}
	return nil
}

// ReplayWritten runs a staged program on the inputs written in place
// through StagedInputs, and waits for it (it blocks, as Replay). It always
// launches the full graph (the lane does not look at what was written), so
// the input copies run at the link's speed with no host copy before them.
func (l *Lane) ReplayWritten(st *Staged, collect bool) (lanes.StagedResult, error) {
	if err := l.checkHome(st); err != nil {
		return lanes.StagedResult{}, rejected("staged replay", err)
	}
	st.takeForget()
	// The staging holds inputs the lane never saw: none are known, to
	// compare with or to repeat.
	st.known = false
	l.staged.Uploads += uint64(len(st.inputs))
	for _, s := range st.inputs {
		l.staged.HostToDeviceBytes += s.Staging.Length
	}
	return l.runStaged(st, false, collect, nil, nil)
}

// runStaged submits the full or resident-input variant and waits for it;
// while it runs, the lane keeps its copy of remember (the new inputs just
// staged), so that copy costs no time the device does not spend anyway.
// With collect, it reads the outputs back into the output cache, and
// hands them over in into (when not nil) or in fresh copies.
func (l *Lane) runStaged(st *Staged, resident, collect bool, remember, into [][]byte) (lanes.StagedResult, error) {
	batch := st.full
	if resident {
		batch = st.resident
	}
	return l.runBatch(st, batch, resident, collect, remember, into)
}

// runBatch is runStaged with the batch given: the full or resident-input
// variant, or the resident one after uploads from the caller's pinned
// buffers (uploadInPlace).
func (l *Lane) runBatch(st *Staged, batch lanes.Batch, resident, collect bool, remember, into [][]byte) (lanes.StagedResult, error) {
	const op = "staged replay"
	st.initialized, st.outValid = false, false // until this replay ends well
	sub, err := l.Submit(batch)
	if err != nil {
		if remember != nil {
			// New inputs staged but never kept: nothing to repeat, rather
			// than the inputs of an older replay.
			st.known = false
		}
		return lanes.StagedResult{}, err
	}
	l.staged.GraphLaunches += uint64(len(sub.Attribution.Segments))
	if remember != nil {
		st.rememberInputs(remember)
	}
	r, err := l.Wait(sub.Fence)
	if err != nil {
		return lanes.StagedResult{}, err
	}
	if r.Outcome != lanes.OutcomeSucceeded {
		return lanes.StagedResult{Receipt: r}, failed(op, r.Err)
	}
	res := lanes.StagedResult{DeviceTime: r.DeviceTime, TimeKnown: r.DeviceTime > 0, Resident: resident, Receipt: r}
	// The device's inputs are the kept ones, unless they were written in
	// place (ReplayWritten: none are known).
	st.initialized = st.known
	if collect {
		if err := l.collectOutputs(cuda.HostMemory(l.dev), st); err != nil {
			return res, failed(op, err)
		}
		st.outValid = true
		res.Outputs = st.handOver(into)
	}
	return res, nil
}

// StagedInputKey is the exact key over the inputs now staged for st, as
// last passed to Replay: the SHA-256 of the number of inputs, then, for
// each input in logical order, its length and its bytes (counts and lengths
// as 8-byte little-endian integers; the bytes unpadded). Computed when
// asked, never on the replay path. It fails when
// the staging holds inputs written in place (ReplayWritten), whose
// lengths the lane does not know.
func (l *Lane) StagedInputKey(st *Staged) ([32]byte, error) {
	if err := l.checkHome(st); err != nil {
		return [32]byte{}, rejected("staged input key", err)
	}
	if !st.initialized {
		return [32]byte{}, fmt.Errorf("%w: Fix: no inputs passed to Replay are staged (none yet, a failed replay, or inputs written in place)", lanes.ErrStagedInput)
	}
	inputs := st.lastInputs
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
	return k, nil
}

// rememberInputs keeps a copy of what was staged, reusing its buffers:
// the inputs now known.
func (st *Staged) rememberInputs(inputs [][]byte) {
	if len(st.lastInputs) != len(inputs) {
		st.lastInputs = make([][]byte, len(inputs))
	}
	for i, in := range inputs {
		if cap(st.lastInputs[i]) < len(in) {
			st.lastInputs[i] = make([]byte, len(in))
		}
		st.lastInputs[i] = st.lastInputs[i][:len(in)]
		bulk.Copy(st.lastInputs[i], in)
	}
	st.known = true
}

// checkReplay refuses a replay the device cannot stage or whose inputs do
// not fit the program's slots.
func (l *Lane) checkReplay(st *Staged, inputs [][]byte) (cuda.HostMemory, error) {
	hm := cuda.HostMemory(l.dev)
	if len(inputs) != len(st.inputs) {
		return nil, fmt.Errorf("%w: Fix: the staged program expects %d input(s) but received %d", lanes.ErrStagedInput, len(st.inputs), len(inputs))
	}
	for slot, s := range st.inputs {
		logical := st.inputMap[slot]
		if n := uint64(len(inputs[logical])); n > s.Staging.Length {
			return nil, fmt.Errorf("%w: Fix: input %d holds %d bytes but its staging slot %d holds %d; pass at most %d bytes or rebuild the program with a larger slot",
				lanes.ErrStagedInput, logical, n, slot, s.Staging.Length, s.Staging.Length)
		}
	}
	return hm, nil
}

// stageInputs writes new inputs into their pinned staging slots, zero
// padded (stageSlot).
func (l *Lane) stageInputs(hm cuda.HostMemory, st *Staged, inputs [][]byte) error {
	for slot, s := range st.inputs {
		if err := stageSlot(hm, s, inputs[st.inputMap[slot]]); err != nil {
			return err
		}
		l.staged.HostToDeviceBytes += s.Staging.Length
		l.staged.Uploads++
	}
	return nil
}

// stageSlot writes one input into its slot's staging, zero padded: in
// place where the host addresses the staging (one copy, and zeroes only
// past the input), else through WriteHost.
func stageSlot(hm cuda.HostMemory, s lanes.Slot, in []byte) error {
	if hv, direct := hm.(backend.HostView); direct {
		b, err := hv.HostBytes(s.Staging)
		if err != nil {
			return err
		}
		clear(b[bulk.Copy(b, in):])
	} else {
		padded := make([]byte, s.Staging.Length)
		copy(padded, in)
		if err := hm.WriteHost(s.Staging, padded); err != nil {
			return err
		}
	}
	return nil
}

// collectOutputs reads the outputs back from their staging slots into the
// program's output cache (logical order, reusing its buffers).
func (l *Lane) collectOutputs(hm cuda.HostMemory, st *Staged) error {
	if len(st.outputsCache) != len(st.outputs) {
		st.outputsCache = make([][]byte, len(st.outputs))
	}
	for slot, s := range st.outputs {
		logical := st.outputMap[slot]
		b := st.outputsCache[logical]
		if uint64(cap(b)) < s.Staging.Length {
			b = make([]byte, s.Staging.Length)
		}
		b = b[:s.Staging.Length]
		if err := readStaging(hm, s.Staging, b); err != nil {
			return err
		}
		st.outputsCache[logical] = b
		l.staged.DeviceToHostBytes += s.Staging.Length
		l.staged.Readbacks++
	}
	return nil
}

// readStaging copies pinned host memory into dst: in place where the host
// addresses it (split across cores when large), else through ReadHost.
func readStaging(hm cuda.HostMemory, src cuda.HostRegion, dst []byte) error {
	hv, direct := hm.(backend.HostView)
	if !direct {
		return hm.ReadHost(src, dst)
	}
	b, err := hv.HostBytes(src)
	if err != nil {
		return err
	}
	if len(b) != len(dst) {
		return fmt.Errorf("%w: Fix: reading %d staged bytes into %d; the host view and the slot disagree", lanes.ErrStagedInput, len(b), len(dst))
	}
	bulk.Copy(dst, b)
	return nil
}

func equalInputs(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bulk.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// handOver gives the cached outputs to the caller: copied into into, or
// into fresh slices when into is nil.
func (st *Staged) handOver(into [][]byte) [][]byte {
	if into != nil {
		for i, b := range st.outputsCache {
			bulk.Copy(into[i], b)
		}
		return into
	}
	out := make([][]byte, len(st.outputsCache))
	for i, b := range st.outputsCache {
		if len(b) < bulk.Threshold {
			out[i] = bytes.Clone(b) // one pass, nothing zeroed first
			continue
		}
		out[i] = make([]byte, len(b))
		bulk.Copy(out[i], b)
	}
	return out
}

// ForgetOutputs drops the program's output cache and its record of the
// inputs on the device: the next replay stages its inputs and runs the
// full graph even when they are the same. Call it when something other
// than Replay's inputs changed what the program computes (device memory it
// reads, its input regions included, written by other work): the output
// cache and the resident-input variant assume the outputs are a function
// of the inputs alone. It is safe to call from any goroutine, also while
// the program replays (it applies from the next replay).
func (st *Staged) ForgetOutputs() {
	if st != nil {
		st.forget.Store(true)
	}
}

// takeForget applies a ForgetOutputs: no output cache, and the inputs on
// the device no longer stand for the last staged ones.
func (st *Staged) takeForget() {
	if st.forget.Swap(false) {
		st.outValid, st.initialized = false, false
	}
}
