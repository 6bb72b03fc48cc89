// Every handle a batch names, in the one walk lanes and the scheduler
// share.

package lanecore

import (
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	lanes "github.com/lanesched/lanes/lanes"
)

// ForHandles calls buffer for every device buffer batch b names and host
// for every pinned host buffer, and stops at the first error: the entries'
// commands (their regions in [cuda.Command.ForRegions] order, then a stage
// command's staging), the patches (a typed patch's layout region, an opaque
// one's destination) and the retained buffers. An invocation names no
// buffer itself: it replays its program's. Lanes validate every handle it
// visits, and a scheduler checks every one's ownership, through this one
// walk.
func ForHandles(b *lanes.Batch, buffer func(cuda.Buffer) error, host func(cuda.HostBuffer) error) error {
	for i := range b.Entries {
		c := &b.Entries[i].Command
		if b.Entries[i].Invoke != nil {
			continue
		}
		if err := backend.ForRegions(*c, func(r cuda.Region) error { return buffer(r.Buffer) }); err != nil {
			return err
		}
		if c.Kind == cuda.KindStageIn || c.Kind == cuda.KindStageOut {
			if err := host(c.Staging.Buffer); err != nil {
				return err
			}
		}
	}
	for _, p := range b.Patches {
		dst := p.Dst
		if p.Layout != nil {
			dst = p.Layout.Region
		}
		if err := buffer(dst.Buffer); err != nil {
			return err
		}
	}
	for _, r := range b.Retain {
		if err := buffer(r); err != nil {
			return err
		}
	}
	return nil
}
