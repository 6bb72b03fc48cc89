// One's own kernels on the simulated device: modules loaded with their Go
// references, and the launch-size limit every kernel carries here.

package sim

import (
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/ptx"
)

// LoadModule loads a module of one's own kernels (see [kernels.Module]):
// the simulated device runs each through its Go reference, so a kernel
// without one is refused, as is a name the device has loaded already. A
// PTX image is read as the driver reads it: a kernel the image does not
// hold, or declared with other parameters than its .entry has (their
// count, each one's size), is refused with the driver's error, and a
// kernel's .maxntid or .reqntid bounds its blocks as on the GPU. A cubin
// or fatbin image, which only the driver reads, is taken as declared, with
// a note (ModuleNotes). On an error nothing is loaded.
func (d *device) LoadModule(m kernels.Module) error {
	const op = "load module"
	if err := d.check(op); err != nil {
		return err
	}
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	cur := d.kernels()
	if err := m.Check(cur, true); err != nil {
		return err
	}
	entries, read, err := ptx.CheckImage(m)
	if err != nil {
		return err
	}
	loaded := limitLaunches(m.Kernels, d.maxThreads)
	if read {
		for name, k := range loaded {
			if bound := entries[name].MaxBlockThreads; bound > 0 && (k.Spec.MaxBlockThreads == 0 || bound < uint64(k.Spec.MaxBlockThreads)) {
				k.Spec.MaxBlockThreads = uint32(min(bound, 1<<31))
			}
		}
	} else {
		d.notes = append(d.notes, fmt.Sprintf("module %q: the image is not PTX text (a cubin or fatbin); its kernels' declarations are taken as given here and checked by the GPU's driver alone", m.Name))
	}
	d.setRegistry(cur.With(loaded))
	return nil
}

// ModuleNotes says what the device could not check of the modules it
// loaded: one line per module whose image it cannot read.
func (d *device) ModuleNotes() []string {
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	return slices.Clone(d.notes)
}

// limitLaunches is a copy of a registry whose kernels refuse launches of
// more than max threads.
func limitLaunches(r kernels.Registry, max uint64) kernels.Registry {
	out := make(kernels.Registry, len(r))
	for name, k := range r {
		c := k.Clone()
		if c.Spec.MaxThreads == 0 || c.Spec.MaxThreads > max {
			c.Spec.MaxThreads = max
		}
		out[name] = c
	}
	return out
}
