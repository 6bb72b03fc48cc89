// Modules of one's own kernels on lane hosts: a host loads the modules it
// is configured with (HostConfig.Modules) at Serve, and those a front
// sends in its Welcome (FrontConfig.Modules) before it serves the front,
// refusing a module it cannot load, or one that differs from the module of
// that name it has.

package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"unicode/utf8"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/wirepb"
)

// Bounds of the modules a front sends its hosts.
const (
	MaxModuleBytes   = 256 << 20 // one module's image
	MaxModules       = 64        // a front's modules
	MaxModuleKernels = 1 << 10   // one module's kernels
)

// ModuleSum identifies a module by its name, image and declarations: two
// modules of one name load as one only when their sums are equal.
type ModuleSum [sha256.Size]byte

func sumOf(m kernels.Module) ModuleSum {
	h := sha256.New()
	put := func(b []byte) {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put([]byte(m.Name))
	put(m.Image)
	for _, name := range m.Kernels.Names() {
		put([]byte(name))
		for _, p := range m.Kernels[name].Spec.Params {
			put([]byte(p.Name))
			h.Write([]byte{byte(p.Kind), byte(p.Elem), byte(p.Access)})
		}
	}
	var s ModuleSum
	h.Sum(s[:0])
	return s
}

// ModulesToWire checks a front's modules and encodes them for its
// Welcomes: each as kernels.Module.Check finds it (a Go reference is not
// needed: it does not cross), their names and kernel names unique, each
// image at most MaxModuleBytes.
func ModulesToWire(ms []kernels.Module) ([]*wirepb.Module, error) {
	if len(ms) > MaxModules {
		return nil, fmt.Errorf("%w: %d modules; a front sends at most %d", ErrConfig, len(ms), MaxModules)
	}
	var out []*wirepb.Module
	loaded := kernels.Registry{}
	names := map[string]bool{}
	for _, m := range ms {
		switch {
		case names[m.Name]:
			return nil, fmt.Errorf("%w: %w: module %q given twice", ErrConfig, kernels.ErrInvalidModule, m.Name)
		case len(m.Image) > MaxModuleBytes:
			return nil, fmt.Errorf("%w: %w: module %q is %d bytes; a front sends at most %d", ErrConfig, kernels.ErrInvalidModule, m.Name, len(m.Image), MaxModuleBytes)
		case len(m.Kernels) > MaxModuleKernels:
			return nil, fmt.Errorf("%w: %w: module %q declares %d kernels; at most %d", ErrConfig, kernels.ErrInvalidModule, m.Name, len(m.Kernels), MaxModuleKernels)
		case !utf8.ValidString(m.Name) || len(m.Name) > cuda.MaxKernelName:
			return nil, fmt.Errorf("%w: %w: module name %.40q: UTF-8 of at most %d bytes", ErrConfig, kernels.ErrInvalidModule, m.Name, cuda.MaxKernelName)
		}
		if err := m.Check(loaded, false); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		names[m.Name] = true
		w := &wirepb.Module{Name: m.Name, Image: m.Image}
		for _, name := range m.Kernels.Names() {
			loaded[name] = m.Kernels[name]
			d := &wirepb.KernelDecl{Name: name}
			for _, p := range m.Kernels[name].Spec.Params {
				d.Params = append(d.Params, &wirepb.ParamDecl{Name: p.Name, Kind: uint32(p.Kind), Elem: uint32(p.Elem), Access: uint32(p.Access)})
			}
			w.Kernels = append(w.Kernels, d)
		}
		out = append(out, w)
	}
	return out, nil
}

// ModuleFromWire decodes a module a front sent: its kernels carry their
// declared parameters alone (no extent check, no Go reference).
func ModuleFromWire(w *wirepb.Module) (kernels.Module, error) {
	switch {
	case w == nil:
		return kernels.Module{}, WireErr("a nil module")
	case len(w.Image) > MaxModuleBytes || len(w.Kernels) > MaxModuleKernels || len(w.Name) > cuda.MaxKernelName || !utf8.ValidString(w.Name):
		return kernels.Module{}, WireErr("module %.40q: past the wire's bounds", w.Name)
	}
	m := kernels.Module{Name: w.Name, Image: w.Image, Kernels: kernels.Registry{}}
	for _, d := range w.Kernels {
		if d == nil || len(d.Params) > 64 || !utf8.ValidString(d.Name) {
			return kernels.Module{}, WireErr("module %q: a malformed kernel", w.Name)
		}
		spec := cuda.KernelSpec{Name: d.Name}
		for _, p := range d.Params {
			if p == nil || p.Kind > math.MaxUint8 || p.Elem > math.MaxUint8 || p.Access > math.MaxUint8 || !utf8.ValidString(p.Name) {
				return kernels.Module{}, WireErr("module %q, kernel %q: a malformed parameter", w.Name, d.Name)
			}
			spec.Params = append(spec.Params, cuda.Param{Name: p.Name, Kind: cuda.ParamKind(p.Kind), Elem: cuda.ElementType(p.Elem), Access: cuda.Access(p.Access)})
		}
		if _, dup := m.Kernels[d.Name]; dup {
			return kernels.Module{}, WireErr("module %q declares kernel %q twice", w.Name, d.Name)
		}
		m.Kernels[d.Name] = &kernels.Kernel{Spec: spec}
	}
	return m, nil
}

// HostModules is what a host's devices have loaded of modules, by name.
type HostModules struct {
	mu   sync.Mutex
	Sums map[string]ModuleSum
}

// Load loads a module on every device of the host, unless a module of
// its name is loaded already: then it must be the same (the same image
// and declarations), or it is refused.
func (hm *HostModules) Load(devs []cuda.Device, m kernels.Module) error {
	hm.mu.Lock()
	defer hm.mu.Unlock()
	sum := sumOf(m)
	if have, ok := hm.Sums[m.Name]; ok {
		if have != sum {
			return fmt.Errorf("%w: module %q differs from the module of that name this host has loaded (another image or other kernel declarations): name a new build of a module anew", kernels.ErrInvalidModule, m.Name)
		}
		return nil
	}
	for _, d := range devs {
		loader, ok := d.(kernels.Loader)
		if !ok {
			return fmt.Errorf("%w: device %s loads no modules", kernels.ErrInvalidModule, d.Info().Name)
		}
		if err := loader.LoadModule(m); err != nil {
			return fmt.Errorf("module %q on device %s: %w", m.Name, d.Info().Name, err)
		}
	}
	hm.Sums[m.Name] = sum
	return nil
}
