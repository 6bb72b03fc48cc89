// One's own kernels on the simulated device: modules loaded with their Go
// references, and the launch-size limit every kernel carries here.

package sim

import "github.com/lanesched/lanes/cuda/kernels"

// LoadModule loads a module of one's own kernels (see [kernels.Module]):
// the simulated device runs each through its Go reference, so a kernel
// without one is refused, as is a name the device has loaded already;
// the image is the real device's and is not read here. On an error
// nothing is loaded.
func (d *Device) LoadModule(m kernels.Module) error {
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
	d.setRegistry(cur.With(limitLaunches(m.Kernels, d.maxThreads)))
	return nil
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
