// Staged replays that upload new inputs straight from the caller's pinned
// buffers (pins.go), then launch the resident-input graph.

package lanecore

import (
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"

	lanes "github.com/lanesched/lanes/lanes"
)

// uploadInPlace builds the batch that stages st's new inputs with no host
// copy of those the lane has pinned where the caller keeps them (inputs of
// MinPinnedInput bytes or more, in a buffer passed to a recent replay;
// see Lane.pinned): each such input is copied to the device
// straight from the caller's buffer, its slot's tail zeroed on the device;
// the others are copied into their staging and copied up from there; then
// the resident-input graph runs. It reports false, having done nothing,
// when no input is pinned: the full graph then stages them all. callers
// is false for Repeat, whose inputs are the lane's own copy.
func (l *Lane) uploadInPlace(hm cuda.HostMemory, st *Staged, inputs [][]byte, callers bool) (lanes.Batch, bool, error) {
	if st.viewsTaken {
		// The caller addresses the staging (StagedInputs): it must keep
		// holding the last inputs, so they are copied there.
		return lanes.Batch{}, false, nil
	}
	pins, any := st.pinScratch[:0], false
	for slot := range st.inputs {
		logical := st.inputMap[slot]
		var p *pinnedInput
		if in := inputs[logical]; uint64(len(in))%st.inputs[slot].Device.Buffer.Elem.Size() == 0 {
			// (An input ending inside an element is copied into the
			// staging, which pads it: a device region ends on an element.)
			p = l.pinned(in, callers)
		}
		pins = append(pins, p)
		any = any || p != nil
	}
	st.pinScratch = pins
	if !any {
		return lanes.Batch{}, false, nil
	}
	entries := st.inPlace[:0]
	for slot, s := range st.inputs {
		in := inputs[st.inputMap[slot]]
		if pins[slot] == nil {
			if err := stageSlot(hm, s, in); err != nil {
				return lanes.Batch{}, false, err
			}
			c, err := cuda.StageIn(s.Device, s.Staging)
			if err != nil {
				return lanes.Batch{}, false, err
			}
			entries = append(entries, lanes.Eager(cache.PhaseDynamicBinding, c))
			l.staged.HostToDeviceBytes += s.Staging.Length
			l.staged.Uploads++
			continue
		}
		// The caller's buffer itself, not a copy (cuda.Upload would copy
		// it): Replay blocks until the upload ran, and the lane keeps the
		// buffer pinned and reachable meanwhile.
		n := uint64(len(in))
		up := cuda.Command{Kind: cuda.KindUpload, Dst: cuda.Region{Buffer: s.Device.Buffer, Offset: s.Device.Offset, Length: n}, Host: in}
		if err := up.Validate(); err != nil {
			return lanes.Batch{}, false, err
		}
		entries = append(entries, lanes.Eager(cache.PhaseDynamicBinding, up))
		if n < s.Device.Length {
			z, err := cuda.Zero(cuda.Region{Buffer: s.Device.Buffer, Offset: s.Device.Offset + n, Length: s.Device.Length - n})
			if err != nil {
				return lanes.Batch{}, false, err
			}
			entries = append(entries, lanes.Eager(cache.PhaseDynamicBinding, z))
		}
		l.staged.HostToDeviceBytes += s.Staging.Length
		l.staged.Uploads++
		l.staged.PinnedUploads++
	}
	entries = append(entries, st.resident.Entries...)
	st.inPlace = entries
	st.stagingStale = true
	return lanes.Batch{Path: lanes.PathReplayedOnly, Timing: lanes.TimingCompletion, Entries: entries}, true, nil
}
