// Checking a batch at the lane: its shape, its handles, its commands.

package lanecore

import (
	"fmt"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanes "github.com/lanesched/lanes/lanes"
)

// validate checks everything about a batch that needs no enqueue.
func (l *Lane) validate(b *lanes.Batch) error {
	if len(b.Entries) == 0 {
		return invalid("the batch has no entries; submit at least one command")
	}
	if b.Path > lanes.PathReplayedWithBoundaries {
		return invalid("unknown compute path %d", b.Path)
	}
	if b.Timing > lanes.TimingVerification {
		return invalid("unknown timing mode %d", b.Timing)
	}
	if b.Path == lanes.PathReplayedWithBoundaries && len(b.EagerBoundaries) == 0 {
		return invalid("path %v needs declared eager boundaries; use %v instead", b.Path, lanes.PathReplayedOnly)
	}
	if b.Program != nil {
		if err := b.Program.Validate(); err != nil {
			return err
		}
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		if e.Node < cache.NoNode {
			return invalid("entry %d names plan node %d; use a node >= 0 or cache.NoNode", i, e.Node)
		}
		if b.Program != nil && e.Node >= b.Program.Nodes {
			return invalid("entry %d names node %d of a %d-node program", i, e.Node, b.Program.Nodes)
		}
		if e.Phase > cache.PhaseReadout {
			return invalid("entry %d has unknown phase %d", i, e.Phase)
		}
		if e.Work.Form > lanes.FormWave {
			return invalid("entry %d has unknown batching form %d", i, e.Work.Form)
		}
		if e.Invoke != nil {
			if e.Command.Kind != 0 || e.Replay != nil {
				return invalid("entry %d invokes a program segment and also carries a command; give one or the other", i)
			}
			if e.Phase != cache.PhaseCompute {
				return invalid("entry %d invokes a program segment in phase %v; invocations are compute", i, e.Phase)
			}
			if _, err := l.catalog.Resolve(*e.Invoke, b.Timing == lanes.TimingVerification); err != nil {
				return err
			}
			continue
		}
		if err := l.validateCommand(i, e.Command); err != nil {
			return err
		}
		if e.Replay != nil {
			if n := backend.RegionCount(e.Command); len(e.Replay.Scopes) != n {
				return invalid("entry %d declares %d region scopes for a command with %d regions; attribution lengths must agree", i, len(e.Replay.Scopes), n)
			}
		}
	}
	return l.checkHandles(b)
}

// checkHandles checks that every buffer the batch names is live on the
// lane's device, exactly as allocated, before anything is enqueued: a freed,
// forged or foreign handle is the caller's error, never the stream's. A
// handle the lane found live is not asked about again while the device has
// freed nothing since (cuda.Device.Frees): a tenant's steady steps name the
// same few buffers.
func (l *Lane) checkHandles(b *lanes.Batch) error {
	if frees := l.dev.Frees(); frees != l.liveFrees {
		l.live, l.liveFrees = l.live[:0], frees
	}
	return ForHandles(b, func(buf cuda.Buffer) error {
		for _, s := range l.live {
			if s == buf {
				return nil
			}
		}
		if buf.ID == 0 {
			// As a command naming it is answered (a region of no
			// allocated buffer), wherever the batch names it.
			return cuda.Contractf("validate", cuda.ErrStaleHandle, "the zero Buffer names no buffer; name one the device allocated")
		}
		if err := l.dev.CheckBuffer(buf); err != nil {
			return invalidHandle(err)
		}
		if len(l.live) == maxLive {
			l.live = l.live[:0]
		}
		l.live = append(l.live, buf)
		return nil
	}, func(h cuda.HostBuffer) error {
		if err := l.dev.CheckHost(h); err != nil {
			return invalidHandle(err)
		}
		return nil
	})
}

// maxLive bounds the handles a lane remembers as live (the scan is linear;
// past it the lane starts over).
const maxLive = 32

// invalidHandle is a device's refusal of a handle as a batch error: it
// wraps both, so errors.Is finds lanes.ErrInvalidBatch and the device's
// sentinel (cuda.ErrStaleHandle, say).
func invalidHandle(err error) error {
	return fmt.Errorf("%w: %w", lanes.ErrInvalidBatch, err)
}

// validateCommand checks a command against the lane's device without
// enqueuing it: structure, kernel, and that every region is of this device.
func (l *Lane) validateCommand(i int, c cuda.Command) error {
	inst := l.dev.Info().Instance
	err := backend.ValidateFor("validate", c, l.dev.Kernels(), func(b cuda.Buffer) error {
		if b.Device != inst {
			return cuda.Contractf("validate", cuda.ErrForeignHandle, "buffer %d belongs to device instance %d, not this lane's %d", b.ID, b.Device, inst)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("entry %d: %w", i, err)
	}
	return nil
}

// coalesce turns a batch's patches into commands: every typed patch of one
// layout into one aggregate upload that covers the layout exactly (each
// field written exactly once), and the opaque patches into one eager prelude
// of uploads. Any mismatch is rejected.
func coalesce(patches []lanes.Patch) (prelude []cuda.Command, err error) {
	var layout *lanes.Layout
	var payload []byte
	var written []bool
	for i, p := range patches {
		if p.Layout == nil {
			if len(p.Bytes) == 0 {
				return nil, fmt.Errorf("%w: opaque patch %d is empty", lanes.ErrPatch, i)
			}
			up, err := cuda.Upload(p.Dst, p.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: opaque patch %d: %w", lanes.ErrPatch, i, err)
			}
			prelude = append(prelude, up)
			continue
		}
		if layout == nil {
			if err := p.Layout.Validate(); err != nil {
				return nil, err
			}
			layout, payload, written = p.Layout, make([]byte, p.Layout.Region.Length), make([]bool, len(p.Layout.Fields))
		} else if p.Layout.ID != layout.ID || p.Layout.Region != layout.Region {
			return nil, fmt.Errorf("%w: patch %d writes layout %s, the batch already patches %s; one aggregate covers one layout", lanes.ErrPatch, i, p.Layout.ID, layout.ID)
		}
		if p.Field < 0 || p.Field >= len(layout.Fields) {
			return nil, fmt.Errorf("%w: patch %d names field %d of layout %s, which has %d", lanes.ErrPatch, i, p.Field, layout.ID, len(layout.Fields))
		}
		f := layout.Fields[p.Field]
		if uint64(len(p.Bytes)) != f.Length {
			return nil, fmt.Errorf("%w: patch %d writes %d bytes into field %d of %d bytes", lanes.ErrPatch, i, len(p.Bytes), p.Field, f.Length)
		}
		if written[p.Field] {
			return nil, fmt.Errorf("%w: field %d of layout %s is patched twice", lanes.ErrPatch, p.Field, layout.ID)
		}
		written[p.Field] = true
		copy(payload[f.Offset:], p.Bytes)
	}
	if layout == nil {
		return prelude, nil
	}
	for i, w := range written {
		if !w {
			return nil, fmt.Errorf("%w: field %d of layout %s is not patched; the aggregate must cover the layout exactly", lanes.ErrPatch, i, layout.ID)
		}
	}
	for _, up := range prelude {
		if up.Dst.Overlaps(layout.Region) {
			return nil, fmt.Errorf("%w: an opaque patch overlaps layout %s", lanes.ErrPatch, layout.ID)
		}
	}
	agg, err := cuda.Upload(layout.Region, payload)
	if err != nil {
		return nil, fmt.Errorf("%w: layout %s: %w", lanes.ErrPatch, layout.ID, err)
	}
	return append([]cuda.Command{agg}, prelude...), nil
}

// rejected wraps an error caught before anything was enqueued.
func rejected(op string, err error) *lanes.Error { return laneerr.Wrap(op, true, err) }

// failed wraps an error after enqueue began.
func failed(op string, err error) *lanes.Error { return laneerr.Wrap(op, false, err) }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{lanes.ErrInvalidBatch}, args...)...)
}
